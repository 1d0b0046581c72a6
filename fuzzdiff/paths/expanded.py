"""Per-sample gradients of an nn.Module three ways: ExpandedWeights
(``torch.nn.utils._per_sample_grad.call_for_per_sample_grads``), a Python loop
taking one gradient per sample, and ``torch.func.vmap`` over ``grad`` with
``functional_call``.

A *module target* (fuzzdiff.targets.module) is a Target with a builder,
``Target.build_module(*sample, **kwargs) -> nn.Module``: the module
for one sample's shapes and dtype, its parameters drawn from ``kwargs["seed"]``
(so a case replays from JSON). ``fn`` itself is ``one_sample``: the module on a
batch of one, the very function whose gradients are the per-sample gradients;
the other checks fuzz that function.

Sample ``e`` of a batch of ``B`` is ``case.reseeded(e)``'s arguments: the
case's structure with fresh values, rebuilt bit for bit on replay. The samples
are stacked at dim 0, stored in the drawn layout (memory outside the view holds
junk), and moved to the module's batch dim (``batch_dims``). Every path gets a
fresh module and its own copy of that storage.

The loss is ``L = sum_b <v_b, f(x_b)>`` over every floating output, with random
cotangents ``v``, divided by ``B`` for ``loss_reduction="mean"``; ExpandedWeights
then scales per-sample gradients back by ``B`` (its documented contract), so a
per-sample gradient is ``grad <v_b, f(x_b)>`` either way, and the input's
gradient is ``dL/dx`` (1/B of the loop's for "mean").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.utils._per_sample_grad as per_sample_grad
from torch.func import functional_call, grad, vmap
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.case.layout import Layout
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.module import batch_dims  # copied into scripts with the paths that call it
from fuzzdiff.targets.target import Target

__all__ = ["Plan", "Sides", "run", "batch_dims", "REDUCTIONS", "NoBatchDim"]

REDUCTIONS = ("sum", "mean")


def out_dim(out_dims: Sequence[int], k: int) -> int:
    """Output k's batch dim (the last of ``out_dims`` repeats)."""
    return out_dims[min(k, len(out_dims) - 1)]


def floating(out) -> list[torch.Tensor]:
    """The floating-point tensors of a module's output, flattened."""
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


@dataclass(frozen=True)
class Plan:
    """What the per_sample check draws besides the case (``case.params``)."""

    batch: int
    loss_reduction: str
    input_grad: bool  # the floating inputs require grad
    infer_batch: bool  # batch_size=None: call_for_per_sample_grads infers it
    layouts: tuple[Layout | None, ...]  # per argument, of its (B, *sample) tensor

    @staticmethod
    def from_params(params: Mapping) -> Plan:
        lays = tuple(
            None if d is None else Layout(d["storage_size"], tuple(d["strides"]), d["offset"])
            for d in params.get("layouts", ())
        )
        return Plan(
            int(params["batch"]),
            params["loss_reduction"],
            bool(params["input_grad"]),
            bool(params.get("infer_batch", False)),
            lays,
        )

    def describe(self) -> str:
        return f"B={self.batch} loss_reduction={self.loss_reduction!r} input_grad={self.input_grad}" + (
            " batch_size inferred" if self.infer_batch else ""
        )


class Setup(NamedTuple):
    """What the three paths need of a plan: plain values, so that a script can
    copy the paths and this with them."""

    batch: int
    loss_reduction: str
    input_grad: bool  # the floating inputs require grad
    infer_batch: bool  # batch_size=None: call_for_per_sample_grads infers it
    diff: tuple[int, ...]  # the floating (differentiable) arguments


class Batch:
    """One case's batch: the samples stacked, laid out, and fresh copies per path."""

    def __init__(self, target: Target, case: Case, cast: torch.dtype | None = None):
        self.target, self.case = target, case
        self.plan = Plan.from_params(case.params)
        self.samples = [
            case.reseeded(e).materialize(requires_grad=False, cast=cast).args for e in range(self.plan.batch)
        ]
        self.diff = [
            i
            for i, a in enumerate(target.args)
            if target.differentiable(a.name) and self.samples[0][i].is_floating_point()
        ]
        self.storages = [self._laid_out(i) for i in range(len(case.args))]
        self._module: torch.nn.Module | None = None

    def _laid_out(self, i: int) -> tuple[torch.Tensor, tuple, tuple, int]:
        t = torch.stack([s[i] for s in self.samples])
        lay = self.plan.layouts[i] if i < len(self.plan.layouts) else None
        if lay is None:
            t = t.contiguous()
            return t.reshape(-1), tuple(t.shape), t.stride(), 0
        lay.check(t.shape, f"params.layouts[{i}]")
        storage = self.case.args[i].values.junk(lay.storage_size, t.dtype).to(t.device)
        storage.as_strided(t.shape, lay.strides, lay.offset).copy_(t)
        return storage, tuple(t.shape), lay.strides, lay.offset

    def module(self) -> torch.nn.Module:
        """The module, its parameters drawn from the case's seed; built once
        (a third of the time of a run) and shared by the paths, which leave
        it as they found it (ExpandedWeights' grad_sample is taken away)."""
        if self._module is None:
            self._module = self.target.build_module(*self.samples[0], **self.case.kwargs)
        return self._module

    @property
    def batched(self) -> list[torch.Tensor]:
        """The batch in the drawn layout, junk around it; the paths take fresh copies."""
        return [storage.as_strided(shape, strides, offset) for storage, shape, strides, offset in self.storages]

    @property
    def setup(self) -> Setup:
        p = self.plan
        return Setup(p.batch, p.loss_reduction, p.input_grad, p.infer_batch, tuple(self.diff))

    def inputs(self, requires_grad: bool, d: int):
        """(leaves in (B, *sample) form, one per argument; the arguments at batch dim ``d``)."""
        return fresh_inputs(self.batched, self.diff, requires_grad, d)


