"""fuzzdiff.campaign.results: a pair's batches added up, and a campaign's sums per check."""

import pickle

import pytest

from fuzzdiff.campaign.results import Campaign, Found, PairResult
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.fuzzing import Tally
from fuzzdiff.verdict import Verdict


def _tally(*kinds: str) -> Tally:
    tally = Tally()
    for kind in kinds:
        tally.add(Verdict(kind, ""))
    return tally


def _found(record_created: bool = True, whose: str = "pytorch") -> Found:
    return Found("grad", "t", Case("t", (Arg((2,)),)), Verdict("fail", "wrong"), "r.json", record_created,
                 {"whose": whose})


def test_a_pair_absorbs_its_batches_and_keeps_its_first_failure():
    total = PairResult("t", "grad", Tally())
    total.absorb(PairResult("t", "grad", _tally("pass", "pass"), seconds=1.0, cut=True))
    assert not total.ended and total.batches == 1 and total.cut and total.tally.examples == 2
    first, second = _found(), _found(record_created=False)
    total.absorb(PairResult("t", "grad", _tally("fail"), failure=first, seconds=2.0))
    total.absorb(PairResult("t", "grad", _tally("fail"), failure=second, error="later", seconds=0.5))
    assert total.failure is first and total.error == "later"  # each kept as first seen
    assert total.ended and total.failed and total.batches == 3 and total.seconds == pytest.approx(3.5)
    assert total.tally.counts == {"pass": 2, "fail": 2}
    assert total.new_records == 1


def test_a_batch_tells_the_scheduler_what_it_saw():
    batch = PairResult("t", "grad", _tally("pass", "inconclusive", "unsupported"), cut=True)
    report = batch.report()
    assert (report.examples, report.inconclusive, report.unsupported) == (3, 1, 1)
    assert report.cut and not report.ended


def test_a_campaign_sums_per_check_and_counts_what_never_started():
    campaign = Campaign()
    campaign.applicable.update({"catalog": 3, "opinfo": 2})
    campaign.applicable_checks.update({"grad": 3, "vmap": 2})
    crashed = PairResult("a", "grad", _tally("pass"), error="died", crashed=True, crash_records=["c.json"],
                         family="catalog", batches=1)
    failed = PairResult("b", "grad", _tally("pass", "fail"), failure=_found(), family="opinfo", batches=2)
    passed = PairResult("c", "vmap", _tally("pass"), family="catalog", batches=1)
    campaign.results += [crashed, failed, passed]
    assert campaign.skipped_for_budget == 2
    assert campaign.covered() == (3, 5) and campaign.covered("opinfo") == (1, 2)
    assert campaign.examples == 4 and campaign.failures == [crashed, failed]
    table = campaign.per_check()
    grad, vmap = table["grad"], table["vmap"]
    assert (grad["applicable"], grad["targets"], grad["batches"], grad["examples"]) == (3, 2, 3, 3)
    assert (grad["crashed"], grad["new records"], grad["pytorch's"], grad["yours"]) == (1, 2, 1, 0)
    assert (vmap["applicable"], vmap["targets"], vmap["pass"], vmap["crashed"]) == (2, 1, 1, 0)


def test_results_pickle_to_the_parent():
    result = PairResult("t", "grad", _tally("fail"), failure=_found())
    again = pickle.loads(pickle.dumps(result))
    assert again.failure.verdict.kind == "fail" and again.tally.counts == {"fail": 1}
