"""fuzzdiff.search.layout_tour: a pair's first examples meet every layout class that applies."""

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import InvalidArgument
from tests.unit.fdcampaign import installed
from tests.unit.fdhelpers import UNARY4, target

from fuzzdiff.campaign.worker import BatchSize, Job, WorkerSetup, run_batch
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.features import arg_features, case_features
from fuzzdiff.case.layout import Layout
from fuzzdiff.case.values import Values
from fuzzdiff.checks import get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.search.fuzzing import FuzzFailure, Search, fuzz
from fuzzdiff.search.layout_tour import TOUR, met, tour_classes, tour_order
from fuzzdiff.targets.target import Target
from strategies.cases import cases
from strategies.layouts import LAYOUT_CLASSES

ONE = settings(max_examples=1, database=None, deadline=None, derandomize=True)


@pytest.mark.parametrize("name", LAYOUT_CLASSES)
@settings(max_examples=25, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=__import__("hypothesis").strategies.data())
def test_a_forced_class_is_met_by_every_drawn_case(name, data):
    case = data.draw(cases(UNARY4, layout_class=name, min_side=2))
    assert name in met(case_features(case)), (name, case.args[0].layout)


def test_an_unknown_class_or_side_is_named():
    with pytest.raises(InvalidArgument, match="unknown layout class 'diagonal'"):
        cases(UNARY4, layout_class="diagonal").example()
    with pytest.raises(InvalidArgument, match="min_side must be an integer >= 0"):
        cases(UNARY4, min_side=-1).example()


def test_a_spec_bound_wins_over_the_tours_least_side():
    bounded = target("x: n<=1 m", torch.exp, "unit_bounded_side")
    drawn = cases(bounded, layout_class="sliced", min_side=2)

    @settings(max_examples=20, database=None, deadline=None)
    @given(drawn)
    def within(case):
        assert case.args[0].shape[0] <= 1 and case.args[0].shape[1] >= 2

    within()


def test_one_example_of_a_tour_meets_every_class_that_applies():
    grad = get_check("grad")
    assert tour_classes(grad, UNARY4, {}) == TOUR  # rank 4, functional: every class
    tally = fuzz(grad, UNARY4, FuzzConfig(seed=3, variants=1), settings=ONE, search=Search(tour=TOUR))
    assert met(tally.features) == set(TOUR) and tally.counts["pass"] == len(TOUR)
    vector = target("x: n", torch.exp, "unit_exp_vector")
    assert "permuted" not in tour_classes(grad, vector, {}) and "channels_last" not in tour_classes(grad, vector, {})
    assert "aliased" not in tour_classes(grad, UNARY4, {"alias": False})


def test_classes_that_met_root_causes_come_first_after_the_plain_case():
    def arg(strides, shape=(2, 3)):
        return Arg(shape, Values(), Layout(16, strides, 0))

    expanded = Case("t", (arg((1, 0)),), "float64", "cpu")
    offset = Case("t", (Arg((2, 3), Values(), Layout(10, (3, 1), 2)),), "float64", "cpu")
    order = tour_order([expanded, expanded, offset])
    assert order[:3] == ("contiguous", "stride0:last", "offset") and sorted(order) == sorted(TOUR)
    assert tour_order([]) == TOUR


def test_layout_features_name_each_class():
    def features(shape, strides, offset=0):
        return arg_features(Arg(shape, Values(), Layout(64, strides, offset)))

    assert "contiguous" in features((2, 3), (3, 1))
    assert {"sliced", "gapped"} <= features((2, 3), (6, 2))
    assert "sliced" not in features((2, 3), (1, 2)) and "permuted" in features((2, 3), (1, 2))
    assert {"stride0", "stride0:first"} <= features((2, 3), (0, 1))
    assert "stride0:last" in features((2, 3), (1, 0)) and "stride0:first" not in features((2, 3), (1, 0))
    assert "channels_last" in features((2, 3, 2, 2), (12, 1, 6, 3))


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with installed(tmp_path_factory.mktemp("zoo")) as module:
        yield module