def _names(module: torch.nn.Module, n_outputs: int, batch: Batch) -> list[str]:
    arg_names = [a.name for a in batch.target.args]
    return (
        [f"output {k}" for k in range(n_outputs)]
        + [f"per-sample grad of {n}" for n, p in module.named_parameters() if p.requires_grad]
        + ([f"grad of input {arg_names[i]}" for i in batch.diff] if batch.plan.input_grad else [])
    )


def fresh_inputs(batched: Sequence[torch.Tensor], diff: Sequence[int], requires_grad: bool, d: int):
    """Fresh copies of the batch (same sizes, strides, offset and storage), as
    leaves in (B, *sample) form, and the module's arguments at batch dim ``d``."""
    leaves = []
    for i, t in enumerate(batched):
        storage = t.untyped_storage().clone()
        copy = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, t.storage_offset(), t.shape, t.stride())
        leaves.append(copy.requires_grad_(requires_grad and i in diff))
    return leaves, [t.movedim(0, d) if d else t for t in leaves]


def by_expanded_weights(module: torch.nn.Module, setup: Setup, batched: Sequence[torch.Tensor], cotangents):
    """(cotangents, results): outputs, grad_sample of every parameter and the
    inputs' gradients by ExpandedWeights; ``cotangents(outputs)`` draws the
    cotangents, one per output."""
    d, _ = batch_dims(module)
    leaves, args = fresh_inputs(batched, setup.diff, setup.input_grad, d)
    call = per_sample_grad.call_for_per_sample_grads(
        module,
        batch_size=None if setup.infer_batch else setup.batch,
        loss_reduction=setup.loss_reduction,
        batch_first=d == 0,
    )
    outs = floating(call(*args))
    cots = cotangents(outs)
    params = [p for p in module.parameters() if p.requires_grad]
    wrt = params + [leaves[i] for i in setup.diff if setup.input_grad]
    if wrt:
        loss = sum((v * o).sum() for v, o in zip(cots, outs))
        assert isinstance(loss, torch.Tensor)  # a module target has floating outputs
        (loss / setup.batch if setup.loss_reduction == "mean" else loss).backward()
    per_sample = []
    for p in params:
        g = getattr(p, "grad_sample", None)
        p.grad_sample = None  # type: ignore[attr-defined]  # ExpandedWeights' attribute, unknown to torch's stubs
        per_sample.append(
            torch.zeros((setup.batch, *p.shape), dtype=p.dtype, device=p.device) if g is None else g.detach()
        )
    inputs = (
        [torch.zeros_like(leaves[i]) if leaves[i].grad is None else leaves[i].grad for i in setup.diff]
        if setup.input_grad
        else []
    )
    return cots, [o.detach() for o in outs] + per_sample + inputs


