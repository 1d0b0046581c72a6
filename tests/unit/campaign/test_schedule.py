"""The campaign's scheduler (fuzzdiff.campaign.schedule): rounds, scores, determinism, shards."""

import pytest

from fuzzdiff.campaign.schedule import BatchReport, PairState, Scheduler, Shard, batch_seed

PASS = BatchReport(examples=16)


def _drain(s: Scheduler, report=lambda index, batch: PASS, order=None) -> list[tuple[int, int]]:
    """Take every batch of the current round, then report them (in ``order``)."""
    taken = []
    while (job := s.take()) is not None:
        taken.append(job)
        if s._pending() == 0:
            break
    for index, batch in (order(taken) if order else taken):
        s.done(index, batch, report(index, batch))
    return taken


def test_round_one_gives_every_pair_one_batch_in_the_order_given():
    s = Scheduler(5, seed=0)
    first = _drain(s)
    assert first == [(i, 0) for i in range(5)]
    second = _drain(s)
    assert s.round == 2 and len(second) == 5 and all(batch >= 1 for _, batch in second)


def test_no_pair_starts_twice_before_all_have_started_even_with_workers_in_flight():
    s = Scheduler(4, seed=1)
    jobs = [s.take() for _ in range(3)]  # three workers busy
    s.done(*jobs[0], PASS)
    assert s.take() == (3, 0)  # the last pair of round 1, not a second batch of pair 0
    assert s.take() is None  # round 2 waits for round 1 to end
    for job in jobs[1:]:
        s.done(*job, PASS)
    s.done(3, 0, PASS)
    assert s.take() is not None and s.round == 2


def test_the_plan_is_deterministic_under_the_seed_whatever_order_batches_finish():
    def signals(index, batch):
        return BatchReport(examples=16, closest=(index % 4) / 4, inconclusive=index % 3,
                           features=frozenset({f"f{index % 5}", f"g{batch}"}))

    def run(seed, order=None):
        s = Scheduler(40, seed=seed)
        rounds = [_drain(s, signals, order) for _ in range(4)]
        return rounds, [p.batches for p in s.pairs]

    forward, backward = run(7), run(7, order=lambda jobs: jobs[::-1])
    assert forward == backward
    assert run(8)[0][1] != forward[0][1]  # another seed, another shuffle of round 2


def test_batches_go_where_the_signals_are_and_quiet_pairs_decay():
    near, unsure, quiet, unsupported = 0, 1, 2, 3
    reports = {near: BatchReport(examples=16, closest=0.9),
               unsure: BatchReport(examples=16, inconclusive=8),
               quiet: PASS, unsupported: BatchReport(examples=16, unsupported=16)}
    s = Scheduler(4, seed=3)
    for _ in range(4):
        _drain(s, lambda index, batch: reports[index])
    batches = [p.batches for p in s.pairs]
    assert batches[near] > batches[quiet] and batches[unsure] > batches[quiet]
    assert batches[unsupported] <= batches[quiet]
    assert s.pairs[quiet].score < 1 and s.pairs[unsupported].score < s.pairs[quiet].score


def test_a_pair_that_ended_gets_no_further_batch():
    s = Scheduler(3, seed=0)
    _drain(s, lambda index, batch: BatchReport(examples=1, ended=index == 1))
    for _ in range(3):
        taken = _drain(s)
        assert taken and all(index != 1 for index, _ in taken)


def test_new_features_and_cut_batches_raise_the_score():
    fresh, cut, plain = PairState(0), PairState(1), PairState(2)
    for p in (fresh, cut, plain):
        p.update(BatchReport(examples=4, features=frozenset({"a"})))
    fresh.update(BatchReport(examples=4, features=frozenset({"a", "stride0"})))
    cut.update(BatchReport(examples=4, cut=True))
    plain.update(BatchReport(examples=4, features=frozenset({"a"})))
    assert fresh.score > plain.score and cut.score > plain.score


def test_a_known_discrepancy_not_yet_matched_draws_batches_until_it_is():
    s = Scheduler(4, seed=0, known=[["torch bug A"], [], [], []])
    _drain(s)  # round 1: one batch each, nothing matched
    second = [i for i, _ in _drain(s, report=lambda i, b: BatchReport(examples=16, known=frozenset(["torch bug A"]))
                                     if i == 0 else PASS)]
    assert second.count(0) > max(second.count(i) for i in (1, 2, 3))
    s.settle()
    assert s.pairs[0].unmatched == set()  # matched in round 2: from then on scored like the others
    p = s.pairs[0]
    assert p.score == pytest.approx(0.5**p.quiet * (1 + p.signal))  # the prior's term is gone
    with pytest.raises(ValueError, match="each of the 2 pairs"):
        Scheduler(2, known=[["a"]])


