"""compiled_autograd: the backward under compiled autograd against the eager backward.

Compiled autograd (``torch._dynamo.compiled_autograd``) captures the
autograd graph at each ``torch.autograd.grad`` and compiles it, with every
custom Function's backward, hook and saved tensor traced into it. Both sides
run the same forward at the same leaves; the eager side differentiates
eagerly, the other under compiled autograd with the drawn backend
(fuzzdiff.paths.compiled_autograd), after an eager forward or one compiled
by torch.compile with aot_eager (whose AOTAutograd backward compiled
autograd then traces). Compared, with the check's tolerance: the outputs,
``J^T v`` at the leaves, and at order 2 the derivative of ``<J^T v, u>``
(a first backward with ``create_graph``, differentiated again).

Never crying wolf: the compile check's ladder (fuzzdiff.confirm.against_eager).
What compiled autograd documents it cannot trace (a node without compiled
args, a reentrant backward, a tensor subclass FakeTensorMode refuses) and
what dynamo cannot trace are "unsupported"; so is a second derivative eager
has no formula for. Targets that write their inputs are the compile check's:
here every leaf is the argument itself.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import directions, probes_like
from fuzzdiff.checks.check import Check, CiSample, Cost, OpInfoRole
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.opcheck import custom_op
from fuzzdiff.config import FuzzConfig
from fuzzdiff.confirm.against_eager import judge_against_eager
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.guards.unsupported import refuse_once_differentiable, unsupported_reason
from fuzzdiff.paths import compiled
from fuzzdiff.paths import compiled_autograd as path
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Unsupported, Verdict
from strategies.cotangents import probes

__all__ = ["CHECK", "CompiledAutogradParams"]

_PROBE = probes().map(lambda p: p.__dict__.copy())
# half to the capture alone (where every compiled autograd bug of the corpus
# reproduces), a quarter each to dynamo's trace of it and to inductor:
# inductor's code generation costs seconds, a dynamo trace about half of one, and
# the capture run as captured a sixth of that
BACKEND_WEIGHTS = ("ca_eager", "ca_eager", "eager", "inductor")
# (forward, order): no second derivative through a compiled forward, which torch
# refuses in words ("torch.compile does not currently support higher order gradients")
VARIANTS = ({"forward": "eager", "order": 1}, {"forward": "eager", "order": 2}, {"forward": "aot_eager", "order": 1})


@dataclass(frozen=True)
class CompiledAutogradParams:
    """The check's draws: the backward's backend among ``backends``, the
    forward (eager or compiled), the order, a cotangent and a tangent direction."""

    backends: tuple[str, ...] = path.BACKENDS

    def __call__(self, target: Target, case: Case) -> st.SearchStrategy:
        return _params(self.backends)


@functools.cache
def _params(backends: tuple[str, ...]) -> st.SearchStrategy:
    weighted = tuple(b for b in BACKEND_WEIGHTS if b in backends) or backends
    return st.fixed_dictionaries(
        {
            "backend": st.sampled_from(weighted),
            "variant": st.sampled_from(VARIANTS),
            "cotangent": _PROBE,
            "direction": _PROBE,
        }
    ).map(_flat)


def _flat(params: dict[str, Any]) -> dict[str, Any]:
    """The drawn variant's keys among the others."""
    return {**{k: v for k, v in params.items() if k != "variant"}, **params["variant"]}


def _configure(check: Check, config: FuzzConfig) -> Check:
    """The configured backends, inductor only where the run's compile backends have it too."""
    backends = (
        tuple(b for b in config.compiled_autograd_backends if b != "inductor" or b in config.compile_backends)
        or config.compiled_autograd_backends
    )
    return replace(check, params=CompiledAutogradParams(backends))


def _forward(target: Target, case: Case, cast: torch.dtype | None, compiled_forward: bool) -> Callable:
    if compiled_forward:
        return compiled.compiled(target, case, "aot_eager", cast)
    return functools.partial(target.fn, **case.kwargs)


def side(target: Target, case: Case, cast: torch.dtype | None, backend: str | None) -> Result:
    """Outputs and derivatives at ``case``: eagerly (``backend=None``), or the
    backward under compiled autograd with ``backend`` (the forward as drawn)."""
    order = int(case.params.get("order", 1))
    f = leaf_function(target, case, cast=cast)
    tangents = directions(case.params, f.leaves) if order == 2 else []

    def work():
        fn = _forward(target, case, cast, backend is not None and case.params.get("forward") == "aot_eager")
        return path.derivatives(
            fn, f.leaves, f.inputs.rebuild, lambda outs: probes_like(case.params, "cotangent", outs), tangents, order
        )

    if backend is None:
        outs, grads, second = work()
        if order == 2:
            refuse_once_differentiable(*grads)
    else:
        with path.enabled(backend, _run(target, case, cast, backend)):
            outs, grads, second = work()
    names = [f"output {k}" for k in range(len(outs))] + [f"grad {k}" for k in range(len(grads))]
    names += [f"second derivative {k}" for k in range(len(second))]
    return Result.of(names, [*outs, *grads, *second])


