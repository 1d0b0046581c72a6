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


def test_only_the_partial_graph_is_dropped(capfd):
    """What else the export writes to stderr (a warning shown) reaches it as ever."""
    import sys

    from fuzzdiff.guards.partial_graph import partial_graph_kept

    class Failed(RuntimeError):
        partial_fx_graph = "def forward(self, x):\n    return x"

    with pytest.raises(Failed), partial_graph_kept():
        print("a warning the export showed", file=sys.stderr)
        print(Failed.partial_fx_graph, file=sys.stderr)
        raise Failed("export failed")
    err = capfd.readouterr().err
    assert "a warning the export showed" in err and "def forward" not in err
