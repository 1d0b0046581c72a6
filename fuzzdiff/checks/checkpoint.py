"""checkpoint: a target under activation checkpointing gives its own outputs and gradients.

``torch.utils.checkpoint.checkpoint`` saves no activations: it runs the forward
under no_grad-like bookkeeping and runs it again during the backward. The
outputs, and the gradients ``J^T v`` with respect to the leaves for the case's
random cotangent ``v``, must be those of the plain target. Each case draws the
variant (``params["reentrant"]``): ``use_reentrant=False`` (saved-tensor hooks;
``torch.autograd.grad`` works) or ``use_reentrant=True`` (an autograd.Function
over the tensor arguments; it refuses ``torch.autograd.grad``, so its
gradients come from ``backward()``, and it takes no keyword arguments, so the
target's are closed over).

Both sides run from one seed (``params["rng"]``) for torch's generators and
Python's ``random``, forked so that the caller's states are untouched: a target
that draws random numbers (dropout, RReLU, a module in training mode) is
compared at the same draws, and its recomputation must see the draws
``preserve_rng_state`` restores. Torch's generators are restored by
checkpoint; Python's ``random`` and private ``torch.Generator`` objects are
not, so a layer drawing from them computes its gradient from other draws than
its output.

Recomputation in eager is normally bitwise identical; a mismatch beyond the
check's tolerance must repeat (the plain call bit for bit, the checkpointed one
wrong again: its values may differ where it reads memory the recomputation
never wrote) and persist at a neighbouring point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import checkpoint

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.checks.check import Check, CiSample, Cost
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.confirm.compare import worst_discrepancy
from fuzzdiff.confirm.ladder import Ladder, Step
from fuzzdiff.confirm.steps import chain, identical, identical_to, neighbours, repeat
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.function import differentiable, leaf_function
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.paths.seeded import run_seeded
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.cotangents import probes

__all__ = ["CHECK", "LADDER", "PLAIN", "REENTRANT", "NON_REENTRANT", "outputs_and_grads"]

# checkpointed against plain: repeated bit for bit, and tried at a neighbouring point
LADDER = Ladder(("repeat", "neighbours"))
# The plain call must repeat bit for bit this many times: a nondeterministic
# target whose few draws repeat by chance once must not pass for deterministic.
REPEATS = 2

PLAIN = "plain"
REENTRANT = "use_reentrant=True"
NON_REENTRANT = "use_reentrant=False"


# -- torch-only: the script runs these very functions (fuzzdiff.script copies them) --


def floating(result: Any) -> list[torch.Tensor]:
    """The floating (or complex) tensors of a result, in pytree order."""
    return [t for t in tree_leaves(result) if differentiable(t)]


def checkpointed(fn: Callable[..., Any], way: str) -> Callable[..., list[torch.Tensor]]:
    """``fn`` through torch.utils.checkpoint, as a function of its floating outputs.
    The reentrant variant is an autograd.Function: it returns tensors, not pytrees."""
    if way == REENTRANT:
        return lambda *args: list(checkpoint(lambda *a: tuple(floating(fn(*a))), *args, use_reentrant=True))
    return lambda *args: floating(checkpoint(fn, *args, use_reentrant=False))


def backward_grads(
    outs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor], cotangents: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """``J^T v`` for each leaf by ``backward()`` into ``.grad``: reentrant
    checkpoint refuses ``torch.autograd.grad``. Zeros where a leaf is unreached."""
    pairs = [(o, v) for o, v in zip(outs, cotangents) if o.requires_grad]
    for leaf in leaves:
        leaf.grad = None
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [v for _, v in pairs])
    return [torch.zeros_like(l) if l.grad is None else l.grad for l in leaves]


def outputs_and_grads(
    fn: Callable[..., Any],
    leaves: Sequence[torch.Tensor],
    make_args: Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]],
    cotangents: Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]],
    seed: int,
    way: str,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Floating outputs of ``fn(*make_args(leaves))``, plain or checkpointed
    (``way``), and ``J^T v`` at the leaves for ``v = cotangents(outputs)``;
    forward and backward (where checkpoint recomputes) run from ``seed``."""
    devices = sorted({l.get_device() for l in leaves if l.is_cuda})

    def work():
        call = (lambda *args: floating(fn(*args))) if way == PLAIN else checkpointed(fn, way)
        outs = call(*make_args(leaves))
        v = cotangents(outs)
        grads = backward_grads(outs, leaves, v) if way == REENTRANT else vjp(outs, leaves, v)
        return [o.detach() for o in outs], [g.detach() for g in grads]

    return run_seeded(seed, work, devices)


# -- the check, through the case ------------------------------------------------------


