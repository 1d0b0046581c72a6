"""dtype: low-precision results against a float64 run on the very same values.

Outputs and gradients in float32 (or a half type) must match float64 within
the dtype's tolerance, plus what the problem's own conditioning explains: the
float64 results' change when inputs move by float32 rounding, or when every
intermediate result does (fuzzdiff.confirm.low_precision.against_float64, which also
judges forward mode, second derivatives and vmap in low precision). Each
tensor is judged on its own scale. Its findings: a computation that is not
float32's rounding of its float64 self (a bfloat16 step, a fast
approximation, a wrong kernel), and a formula that loses digits its problem
keeps. Of torch's own code (catalog, OpInfo and ModuleInfo targets) every
formula is held to that: torch's formulas are the product under test, and
such losses are fixed upstream (tensorflow/probability#1512). Of a user's
code only its own derivative rules are: digits a composition of torch ops
loses to their rounding are the dtype's noise ("inconclusive", with how
many), since no rule of the user's computes them.
At a stride-0 input, a failure that vanishes where the repeated values move
apart is the singular point the layout made (fuzzdiff.confirm.steps.neighbours).
A value that the function's guard of its dtype's own eps decides (SI-SDR of
a perfect estimate: 10 log10(s / eps) in each dtype) has no float64
reference: not judged (fuzzdiff.confirm.dtype_constants).
Digits a solve or a factorization loses to its own conditioning, at a
near-singular matrix the code handed it, are no finding either: no kernel
does better (fuzzdiff.confirm.rounding.CONDITIONED_OPS).
A value whose float64 result float32 cannot hold (``exp(100)``) is out of
range, and so is a gradient that is not finite where an output overflowed or
the point's derivatives leave float32's range (inf * 0): "inconclusive".
"""

from __future__ import annotations

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, Cost, OpInfoRole, probe_params
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.grad import point_out_of_range
from fuzzdiff.confirm.ladder import Doubt
from fuzzdiff.confirm.low_precision import against_float64
from fuzzdiff.confirm.steps import identical_to, neighbours, repeat
from fuzzdiff.confirm.tolerance import LOW_PRECISION, Tolerance, tolerance
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.moduleinfo.tables import FAMILY as MODULEINFO_FAMILY
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    if dtype not in LOW_PRECISION:
        return Verdict("unsupported", f"the dtype check needs a low-precision case, not {dtype}")
    tol = tolerance(target, "dtype", dtype)
    verdict = _judged(target, case, tol, repeats=True)
    if verdict.kind == "pass":
        return Verdict("pass")
    if verdict.kind == "fail" and case.stride0:
        # a singular point the stride-0 layout made (repeated rows: rank-deficient)
        near = neighbours(case, lambda c: _judged(target, c, tol).kind != "fail")()
        if isinstance(near, Doubt):
            return Verdict("inconclusive", f"{verdict.message}; {near.why}", verdict.errors)
    return verdict


def _formulas_held(target: Target) -> bool:
    """Whether every formula the target runs is held to its digits: torch's own
    (an op's derivative formula, a distribution's closed form, which torch can
    restructure: ContinuousBernoulli's band), not a ModuleInfo module's
    forward. That is a composition of ops OpInfo tests one by one, whose
    digits lost to their rounding are its inputs' conditioning, as in a
    user's code (a saturated MultiheadAttention loses six of float32's)."""
    return target.torchs_own and target.family != MODULEINFO_FAMILY


def _judged(target: Target, case: Case, tol: Tolerance, repeats: bool = False) -> Verdict:
    """The low-precision results at ``case`` against float64 on its values; a
    failure must repeat where ``repeats`` (at its neighbours, it need not)."""
    names, low = evaluate(target, case)
    return against_float64(
        names,
        low,
        lambda c: list(evaluate(target, c, cast=torch.float64).tensors),
        case,
        tol,
        repeat=repeat(lambda: evaluate(target, case).tensors, same=identical_to(low)) if repeats else None,
        unstable_fails=True,
        own_rules_only=not _formulas_held(target),
        outputs=sum(name.startswith("output ") for name in names),  # outputs first (paths.result.outputs_and)
        point_out_of_range=lambda: point_out_of_range(target, case),
    )


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        f"{ctx.dtype} outputs and gradients vs float64 on the very same values",
        lines(
            f"# 1. In {ctx.dtype}.",
            "leaves = make_leaves()",
            "outs = f(*leaves)",
            "low = [t.detach() for t in (*outs, *vjp(outs, leaves, V))]",
            'names = [f"output {k}" for k in range(len(outs))] + [f"grad of {n}" for n in LEAF_NAMES]',
            f"# 2. In float64, on the {ctx.dtype} values widened exactly.",
            "leaves = make_leaves(torch.float64)",
            "outs = f(*leaves)",
            "ref = [t.detach() for t in (*outs, *vjp(outs, leaves, V64))]",
            "# Each result on its own scale (the check also allows what conditioning explains).",
            "return finish([compare(names, low, ref)])",
        ),
        ("f", "compare", "finish"),
        ("V", "V64"),
        extra=ctx.wrt_constants(),
        copies=(vjp,),
    )


CHECK = Check(
    "dtype",
    run,
    params=probe_params("cotangent"),
    dtypes=LOW_PRECISION,
    script=script,
    cost=Cost(0.018, 0.0029),
    opinfo=OpInfoRole(),
)