def test_a_pairs_first_batch_finds_a_reduction_wrong_only_at_stride_0(zoo):
    """The planted bug of a sum over the last dim shows only where that dim
    is stride 0: the tour of a first batch meets it in one example."""
    setup = WorkerSetup(FuzzConfig(variants=1, structures=1), isolate=False)
    job = Job((0, 0), zoo.EXPANDED_SUM.ref, "grad", None, {}, 5, BatchSize(examples=1), tour=TOUR)
    result = run_batch(job, setup)
    assert result.failure is not None and result.failure.verdict.failed, result.tally.counts
    (x,) = result.failure.case.args
    assert x.shape[-1] > 1 and x.layout is not None and x.layout.strides[-1] == 0


def _contiguous_only(x):
    if not x.is_contiguous():
        raise RuntimeError("expected a contiguous input")
    return x.sin()


def test_a_class_the_target_refuses_leaves_the_tours_other_classes_judged():
    """native_group_norm refuses non-contiguous inputs (declared invalid): its
    tour's sliced case is a rejected draw, not a whole example rejected. Every
    example of its tour was, and the pair drew nothing at all."""
    refusing = Target("unit_contiguous_only", _contiguous_only, "x: n m", invalid=(("RuntimeError", "contiguous"),))
    grad = get_check("grad")
    tally = fuzz(grad, refusing, FuzzConfig(seed=1, variants=1, structures=1),
                 settings=settings(max_examples=3, database=None, deadline=None), search=Search(tour=TOUR))
    assert tally.rejected > 0 and tally.counts["pass"] >= 3, (tally.counts, tally.rejected)


def test_a_tour_is_a_random_example_so_it_finds_a_batched_scalars_lost_derivative():
    """Hypothesis's first example is its simplest: a vmap of the forward only,
    nothing batched but the first argument. A tour drawn as that example never
    batched the 0-dim ``s`` whose derivative the stand-in loses under vmap."""
    from tests.unit.targets.test_opinfo_scalars import planted_scale

    scaled = Target("unit_tour_batched_scalar", planted_scale, "x: n, s:")
    found = 0
    for seed in range(5):
        try:
            config = FuzzConfig(seed=seed, shrink_seconds=1)
            once = settings(max_examples=1, database=None, deadline=None)
            fuzz(get_check("vmap"), scaled, config, settings=once, search=Search(tour=TOUR))
        except FuzzFailure as failure:
            found += failure.verdict.failed
    assert found >= 4, found


def test_a_target_no_random_tour_fits_gets_the_simplest_tour():
    """scatter_add's index must fit the dims of two other arguments: a random
    tour of eight such cases hardly ever does. With the simplest example
    invalid, every pair of it was "Unsatisfiable", reported as a failure."""
    from hypothesis import HealthCheck

    from fuzzdiff.targets import get_target

    quiet = settings(max_examples=1, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    tally = fuzz(get_check("grad"), get_target("scatter_add_larger_src"), FuzzConfig(seed=1, variants=1),
                 settings=quiet, search=Search(tour=TOUR))
    assert tally.drawn >= 2 and tally.counts["pass"] >= 2, (tally.drawn, tally.counts)


def test_the_pairs_of_a_compiling_check_take_the_classes_in_turn():
    """Each compiling pair tours one class, starting at its turn; an eager pair tours them all."""
    from fuzzdiff.search.layout_tour import COMPILING_TOUR, first_tour

    assert first_tour(TOUR, False, 5) == (TOUR, None)
    firsts = []
    for turn in range(2 * len(TOUR)):
        order, cases = first_tour(TOUR, True, turn)
        assert cases == COMPILING_TOUR == 1 and sorted(order) == sorted(TOUR)
        firsts.append(order[0])
    assert Counter(firsts) == {c: 2 for c in TOUR}