def by_loop(
    module: torch.nn.Module, setup: Setup, batched: Sequence[torch.Tensor], cots: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """The same, one sample at a time: the gradient of <v_b, f(x_b)> per sample."""
    d, out_dims = batch_dims(module)
    leaves, _ = fresh_inputs(batched, setup.diff, setup.input_grad, d)
    params = [p for p in module.parameters() if p.requires_grad]
    wrt_inputs = [leaves[i] for i in setup.diff] if setup.input_grad else []
    outs: list[list[torch.Tensor]] = []
    per_sample: list[list[torch.Tensor]] = [[] for _ in params]
    input_grads = [torch.zeros_like(t) for t in wrt_inputs]
    for b in range(setup.batch):
        sample = [t.narrow(0, b, 1).movedim(0, d) if d else t.narrow(0, b, 1) for t in leaves]
        o = floating(module(*sample))
        outs.append([t.detach() for t in o])
        wrt = params + wrt_inputs
        if not wrt:
            continue
        loss = sum((v.narrow(out_dim(out_dims, k), b, 1) * t).sum() for k, (v, t) in enumerate(zip(cots, o)))
        assert isinstance(loss, torch.Tensor)  # a module target has floating outputs
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        for k, p in enumerate(params):
            per_sample[k].append(torch.zeros_like(p) if grads[k] is None else grads[k])
        for k, g in enumerate(grads[len(params) :]):
            if g is not None:
                input_grads[k] = input_grads[k] + g
    scale = 1.0 / setup.batch if setup.loss_reduction == "mean" else 1.0
    stacked = [torch.cat([o[k] for o in outs], out_dim(out_dims, k)) for k in range(len(outs[0]))]
    return stacked + [torch.stack(g) for g in per_sample] + [g * scale if scale != 1.0 else g for g in input_grads]


def by_vmap(
    module: torch.nn.Module, setup: Setup, batched: Sequence[torch.Tensor], cots: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Per-sample parameter and input gradients by vmap(grad(loss)) with functional_call."""
    d, out_dims = batch_dims(module)
    leaves, _ = fresh_inputs(batched, setup.diff, False, d)
    params = {n: p.detach() for n, p in module.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in module.named_parameters() if not p.requires_grad}
    n_args = len(leaves)

    def loss(ps, *xs_and_vs):
        xs, vs = xs_and_vs[:n_args], xs_and_vs[n_args:]
        outs = floating(functional_call(module, {**ps, **frozen}, tuple(x.unsqueeze(d) for x in xs)))
        return sum((v * o.select(out_dim(out_dims, k), 0)).sum() for k, (v, o) in enumerate(zip(vs, outs)))

    argnums = (0,) + (tuple(1 + i for i in setup.diff) if setup.input_grad else ())
    in_dims = (None,) + (0,) * n_args + tuple(out_dim(out_dims, k) for k in range(len(cots)))
    grads = vmap(grad(loss, argnums=argnums), in_dims=in_dims)(params, *leaves, *cots)
    scale = 1.0 / setup.batch if setup.loss_reduction == "mean" else 1.0
    return [grads[0][n] for n in params] + [g * scale if scale != 1.0 else g for g in grads[1:]]


def _vmap_unsupported(batch: Batch, error: Exception) -> str | None:
    """Why vmap cannot run this module, when ``error`` (from vmap of grad) comes
    from vmap itself: torch's own "unsupported" wording, or a vmap of the bare
    forward that raises so (vmap of grad of nn.RNN fails with a shape error
    where vmap of its forward says the batching rule is missing)."""
    reason = unsupported_reason(error)
    if reason is not None:
        return reason
    module = batch.module()
    d, _ = batch_dims(module)
    leaves, _ = batch.inputs(False, d)
    params = {n: p.detach() for n, p in module.named_parameters()}
    try:
        vmap(lambda *xs: tuple(floating(functional_call(module, params, tuple(x.unsqueeze(d) for x in xs)))))(*leaves)
    except Exception as e:  # noqa: BLE001 - classified below
        forward = unsupported_reason(e)
        if forward is not None:
            return (
                f"vmap of the forward: {forward}; vmap of grad raised "
                f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            )
    return None


class Sides(NamedTuple):
    """Outputs, per-sample parameter gradients and input gradients, by name,
    from each path; ``vmapped.skipped`` says why vmap could not run the module."""

    expanded: Result
    looped: Result
    vmapped: Result


class NoBatchDim(FuzzdiffError, ValueError):
    """A module output without the batch dim (a loss already summed over the
    batch): there is no term per sample to take a gradient of."""


def run(target: Target, case: Case, cast: torch.dtype | None = None, vmapped: bool = True) -> Sides:
    """The three paths on one batch; ``cast`` recomputes at the same values in another dtype."""
    batch = Batch(target, case, cast)
    module, setup, batched = batch.module(), batch.setup, batch.batched
    cots, expanded = by_expanded_weights(module, setup, batched, lambda o: probes_like(case.params, "cotangent", o))
    _, out_dims = batch_dims(module)
    for k, o in enumerate(expanded[: len(cots)]):
        dim = out_dim(out_dims, k)
        if o.dim() <= dim or o.shape[dim] != setup.batch:
            raise NoBatchDim(
                f"output {k} has shape {list(o.shape)}, no batch of {setup.batch} at dim {dim}: "
                "per-sample gradients need one output term per sample"
            )
    names = _names(module, len(cots), batch)
    looped = by_loop(module, setup, batched, cots)
    vmapped_side = Result.not_run(names, "not asked for")
    if vmapped:
        try:
            got = by_vmap(module, setup, batched, cots)
        except Exception as e:  # noqa: BLE001 - anything vmap does not own propagates
            why = _vmap_unsupported(batch, e)
            if why is None:
                raise
            vmapped_side = Result.not_run(names, why)
        else:
            vmapped_side = Result.of(names, looped[: len(cots)] + got)  # vmap(grad) gives no outputs
    return Sides(Result.of(names, expanded), Result.of(names, looped), vmapped_side)
