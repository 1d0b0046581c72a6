"""A failed export's partial graph stays on its exception, off the caller's stderr."""

from __future__ import annotations

import pytest
import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.paths.exported import exported
from fuzzdiff.targets.target import Target


def _data_dependent(x):
    return x[x > 0].sum() * torch.ones(int((x > 0).sum()))  # a size the data decides: export fails


def test_a_failed_exports_graph_is_not_printed(capfd):
    target = Target("unit_data_dependent", _data_dependent, "x: n")
    case = Case("unit_data_dependent", (Arg((3,), Values(seed=1)),), "float64")
    with pytest.raises(Exception) as raised:
        exported(target, case, [torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)], None, False, False)
    assert getattr(raised.value, "partial_fx_graph", None), "the export did not fail as this test needs"
    assert "def forward" not in capfd.readouterr().err
