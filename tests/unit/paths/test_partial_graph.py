"""What torch prints beside raising (a failed export's partial graph, an FX graph's traceback) stays off the caller's stderr."""

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


FX_PRINT = '''Traceback (most recent call last):
  File "<eval_with_key>.17", line 198, in forward
    add = torch.add(getitem_111, getitem_115);  getitem_111 = getitem_115 = None
TypeError: add(): argument 'other' (position 2) must be Tensor, not NoneType

Call using an FX-traced Module, line 198 of the traced Module's generated forward function:
    getitem_115 = validate_outputs_7[5];  validate_outputs_7 = None
    add = torch.add(getitem_111, getitem_115);  getitem_111 = getitem_115 = None

~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE
    as_strided_backward0_2 = torch__dynamo_compiled_autograd_ops_AsStridedBackward0([add])

    getitem_116 = as_strided_backward0_2[0];  as_strided_backward0_2 = None

'''


def test_an_fx_graphs_printed_traceback_is_dropped_and_only_it(capfd):
    """What a failing GraphModule prints beside raising (under compiled
    autograd's eager backend, once per failing backward) is dropped; a
    warning shown before or after it is not."""
    import sys

    from fuzzdiff.guards.fx_traceback import fx_traceback_kept

    with pytest.raises(TypeError), fx_traceback_kept():
        print("a warning before", file=sys.stderr)
        sys.stderr.write(FX_PRINT)
        sys.stderr.write(FX_PRINT)
        print("a warning after", file=sys.stderr)
        raise TypeError("add(): argument 'other' (position 2) must be Tensor, not NoneType")
    err = capfd.readouterr().err
    assert "a warning before" in err and "a warning after" in err
    assert "FX-traced" not in err and "Traceback" not in err and "getitem" not in err
