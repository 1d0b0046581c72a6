"""fuzzdiff.campaign.plan: round 1's batch size, chosen from the budget."""

import pytest

from fuzzdiff.checks import get_check
from fuzzdiff.campaign.plan import MIN_EXAMPLES, SHARE, plan
from fuzzdiff.targets.target import Target
from fuzzdiff.campaign.worker import BatchSize


def _pairs(eager: int, compiling: int):
    fn = lambda x: x.sin()  # noqa: E731
    targets = [Target(f"unit_plan{k}", fn, "x: n") for k in range(max(eager, compiling))]
    grad, compiled = get_check("grad"), get_check("compile")
    return [(t, grad) for t in targets[:eager]] + [(t, compiled) for t in targets[:compiling]]


SIZE = BatchSize(examples=48)


def test_a_large_budget_keeps_the_full_batch_and_covers_compile():
    p = plan(_pairs(100, 10), SIZE, budget=10_000, jobs=2)
    assert p.examples == 48 and p.compile_covered == p.compile_pairs == 10
    assert "compile included" in p.describe()


def test_a_smaller_budget_shrinks_batches_before_it_drops_pairs():
    pairs = _pairs(2000, 500)
    sizes = [plan(pairs, SIZE, budget=b, jobs=2).examples for b in (250, 400, 800, 1600, 100_000)]
    assert sizes == sorted(sizes) and sizes[0] < 48 and sizes[-1] == 48
    small = plan(pairs, SIZE, budget=350, jobs=2)
    assert small.eager_fits and small.compile_covered < small.compile_pairs
    assert f"compile about {small.compile_covered:,} of 500 pairs" in small.describe()


def test_the_budget_it_names_covers_every_pair():
    pairs = _pairs(2000, 500)
    small = plan(pairs, SIZE, budget=350, jobs=2)
    enough = plan(pairs, SIZE, budget=small.full_budget * 1.001, jobs=2)
    assert enough.compile_covered == enough.compile_pairs or enough.examples > small.examples


def test_a_budget_too_small_for_the_sweep_says_so():
    p = plan(_pairs(5000, 0), SIZE, budget=1, jobs=1)
    assert p.examples == MIN_EXAMPLES and not p.eager_fits
    assert "--budget" in p.describe() and p.full_budget > 1 / SHARE


def test_a_pair_keeps_its_own_narrowing():
    (pair,) = _pairs(0, 1)
    p = plan([pair], SIZE, budget=10_000, jobs=2)
    assert p.size(SIZE, *pair).examples == SIZE.for_pair(*pair).examples < 48


@pytest.mark.parametrize("budget, jobs", [(0, 2), (-5, 2), (10, 0)])
def test_a_plan_needs_a_budget_and_a_worker(budget, jobs):
    with pytest.raises(ValueError, match="positive budget"):
        plan(_pairs(1, 0), SIZE, budget=budget, jobs=jobs)


def test_fuzzdiff_run_prints_its_plan(tmp_path, monkeypatch, capsys):
    from fuzzdiff import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--budget", "4", "--targets", "sin", "--checks", "grad", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert "plan: 4 s on 1 worker(s): every pair at" in err


def test_with_a_layout_tour_round_one_costs_one_tour_a_pair_whatever_the_size():
    """A pair's first batch is one tour of TOUR cases: round 1 costs that, at
    any size; the size chosen is the later rounds'."""
    pairs = _pairs(2000, 500)
    toured = [plan(pairs, SIZE, budget=b, jobs=2, tour=8) for b in (150, 1600)]
    assert toured[0].full_budget == pytest.approx(toured[1].full_budget)  # round 1 does not depend on the size
    assert toured[0].examples < toured[1].examples
    plain = plan(pairs, SIZE, budget=1600, jobs=2)
    assert plain.full_budget != toured[1].full_budget
    assert "one layout tour (up to 8 cases; 1 for a compiling pair)" in toured[0].describe()


def test_a_compiling_pairs_first_tour_costs_one_case():
    """A compile costs seconds: a compiling pair's first batch tours one class
    (fuzzdiff.search.layout_tour.first_tour), and round 1 is costed so."""
    pairs = _pairs(0, 100)
    toured = plan(pairs, SIZE, budget=1e6, jobs=1, tour=8)
    one = plan(pairs, SIZE, budget=1e6, jobs=1, tour=1)
    assert toured.full_budget == pytest.approx(one.full_budget)
    assert toured.full_budget < plan(pairs, SIZE, budget=1e6, jobs=1).full_budget
