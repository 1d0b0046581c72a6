"""The compile check compares a stride-0 leaf's gradient per memory location:
how a backward splits it over the entries that share one is a convention
(fuzzdiff.paths.compiled.per_location)."""

from __future__ import annotations

from pathlib import Path

import torch

from fuzzdiff.record.files import read_record
from fuzzdiff.paths.compiled import per_location
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets import get_target

# torch 2.13.0: torch.compile(dynamic=True) of reshape gives this stride-0 leaf the
# cotangent's mean ([0.5, 0.5]) where eager passes the cotangent through ([1.5, -0.5])
SPLIT_APART = Path(__file__).parent / "data" / "stride0_reshape_compile.json"


def test_gradients_that_split_one_sum_differently_agree_and_other_sums_do_not():
    leaf = torch.tensor([0.75, 0.5, 0.25], dtype=torch.float64).as_strided((2, 3), (0, 1))
    eager = torch.tensor([[1.5, 1.0, 2.0], [-0.5, 1.0, 0.0]], dtype=torch.float64)
    even = torch.tensor([[0.5, 1.0, 1.0], [0.5, 1.0, 1.0]], dtype=torch.float64)
    assert per_location(eager, leaf).shape == (1, 3)
    assert torch.equal(per_location(eager, leaf), per_location(even, leaf))
    wrong = even.clone()
    wrong[1, 0] += 0.25
    assert not torch.equal(per_location(eager, leaf), per_location(wrong, leaf))
    dense = torch.zeros(2, 3, dtype=torch.float64)
    assert per_location(eager, dense) is eager  # a leaf without stride-0 dims: compared entry by entry


def test_a_compiled_gradient_split_evenly_over_a_stride0_leaf_passes():
    case = read_record(SPLIT_APART).case
    assert case.stride0
    verdict = run_check("compile", get_target("reshape"), case)
    assert verdict.kind == "pass", verdict
