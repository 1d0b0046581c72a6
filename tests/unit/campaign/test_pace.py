"""fuzzdiff.campaign.pace: round 1's tours narrow only where its measured pace
would leave pairs unswept within the share of the budget."""

from __future__ import annotations

from collections import Counter

from fuzzdiff.campaign.pace import MIN_TOUR, SAMPLE, Pace
from fuzzdiff.campaign.plan import SHARE
from fuzzdiff.search.layout_tour import TOUR, first_tour


def _paced(pairs: int, slots: int, seconds: float) -> Pace:
    pace = Pace(pairs, slots)
    for _ in range(SAMPLE * slots):
        pace.started += 1
        pace.ended_batch(seconds)
    return pace


def test_a_pace_that_fits_the_share_keeps_every_tour_whole():
    pace = _paced(1000, 2, 0.5)  # 992 pairs left at 0.5 s on 2 slots: 248 s of 300 s
    assert pace.cases(len(TOUR), elapsed=0.0, budget=600.0) is None


def test_a_pace_that_would_leave_pairs_unswept_narrows_the_tours():
    pace = _paced(1000, 2, 1.0)  # 496 s of round 1 left against the share's 300 s
    cases = pace.cases(len(TOUR), elapsed=0.0, budget=600.0)
    assert cases is not None and MIN_TOUR <= cases < len(TOUR)
    assert cases == int(len(TOUR) * SHARE * 600.0 / ((1000 - SAMPLE * 2) * 1.0 / 2))
    assert pace.cases(len(TOUR), elapsed=SHARE * 600.0, budget=600.0) == MIN_TOUR  # the share spent


def test_no_pace_before_enough_batches_ended_nor_without_a_budget():
    pace = Pace(1000, 2)
    pace.ended_batch(50.0)
    assert pace.cases(len(TOUR), elapsed=0.0, budget=600.0) is None
    assert _paced(1000, 2, 50.0).cases(len(TOUR), elapsed=0.0, budget=None) is None


def test_cheaper_batches_widen_the_tours_again():
    pace = _paced(1000, 2, 1.0)
    narrow = pace.cases(len(TOUR), 0.0, 600.0)
    for _ in range(200):
        pace.ended_batch(0.2)
    assert pace.cases(len(TOUR), 0.0, 600.0) is None or pace.cases(len(TOUR), 0.0, 600.0) > narrow


def test_narrowed_tours_take_the_classes_in_turn():
    firsts = Counter()
    for turn in range(2 * len(TOUR)):
        order, cases = first_tour(TOUR, False, turn, 3)
        assert cases == 3 and sorted(order) == sorted(TOUR)
        firsts[order[0]] += 1
    assert firsts == {c: 2 for c in TOUR}
    assert first_tour(TOUR, False, 3, len(TOUR)) == (TOUR, None)  # nothing to narrow