def _run(target: Target, case: Case, cast: torch.dtype | None, backend: str) -> tuple:
    """What the compiled graphs of a side depend on: not the values of the case
    and its probes, so that a variant at other values reuses them."""
    draws = {k: {**v, "seed": 0} if isinstance(v, dict) else v for k, v in case.params.items()}
    return (target.ref, id(target.fn), backend, str(cast), compiled.structure(case), json.dumps(draws, sort_keys=True))


def _identity(case: Case) -> str:
    forward = "a compiled forward (aot_eager), " if case.params.get("forward") == "aot_eager" else ""
    what = "second derivatives" if int(case.params.get("order", 1)) == 2 else "gradients"
    return f"{forward}backward under compiled autograd ({case.params['backend']}) vs eager: {what}"


def run(target: Target, case: Case) -> Verdict:
    backend = case.params["backend"]
    identity = _identity(case)
    try:
        want = side(target, case, None, None)
    except Exception as e:  # noqa: BLE001
        if target.rejects(e):
            reject()
        reason = unsupported_reason(e) if int(case.params.get("order", 1)) == 2 or isinstance(e, Unsupported) else None
        if reason is not None:
            return Verdict("unsupported", f"eager second derivative: {reason}")
        raise
    try:
        got = side(target, case, None, backend)
    except Exception as e:  # noqa: BLE001
        # Code the tracer cannot follow is unsupported; from a custom op, whose fake
        # kernel must not read data, it is a finding (as under the compile check).
        reason = unsupported_reason(e, traced=not custom_op(target.fn))
        if reason is not None:
            return Verdict("unsupported", f"{identity.split(' vs ')[0]}: {reason}")
        raise
    tol = tolerance(target, "compiled_autograd", case.torch_dtype)
    return judge_against_eager(
        identity,
        case,
        lambda c, cast: side(target, c, cast, None),
        lambda c, cast: side(target, c, cast, backend),
        tol,
        (want, got),
    )


def applies(target: Target) -> str | None:
    if target.random:
        return "the target draws random numbers: a compiled forward draws its own (as under the compile check)"
    if not target.functional:
        return "the target writes its inputs: the compile check differentiates through its writes"
    return None


def script(ctx: ScriptContext) -> Fragment:
    params = ctx.case.params
    order = int(params.get("order", 1))
    compiled_forward = params.get("forward") == "aot_eager"
    forward = 'torch.compile(call, backend="aot_eager", dynamic=True)' if compiled_forward else "call"
    return Fragment(
        f"{_identity(ctx.case)}: outputs, gradients" + (" and second derivatives" if order == 2 else ""),
        lines(
            "cotangents = lambda outs: V",
            "want = derivatives(call, make_leaves(), make_args, cotangents, U, ORDER)",
            "from torch._dynamo import compiled_autograd",
            "with compiled_autograd._enable(backward_compiler(BACKEND)):",
            f"    got = derivatives({forward}, make_leaves(), make_args, cotangents, U, ORDER)",
            'names = [f"output {k}" for k in range(len(want[0]))] + [f"grad of {n}" for n in LEAF_NAMES]',
            'names += [f"second derivative along U, {n}" for n in LEAF_NAMES][: len(want[2])]',
            "return finish([compare(names, [*got[0], *got[1], *got[2]], [*want[0], *want[1], *want[2]])])",
        ),
        helpers=("compare", "finish"),
        probes=("V", "U"),
        extra=f"{ctx.wrt_constants()}\nBACKEND = {params['backend']!r}\nORDER = {order!r}",
        copies=(path.derivatives, path.backward_compiler, compiled.per_location),
    )


# CI: a rotating sample of catalog targets, few cases each (a backward capture costs
# a dynamo trace per case); the nightly profile runs the whole catalog.
CHECK = Check(
    "compiled_autograd",
    run,
    params=CompiledAutogradParams(),
    configure=_configure,
    applies=applies,
    script=script,
    ci=CiSample(targets=3, max_examples=3),
    compiles=True,
    # `bench/campaign.py --budget 1800 --seed 1`: 0.47 s a batch, 198.5 ms a run, with a
    # pair's first batch running the capture alone (CHEAP_AUTOGRAD_BACKENDS)
    cost=Cost(0.27, 0.2),
    # an op whose backward torch does not test, eagerly or through AOTAutograd, is not drawn
    opinfo=OpInfoRole(
        tests=(("TestBwdGradients", "test_fn_grad"), ("TestEagerFusionOpInfo", "test_aot_autograd_exhaustive"))
    ),
)