def test_a_round_opens_with_one_batch_for_each_known_discrepancy_not_yet_matched():
    """A budget that ends round 2 after a few batches still re-verifies every
    recorded torch bug once, whatever the scores of the pairs that declare it."""
    known = [[], ["bug A"], ["bug A", "bug B"], [], ["bug C"], [], [], []]
    s = Scheduler(8, seed=5, known=known)
    near = {0, 3, 5, 6, 7}  # near-misses outscore every pair that declares a bug
    _drain(s, lambda i, b: BatchReport(examples=16, closest=0.9) if i in near
           else BatchReport(examples=16, known=frozenset(["bug C"]) if i == 4 else frozenset()))
    second = _drain(s)
    opening = [index for index, _ in second[:2]]
    assert sorted(opening) == [1, 2]  # bug A and bug B, each through a pair of its own
    assert 4 not in opening  # bug C was matched in round 1
    assert s.matched == {"bug C"}


def test_the_opening_takes_the_fastest_route_to_each_discrepancy_and_runs_the_fastest_first():
    """A compiling pair's batch takes seconds where an eager one's takes a tenth:
    the opening re-verifies what it can before the budget ends."""
    known = [["slow bug"], ["slow bug"], ["quick bug"], []]
    seconds = [8.0, 2.0, 0.1, 0.1]
    s = Scheduler(4, seed=0, known=known)
    _drain(s, lambda i, b: BatchReport(examples=4, seconds=seconds[i]))
    assert [index for index, _ in _drain(s)[:2]] == [2, 1]


def test_a_match_by_one_pair_verifies_the_discrepancy_for_every_pair_that_declares_it():
    s = Scheduler(3, seed=0, known=[["bug A"], ["bug A"], []])
    _drain(s, lambda i, b: BatchReport(examples=16, known=frozenset(["bug A"])) if i == 0 else PASS)
    s.settle()
    assert s.pairs[0].unmatched == s.pairs[1].unmatched == set()
    assert s.pairs[1].score == pytest.approx(s.pairs[2].score)  # no prior left for pair 1


def test_after_its_opening_a_round_runs_its_best_scored_pairs_first():
    s = Scheduler(6, seed=4)
    closest = [0.1, 0.9, 0.0, 0.5, 0.3, 0.7]
    _drain(s, lambda i, b: BatchReport(examples=16, closest=closest[i]))
    wave = [index for index, _ in _drain(s)]
    first = sorted(set(wave), key=wave.index)
    assert len(first) >= 4 and first == sorted(first, key=lambda i: -closest[i])


def test_rounds_bound_the_scheduler():
    s = Scheduler(3, seed=0, rounds=2)
    assert len(_drain(s)) == 3 and len(_drain(s)) == 3
    assert s.take() is None and s.round == 2


def test_batch_seeds_differ_per_pair_and_batch_and_repeat_per_campaign_seed():
    seeds = {batch_seed(1, key, b) for key in ("grad/sin", "grad/exp") for b in range(50)}
    assert len(seeds) == 100
    assert batch_seed(1, "grad/sin", 3) == batch_seed(1, "grad/sin", 3) != batch_seed(2, "grad/sin", 3)


def test_shards_partition_the_pairs_exactly():
    from fuzzdiff.checks import CHECKS
    from fuzzdiff.targets import all_targets
    keys = [f"{c}/{t.ref}" for t in all_targets() for c in CHECKS if CHECKS[c].why_not(t) is None]
    for n in (1, 2, 3, 7):
        shards = [Shard(i, n).select(keys) for i in range(1, n + 1)]
        assert sorted(k for shard in shards for k in shard) == sorted(keys)
        assert all(len(shard) > len(keys) / n / 2 for shard in shards)  # roughly balanced


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_malformed_shard_is_a_clear_error(text):
    with pytest.raises(ValueError, match="expected I/N"):
        Shard.parse(text)


def test_a_pairs_later_batches_go_to_the_worker_that_ran_its_last_one():
    """Where compiled callables and warm caches live (fuzzdiff.paths.compiled caches per process)."""
    s = Scheduler(6, seed=2)
    homes = {}
    for worker in (0, 1, 0, 1, 0, 1):
        index, batch = s.take(home=worker)
        homes[index] = worker
        s.done(index, batch, PASS, home=worker)
    served = []
    for worker in (1, 1, 1, 0, 0, 0):
        job = s.take(home=worker)
        served.append((worker, homes[job[0]]))
    assert s.round == 2 and all(worker == home for worker, home in served)


def test_settle_applies_a_round_cut_short():
    s = Scheduler(3, seed=0)
    for _ in range(3):
        index, batch = s.take()
        s.done(index, batch, BatchReport(examples=4, closest=0.5))
    assert [p.batches for p in s.pairs] == [0, 0, 0]  # applied at the round's end, not before
    s.settle()
    assert [p.batches for p in s.pairs] == [1, 1, 1] and all(len(p.scores) == 1 for p in s.pairs)
