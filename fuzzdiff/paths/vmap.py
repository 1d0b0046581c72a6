"""torch.func.vmap, alone and composed with vjp, jvp, grad and itself, and the
Python loop over the batch that it must agree with.

A *plan* (strategies.batching, stored in ``case.params``) says how many vmap
levels there are, each level's batch size, ``in_dims`` and ``out_dims``, the
memory layout of every batched input and the composition. Example ``e`` of
the batch is ``case.reseeded(e)``: the case's own structure with fresh values
and probes, so every example differs and a replay rebuilds them bit for bit.
Both sides make the same torch calls; only vmap stands between them.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import directions, probes_like
from fuzzdiff.case.layout import Layout
from fuzzdiff.guards.unsupported import VMAP_DATA_DEPENDENT_SHAPE, unsupported_reason, vmap_unsupported_reason
from fuzzdiff.paths.forward import same_layout
from fuzzdiff.paths.function import differentiable
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Unsupported

__all__ = ["Level", "Plan", "run", "vmap_and_loop", "COMPOSITIONS", "recording_fallbacks", "stop_recording_fallbacks"]

# What run() can do; strategies.batching draws these names (a unit test holds them equal).
COMPOSITIONS = ("vmap", "vmap_vjp", "vjp_vmap", "vmap_jvp", "jvp_vmap", "vmap_vmap", "vmap_grad")


# A NamedTuple, not a dataclass: scripts copy it, and a dataclass needs its module in
# sys.modules, which a script run by exec() may not be.
class Level(NamedTuple):
    """One vmap level: its batch size, a batch dim per argument (None: not
    batched at this level) and output batch dims, cycled over the outputs."""

    batch: int
    in_dims: tuple[int | None, ...]
    out_dims: tuple[int, ...]

    def out_dim(self, k: int, rank: int) -> int:
        """Output ``k``'s batch dim, for an output whose examples have ``rank``
        dims at this level; 0 where the drawn dim does not fit."""
        d = self.out_dims[k % len(self.out_dims)]
        return d if -(rank + 1) <= d <= rank else 0


@dataclass(frozen=True)
class Plan:
    composition: str
    levels: tuple[Level, ...]  # outermost first
    layouts: tuple[Layout | None, ...]  # per argument, of its batched tensor

    @staticmethod
    def from_params(params: Mapping) -> Plan:
        levels = tuple(Level(int(l["batch"]), tuple(l["in_dims"]), tuple(l["out_dims"])) for l in params["levels"])
        lays = tuple(
            None if d is None else Layout(d["storage_size"], tuple(d["strides"]), d["offset"])
            for d in params["batched_layouts"]
        )
        return Plan(params["composition"], levels, lays)

    def describe(self) -> str:
        return (
            self.composition
            + " "
            + " / ".join(f"B={l.batch} in_dims={l.in_dims} out_dims={l.out_dims}" for l in self.levels)
        )

    @property
    def indices(self) -> list[tuple[int, ...]]:
        """Every example's multi-index, outermost level first."""
        return list(itertools.product(*(range(l.batch) for l in self.levels)))

    def batched(self, i: int) -> bool:
        return any(l.in_dims[i] is not None for l in self.levels)

    def example(self, index: Sequence[int], i: int | None = None) -> int:
        """The example (seed variant) at ``index``; for argument ``i``, along
        the levels that do not batch it, always the first."""
        e = 0
        for l, j in zip(self.levels, index):
            e = e * l.batch + (j if i is None or l.in_dims[i] is not None else 0)
        return e


def stack_examples(
    value: Callable[[tuple[int, ...]], torch.Tensor], levels: Sequence[Level], dims: Sequence[int | None]
) -> torch.Tensor:
    """One tensor of every example's ``value(index)``: level l's examples are
    stacked at ``dims[l]`` (None: the value does not vary along that level).
    The outermost level is stacked last, as vmap peels it off first."""

    def build(prefix: tuple[int, ...]) -> torch.Tensor:
        l = len(prefix)
        if l == len(levels):
            return value(prefix)
        dim = dims[l]
        if dim is None:
            return build(prefix + (0,))
        return torch.stack([build(prefix + (j,)) for j in range(levels[l].batch)], dim)

    return build(())