def evaluate(target: Target, case: Case, way: str) -> tuple[list[str], list[torch.Tensor]]:
    """Names and tensors, outputs first, of ``case`` run ``way``."""
    f = leaf_function(target, case)
    outs, grads = outputs_and_grads(
        lambda *args: target.fn(*args, **case.kwargs),
        f.leaves,
        f.inputs.rebuild,
        lambda outs: probes_like(case.params, "cotangent", outs),
        case.params["rng"]["seed"],
        way,
    )
    names = [f"output {k}" for k in range(len(outs))] + [f"grad {k}" for k in range(len(grads))]
    return names, [*outs, *grads]


def way_of(case: Case) -> str:
    return REENTRANT if case.params.get("reentrant") else NON_REENTRANT


def run(target: Target, case: Case) -> Verdict:
    tol = tolerance(target, "checkpoint", case.torch_dtype)
    way = way_of(case)
    if way == REENTRANT and all(a.grad == "none" for a in case.args):
        return Verdict("unsupported", "use_reentrant=True needs a tensor argument that requires grad")
    try:
        names, plain = evaluate(target, case, PLAIN)
    except Exception as e:  # noqa: BLE001
        if target.rejects(e):
            reject()
        raise
    _, ckpt = evaluate(target, case, way)
    d = worst_discrepancy(names, ckpt, plain, tol)
    if d is None:
        return Verdict("pass")

    def agrees(c: Case) -> bool:
        return worst_discrepancy(names, evaluate(target, c, way)[1], evaluate(target, c, PLAIN)[1], tol) is None

    def differently(again: list[torch.Tensor]) -> str | None:
        # wrong every time, and differently: e.g. memory the recomputation never wrote
        if identical(again, ckpt):
            return None
        return "a repeat (the plain call repeats bit for bit, the checkpointed one is wrong again)"

    steps: dict[str, Step] = {
        "repeat": chain(
            repeat(
                lambda: evaluate(target, case, PLAIN)[1],
                same=identical_to(plain),
                why="a repeat of the plain call gave other results",
                times=REPEATS,
            ),
            repeat(
                lambda: evaluate(target, case, way)[1],
                same=lambda again: worst_discrepancy(names, again, plain, tol) is not None,
                why="a repeat of the checkpointed call agreed",
                label=differently,
            ),
        ),
        "neighbours": neighbours(case, agrees),
    }
    return LADDER.climb(f"checkpoint({way}) vs plain", str(d), d.summary(), steps)


_PROBE = probes().map(lambda p: p.__dict__.copy())
_SEED = st.integers(0, 2**32 - 1).map(lambda s: {"seed": s})


def params(target: Target, case: Case) -> st.SearchStrategy:
    """The variant (reentrant where some argument requires grad), the seed of
    every generator (a dict, so that Case.reseeded varies it) and the cotangent."""
    reentrant = st.just(False) if all(a.grad == "none" for a in case.args) else st.booleans()
    return st.fixed_dictionaries({"reentrant": reentrant, "rng": _SEED, "cotangent": _PROBE})


def applies(target: Target) -> str | None:
    if not target.functional:
        return "the target writes its inputs: a recomputation would write them again"
    return None


def script(ctx: ScriptContext) -> Fragment:
    way = way_of(ctx.case)
    seed = ctx.case.params["rng"]["seed"]
    return Fragment(
        f"outputs and gradients under torch.utils.checkpoint ({way}) vs the plain call",
        lines(
            f"# 1. The plain call, then 2. the call through checkpoint({way}), which runs the",
            "#    forward again during the backward; both from one seed of torch's generators",
            "#    and of Python's random.",
            "plain_outs, plain_grads = outputs_and_grads(call, make_leaves(), make_args, lambda outs: V, SEED, PLAIN)",
            "outs, grads = outputs_and_grads(call, make_leaves(), make_args, lambda outs: V, SEED, WAY)",
            'names = [f"output {k}" for k in range(len(outs))] + [f"grad of {n}" for n in LEAF_NAMES]',
            "return finish([compare(names, [*outs, *grads], [*plain_outs, *plain_grads])])",
        ),
        helpers=("compare", "finish"),
        probes=("V",),
        extra=f"{ctx.wrt_constants()}\nSEED = {seed!r}\nWAY = {way!r}",
        copies=(outputs_and_grads,),
    )


# CI: the random layers and a rotating sample of catalog targets, few cases each (the whole catalog at
# the CI profile's 12 examples took 6 minutes on two cores); other profiles run all.
CHECK = Check(
    "checkpoint",
    run,
    params=params,
    applies=applies,
    script=script,
    seeds_random=True,
    ci=CiSample(targets=30, always=("*_training",), max_examples=6),
    cost=Cost(0.081, 0.0041),
)
