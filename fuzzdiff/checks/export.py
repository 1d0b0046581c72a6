"""export: the module torch.export makes of the target against the target itself.

The target is exported at the case's arguments (fuzzdiff.paths.exported):
strict (dynamo traces it) or not (Python runs it on fake tensors), every
dim the spec leaves free dynamic, and the program as traced or after
``run_decompositions()``, where an op's values and derivative become its
decomposition's. The exported module is called at the same leaves and
differentiated by eager autograd. Compared, with the check's tolerance:
the outputs and ``J^T v`` at the leaves.

Never crying wolf: the compile check's ladder (fuzzdiff.confirm.against_eager).
What export documents as unsupported is "unsupported": its UserError (data-
dependent control flow, a dynamic-shape constraint the target violates),
dynamo's Unsupported under strict export, a data-dependent guard or output
shape, code that reads memory or values. Any other exception from export on
a target eager runs is a finding (an internal assert, a wrong-shape error).
Targets that write their inputs and random targets are the compile check's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from hypothesis import reject
from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.checks.check import Check, CiSample, Cost, OpInfoRole
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.opcheck import custom_op
from fuzzdiff.confirm.against_eager import judge_against_eager
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.guards.graph import graph_nodes
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.paths import exported as path
from fuzzdiff.paths.compiled import dynamo_settings
from fuzzdiff.paths.compiled_autograd import derivatives
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.cotangents import probes

__all__ = ["CHECK", "ExportParams"]

_PROBE = probes().map(lambda p: p.__dict__.copy())


@dataclass(frozen=True)
class ExportParams:
    """The check's draws: strict or not, decomposed or not, and a cotangent."""

    def __call__(self, target: Target, case: Case) -> st.SearchStrategy:
        return _params()


@functools.cache
def _params() -> st.SearchStrategy:
    # non-strict first (export's default): a failing case shrinks towards it, and the as-traced program
    return st.fixed_dictionaries(
        {"strict": st.booleans(), "decomposed": st.booleans(), "cotangent": _PROBE},
    )


def side(target: Target, case: Case, cast: torch.dtype | None, exported: bool) -> Result:
    """Outputs and gradients at ``case``: of the target (``exported=False``) or
    of its exported module."""
    f = leaf_function(target, case, cast=cast)
    if exported:
        with dynamo_settings():
            fn = path.exported(target, case, f.args, cast, bool(case.params["strict"]), bool(case.params["decomposed"]))
    else:
        fn = functools.partial(target.fn, **case.kwargs)
    outs, grads, _ = derivatives(fn, f.leaves, f.inputs.rebuild, lambda o: probes_like(case.params, "cotangent", o))
    names = [f"output {k}" for k in range(len(outs))] + [f"grad {k}" for k in range(len(grads))]
    return Result.of(names, [*outs, *grads])


def _variant(case: Case) -> str:
    strict = "strict" if case.params["strict"] else "non-strict"
    return f"{strict} export" + (", run_decompositions()" if case.params["decomposed"] else "")


def run(target: Target, case: Case) -> Verdict:
    try:
        want = side(target, case, None, exported=False)
    except Exception as e:
        if target.rejects(e):
            reject()
        raise
    rules = _own_rules(target, case)
    if rules:
        return Verdict("unsupported", f"{_variant(case)}: {OWN_RULES}: {', '.join(rules)}")
    try:
        got = side(target, case, None, exported=True)
    except Exception as e:  # noqa: BLE001
        # what export cannot follow is unsupported; a custom op's fake kernel reading data is opcheck's finding
        reason = unsupported_reason(e, traced=not custom_op(target.fn))
        if reason is not None:
            return Verdict("unsupported", f"{_variant(case)}: {reason}")
        raise
    return judge_against_eager(
        f"{_variant(case)} vs eager: outputs and gradients",
        case,
        lambda c, cast: side(target, c, cast, exported=False),
        lambda c, cast: side(target, c, cast, exported=True),
        tolerance(target, "export", case.torch_dtype),
        (want, got),
    )


# torch.export traces an autograd.Function (a custom op's registered autograd is
# one) into the ATen ops of its forward: the exported program's gradient is theirs,
# never the rule's backward, whose agreement with its forward is the grad check's.
OWN_RULES = "the exported program differentiates the traced forward of the code's own derivative rules"


def _own_rules(target: Target, case: Case) -> list[str]:
    """The autograd.Function classes whose backward the eager call's gradient runs."""
    f = leaf_function(target, case)
    nodes = graph_nodes(f(*f.leaves))
    return sorted({cls.__qualname__ for node in nodes if (cls := getattr(node, "_forward_cls", None)) is not None})


def applies(target: Target) -> str | None:
    if target.random:
        return "the target draws random numbers: an exported graph does not see the generators seeded before a call"
    if not target.functional:
        return "the target writes its inputs: the compile check differentiates through its writes"
    return None


def script(ctx: ScriptContext) -> Fragment:
    params = ctx.case.params
    dynamic = path.dynamic_dims(ctx.target.args, [a.shape for a in ctx.case.args])
    return Fragment(
        f"{_variant(ctx.case)} vs eager: outputs and gradients",
        lines(
            "cotangents = lambda outs: V",
            "want = derivatives(call, make_leaves(), make_args, cotangents)",
            "leaves = make_leaves()",
            "module = exported_module(call, {}, make_args(leaves), DYNAMIC, STRICT, DECOMPOSED)",
            "got = derivatives(module, leaves, make_args, cotangents)",
            'names = [f"output {k}" for k in range(len(want[0]))] + [f"grad of {n}" for n in LEAF_NAMES]',
            "return finish([compare(names, [*got[0], *got[1]], [*want[0], *want[1]])])",
        ),
        helpers=("compare", "finish"),
        probes=("V",),
        extra=(
            f"{ctx.wrt_constants()}\n"
            f"# Per argument, the dims exported dynamic (those the spec leaves free)\nDYNAMIC = {dynamic!r}\n"
            f"STRICT = {bool(params['strict'])!r}\nDECOMPOSED = {bool(params['decomposed'])!r}"
        ),
        copies=(derivatives, path.exported_module),
    )


# CI: a rotating sample of catalog targets, few cases each (an export costs a trace
# per case); the nightly profile runs the whole catalog.
CHECK = Check(
    "export",
    run,
    params=ExportParams(),
    applies=applies,
    script=script,
    ci=CiSample(targets=3, max_examples=3),
    compiles=True,
    cost=Cost(0.21, 0.15),
    opinfo=OpInfoRole(tests=(("TestExportOpInfo", "test_fake_export"),)),
)
