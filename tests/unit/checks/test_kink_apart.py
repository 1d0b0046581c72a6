"""A kink that the check's own cotangent hides is still a kink (rtdl's piecewise
linear encoding at a bin edge: a newcomer's trial's false alarm)."""

from __future__ import annotations

import itertools

import pytest
import torch

from fuzzdiff.checks.grad import APART, kink_pairs


def _two_bins(x):
    """A value's encoding in the bins [-1, 0] and [0, 1]: at x = 0 the first clamp
    sits at its upper bound and the second at its lower bound."""
    return [torch.stack([(x + 1).clamp(0, 1), x.clamp(0, 1)], -1)]


def test_a_kink_a_constant_cotangent_hides_is_seen_with_its_entries_apart():
    x = torch.zeros(1, dtype=torch.float64)
    v = [torch.ones(1, 2, dtype=torch.float64)]  # weighs both bins alike: right and left agree
    u = [torch.ones(1, dtype=torch.float64)]
    pairs = {name: (a, b) for name, a, b, _ in itertools.islice(kink_pairs(_two_bins, [x], v, u, 1e-6, finite=True), 3)}
    right, left = pairs["right and left derivatives along u"]
    assert right == pytest.approx(left)  # hidden by the constant cotangent
    right, left = next(sides for name, sides in pairs.items() if APART in name)
    assert abs(right - left) > 0.01, (right, left)


def test_a_smooth_point_has_no_kink_with_its_entries_apart():
    x = torch.full((1,), 0.5, dtype=torch.float64)
    v = [torch.ones(1, 2, dtype=torch.float64)]
    u = [torch.ones(1, dtype=torch.float64)]
    for name, right, left, noise in itertools.islice(kink_pairs(_two_bins, [x], v, u, 1e-6, finite=True), 3):
        assert right == pytest.approx(left, abs=1e-6), name