def _floating(out) -> tuple[torch.Tensor, ...]:
    return tuple(t for t in tree_leaves(out) if differentiable(t))


class Batch:
    """The examples of one case, materialized on demand, and the batched inputs."""

    def __init__(self, target: Target, case: Case, cast: torch.dtype | None = None):
        self.target, self.case, self.cast = target, case, cast
        self.plan = Plan.from_params(case.params)
        self.diff = [i for i, a in enumerate(case.args) if a.grad != "none" and case.arg_dtype(i).is_floating_point]
        self._examples: dict[int, list[torch.Tensor]] = {}

    def f(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _floating(self.target.fn(*args, **self.case.kwargs))

    def args(self, e: int) -> list[torch.Tensor]:
        if e not in self._examples:
            self._examples[e] = self.case.reseeded(e).materialize(requires_grad=False, cast=self.cast).args
        return self._examples[e]

    def args_at(self, index) -> list[torch.Tensor]:
        """The arguments of the example at ``index``."""
        return [self.args(self.plan.example(index, i))[i] for i in range(len(self.case.args))]

    def params(self, e: int) -> Mapping:
        return self.case.reseeded(e).params

    def batched_args(self) -> list[torch.Tensor]:
        """Each batched argument stacked along its in_dims, stored in its drawn
        layout (memory outside the view holds junk); unbatched ones as example 0."""
        out = []
        for i, _a in enumerate(self.case.args):
            if not self.plan.batched(i):
                out.append(self.args(0)[i])
                continue
            t = stack_examples(
                lambda index: self.args(self.plan.example(index, i))[i],
                self.plan.levels,
                [l.in_dims[i] for l in self.plan.levels],
            )
            out.append(self._laid_out(i, t, self.plan.layouts[i]))
        return out

    def _laid_out(self, i: int, t: torch.Tensor, lay: Layout | None) -> torch.Tensor:
        if lay is None:
            return t.contiguous()
        lay.check(t.shape, f"params.batched_layouts[{i}]")
        junk = self.case.args[i].values.junk(lay.storage_size, self.case.arg_dtype(i))
        view = junk.to(t.device, t.dtype).as_strided(t.shape, lay.strides, lay.offset)
        return view.copy_(t)

    def cotangents(self, index, outs) -> list[torch.Tensor]:
        return probes_like(self.params(self.plan.example(index)), "cotangent", outs)

    def tangent(self, i: int, e: int) -> torch.Tensor:
        """Argument i's tangent in example e, in the layout of that example's argument."""
        d, _ = split_differentiable(self.args(e), self.diff)
        u = directions(self.params(e), d)[self.diff.index(i)]
        return same_layout(self.args(e)[i], u)

    def tangents(self, index) -> list[torch.Tensor]:
        """The tangents of the example at ``index``, one per differentiable argument."""
        return [self.tangent(i, self.plan.example(index, i)) for i in self.diff]


# -- the compositions, torch-only: a standalone script runs these very functions ------


def split_differentiable(args: Sequence[torch.Tensor], diff: Sequence[int]):
    """(the differentiable arguments, a function putting them back among the others)."""

    def merge(d: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        out = list(args)
        for i, t in zip(diff, d):
            out[i] = t
        return out

    return [args[i] for i in diff], merge


def with_vjp(f, diff: Sequence[int], n: int):
    """``g(*args, *cotangents) -> (*outputs, *grads)`` by torch.func.vjp (``n`` arguments)."""

    def g(*xs):
        d, merge = split_differentiable(xs[:n], diff)
        # torch.func.vjp is annotated to return has_aux's 3-tuple too
        outs, pull = torch.func.vjp(lambda *d: f(*merge(d)), *d)  # type: ignore[misc]
        return (*outs, *pull(tuple(xs[n:])))

    return g


def with_grad(f, diff: Sequence[int], n: int):
    """``g(*args, *cotangents) -> (*grads, value)`` of ``sum_k <cotangent_k,
    output_k>`` by torch.func.grad_and_value."""

    def g(*xs):
        d, merge = split_differentiable(xs[:n], diff)

        def h(*d):
            return sum((c * o).sum() for c, o in zip(xs[n:], f(*merge(d))))

        grads, value = torch.func.grad_and_value(h, argnums=tuple(range(len(d))))(*d)
        return (*grads, value)

    return g


def with_jvp(f, diff: Sequence[int], n: int):
    """``g(*args, *tangents) -> (*outputs, *output tangents)`` by torch.func.jvp."""

    def g(*xs):
        d, merge = split_differentiable(xs[:n], diff)
        # torch.func.jvp is annotated to return has_aux's 3-tuple too
        outs, tans = torch.func.jvp(lambda *d: f(*merge(d)), tuple(d), tuple(xs[n:]))  # type: ignore[misc]
        return (*outs, *tans)

    return g


def vmapped(g, levels: Sequence[Level], in_dims: Sequence[Sequence[int | None]], ranks: Sequence[int]):
    """``g`` under every level; ``in_dims[l]`` are level l's, ``ranks``
    the per-example ranks of g's outputs."""
    for depth in reversed(range(len(levels))):
        level = levels[depth]
        inner = len(levels) - 1 - depth  # batch dims the levels inside add
        out_dims = tuple(level.out_dim(k, r + inner) for k, r in enumerate(ranks))
        anchor = next(k for k, d in enumerate(in_dims[depth]) if d is not None)
        g = torch.func.vmap(batched_outputs(g, out_dims, anchor), in_dims=tuple(in_dims[depth]), out_dims=out_dims)
    return g


def batched_outputs(g, out_dims: Sequence[int], anchor: int):
    """``g``, with every output that vmap will move to a nonzero out_dim batched.

    torch 2.13 mishandles an output that is not batched at its vmap level (it
    does not depend on the batched inputs, or is a zero tangent) when its
    out_dim is not 0: -1 gives garbage sizes, a positive dim raises. Such an
    output gets an exact, batched zero added (from argument ``anchor``, which
    this level batches), so vmap's own out_dims handling is still what is tested.
    """
    functorch = torch._C._functorch

    def wrapped(*xs):
        level = functorch.maybe_current_level()
        outs = list(g(*xs))
        for k, o in enumerate(outs):
            if out_dims[k] != 0 and functorch.maybe_get_level(o) != level:
                outs[k] = o + torch.zeros_like(xs[anchor], dtype=o.dtype).sum()
        return tuple(outs)

    return wrapped


def out_dims_of(levels: Sequence[Level], k: int, rank: int) -> list[int]:
    """Output k's batch dim at each level, for examples of ``rank`` dims."""
    return [l.out_dim(k, rank + len(levels) - 1 - depth) for depth, l in enumerate(levels)]


def stack_outputs(levels: Sequence[Level], per_example: dict, count: int, slot=lambda k: k) -> list[torch.Tensor]:
    """The loop's results stacked as vmap stacks them: result k at the out_dims
    of output ``slot(k)`` (jvp of vmap: a tangent where its primal is)."""
    first = next(iter(per_example.values()))
    return [
        stack_examples(lambda index: per_example[index][k], levels, out_dims_of(levels, slot(k), first[k].dim()))
        for k in range(count)
    ]


def vmap_and_loop(
    composition: str,
    f,
    levels: Sequence[Level],
    diff: Sequence[int],
    arg_names: Sequence[str],
    args_at,
    batched: Sequence[torch.Tensor],
    cotangents,
    tangents,
    batch_tangents,
    loop_f=None,
):
    """``composition`` of ``f``, vmapped over ``batched`` and looped over the
    examples ``args_at(index)``: (names, vmapped results, looped results, stacked).

    ``cotangents(index, outputs)``, ``tangents(index)`` and ``batch_tangents(index)``
    give the example at ``index`` its probes; ``loop_f`` (default ``f``) is what
    the loop calls, for a target that writes its inputs and needs its own copies.
    """
    loop_f = f if loop_f is None else loop_f
    n = len(arg_names)
    indices = list(itertools.product(*(range(l.batch) for l in levels)))
    outs = {index: loop_f(*args_at(index)) for index in indices}
    if len({tuple(o.shape for o in out) for out in outs.values()}) > 1:
        raise Unsupported(f"{VMAP_DATA_DEPENDENT_SHAPE}: the examples' outputs differ in shape")
    count = len(outs[indices[0]])
    ranks = [o.dim() for o in outs[indices[0]]]
    level_dims = [list(l.in_dims) for l in levels]
    output_names = [f"output {k}" for k in range(count)]
    tangent_names = [f"output tangent {k}" for k in range(count)]
    grad_names = [f"grad of {arg_names[i]}" for i in diff]

    if composition in ("vmap", "vmap_vmap"):
        got = vmapped(f, levels, level_dims, ranks)(*batched)
        return output_names, list(got), stack_outputs(levels, outs, count)

    if composition in ("vmap_vjp", "vmap_grad"):
        cots = {index: cotangents(index, outs[index]) for index in indices}
        transform = with_vjp if composition == "vmap_vjp" else with_grad
        want = {index: transform(loop_f, diff, n)(*args_at(index), *cots[index]) for index in indices}
        grad_ranks = [batched[i].dim() - sum(l.in_dims[i] is not None for l in levels) for i in diff]
        if composition == "vmap_vjp":
            names, out_ranks = output_names + grad_names, ranks + grad_ranks
        else:
            names, out_ranks = grad_names + ["<cotangent, output>"], grad_ranks + [0]
        batched_cots = [stack_examples(lambda index: cots[index][k], levels, [0]) for k in range(count)]
        g = vmapped(transform(f, diff, n), levels, [level_dims[0] + [0] * count], out_ranks)
        return names, list(g(*batched, *batched_cots)), stack_outputs(levels, want, len(names))

    if composition in ("vmap_jvp", "jvp_vmap"):
        tangent_dims = [level_dims[0][i] for i in diff]
        want = {index: with_jvp(loop_f, diff, n)(*args_at(index), *tangents(index)) for index in indices}
        batch_tans = [
            stack_examples(lambda index: batch_tangents(index)[k], levels, [d])
            if d is not None
            else batch_tangents(indices[0])[k]
            for k, d in enumerate(tangent_dims)
        ]
        if composition == "vmap_jvp":
            got = vmapped(with_jvp(f, diff, n), levels, [level_dims[0] + tangent_dims], ranks + ranks)(
                *batched, *batch_tans
            )
        else:
            d, merge = split_differentiable(batched, diff)
            vf = vmapped(f, levels, level_dims, ranks)
            # torch.func.jvp is annotated to return has_aux's 3-tuple too
            primal, tans = torch.func.jvp(lambda *d: vf(*merge(d)), tuple(d), tuple(batch_tans))  # type: ignore[misc]
            got = (*primal, *tans)
        slot = (lambda k: k) if composition == "vmap_jvp" else (lambda k: k % count)
        return output_names + tangent_names, list(got), stack_outputs(levels, want, 2 * count, slot)

    if composition == "vjp_vmap":
        cots = {index: cotangents(index, outs[index]) for index in indices}
        want = {index: with_vjp(loop_f, diff, n)(*args_at(index), *cots[index]) for index in indices}
        looped = stack_outputs(levels, {index: w[:count] for index, w in want.items()}, count)
        for k, i in enumerate(diff):
            dim = level_dims[0][i]
            grads = {index: w[count + k] for index, w in want.items()}
            if dim is None:  # an unbatched argument's gradient sums over the batch
                looped.append(torch.stack(list(grads.values())).sum(0))
            else:
                looped.append(stack_examples(grads.__getitem__, levels, [dim]))
        batched_cots = [
            stack_examples(lambda index: cots[index][k], levels, out_dims_of(levels, k, ranks[k])) for k in range(count)
        ]
        d, merge = split_differentiable(batched, diff)
        vf = vmapped(f, levels, level_dims, ranks)
        # torch.func.vjp is annotated to return has_aux's 3-tuple too
        primal, pull = torch.func.vjp(lambda *d: vf(*merge(d)), *d)  # type: ignore[misc]
        return output_names + grad_names, [*primal, *pull(tuple(batched_cots))], looped

    raise ValueError(f"unknown composition {composition!r}; expected one of {COMPOSITIONS}")


def run(target: Target, case: Case, cast: torch.dtype | None = None) -> tuple[Result, Result]:
    """The plan's composition, vmapped and looped, on the same examples. What
    vmap refuses (fuzzdiff.guards.unsupported), in words or not, raises Unsupported."""
    try:
        return _run(target, case, cast)
    except Exception as e:
        if target.rejects(e):
            raise  # outside the target's domain: not vmap's
        reason = vmap_unsupported_reason(e, lambda: _run(target, case, cast))
        if reason is None and Plan.from_params(case.params).composition != "vmap":
            reason = _bare_forward_refusal(Batch(target, case, cast), e)
        if reason is None or isinstance(e, Unsupported):
            raise
        raise Unsupported(reason) from e


def _bare_forward_refusal(b: Batch, error: Exception) -> str | None:
    """Why vmap refuses the target's bare forward, batched over its first
    example twice, when a composition raised ``error`` in words that are not
    vmap's: without a batching rule an op's composite path can fail in other
    words (vmap of vjp of nn.LSTM: a broadcast-shape error, where vmap of its
    forward says the rule is missing). The per_sample check judges alike
    (fuzzdiff.paths.expanded)."""
    args = b.args(0)
    in_dims = tuple(0 if i in b.diff else None for i in range(len(args)))
    stacked = [torch.stack([a, a]) if d == 0 else a for a, d in zip(args, in_dims)]
    try:
        torch.func.vmap(b.f, in_dims=in_dims)(*stacked)
    except Exception as e:  # noqa: BLE001 - classified below
        forward = unsupported_reason(e)
        if forward is not None:
            first = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            return f"vmap of the forward: {forward}; the composition raised {first}"
    return None


def _run(target: Target, case: Case, cast: torch.dtype | None) -> tuple[Result, Result]:
    b = Batch(target, case, cast)
    # A target that writes its inputs gets separate tensors on each side.
    loop = b if target.functional else Batch(target, case, cast)
    plan = b.plan
    names, got, want = vmap_and_loop(
        plan.composition,
        b.f,
        plan.levels,
        b.diff,
        [f"argument {i}" for i in range(len(case.args))],
        loop.args_at,
        b.batched_args(),
        loop.cotangents,
        loop.tangents,
        b.tangents,
        loop_f=loop.f,
    )
    return Result.of(names, got), Result.of(names, want)


_SHOWN: dict = {}
_FALLBACK = re.compile(r"batching rule for (\S+?)\.? Please")


_RECORDING = [True]


def stop_recording_fallbacks() -> None:
    """Record no fallbacks in this process, for one of fuzzdiff's own whose output
    must stay readable (a campaign worker): torch prints the warning of an op
    that reaches the fallback from Python (a torch.library custom op) straight
    to stderr, once per call, where it cannot be recorded."""
    _RECORDING[0] = False
    torch._C._functorch._set_vmap_fallback_warning_enabled(False)  # type: ignore[attr-defined]


@contextmanager
def recording_fallbacks():
    """Collect the ops vmap ran through its slow per-example fallback (torch's
    performance warning): coverage information, not a failure."""
    ops: list[str] = []
    if not _RECORDING[0]:
        yield ops
        return
    # a torch._C._functorch binding missing from torch's type stubs
    torch._C._functorch._set_vmap_fallback_warning_enabled(True)  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield ops
        for w in caught:
            m = _FALLBACK.search(str(w.message))
            if m is None:  # not ours: shown as it would have been, once per place
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, registry=_SHOWN)
            elif m.group(1) not in ops:
                ops.append(m.group(1))
    finally:
        torch._C._functorch._set_vmap_fallback_warning_enabled(False)  # type: ignore[attr-defined]
