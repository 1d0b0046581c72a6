"""Compiled execution: AOTAutograd and torch.compile, and the eager run it must match.

Backends (``case.params["backend"]``):

- ``aot_function``, ``aot_function_min_cut``: functorch.compile.aot_function
  with nop compilers and the default or the min-cut rematerialization
  partitioner. aot_function traces once and never guards, so it is cached
  per input structure (shapes, strides, offsets, aliasing, dtype);
- ``aot_eager``, ``inductor``: torch.compile(dynamic=True), cached per
  (target, backend, kwargs) in a function with its own code object, so each
  has its own dynamo cache and recompiles only on guard failures.

Both sides of a run get their own copy of the inputs: the leaves themselves
for a functional target (what users pass: parameters), non-leaf copies that
keep every layout, offset and aliasing for a target that writes its inputs
(torch forbids writing a leaf that requires grad in place). A run returns the
outputs, the inputs and their storages after the call, output metadata and
the gradients of ``<v, outputs> + <w, inputs after>`` with respect to the
leaves, for random cotangents ``v`` and ``w``.

Transforms (``case.params["transform"]``; a record without one is "none"):
"none" compiles the target and differentiates outside, as above; the others
compile the target under a torch.func transform, or feed it dual tensors,
and compare with the same transform run eagerly. They take the target's
arguments as plain tensors (what users pass to torch.func), differentiate or
batch the floating arguments that the case differentiates, and apply to
functional targets only:

- ``grad``: ``torch.func.grad`` of ``h = sum_k Re <v_k, f_k>`` (random ``v``);
- ``vjp``: ``torch.func.vjp(f, ...)``: the outputs and ``v^T J``;
- ``jvp``: ``torch.func.jvp(f, ..., u)``: the outputs and ``J u``;
- ``vmap``: ``torch.func.vmap(f)`` over a batch of ``params["batch"]``
  examples (the case reseeded), stacked along dim 0 of each such argument;
- ``dual``: the compiled ``f`` itself, called on forward-AD dual tensors;
  the outputs and their tangents, which must be there where eager's are.

The transforms are torch-only functions (``grad_transform``...), which the
compile check's scripts copy by source.

Inductor's on-disk caches are torch's own (``<tmp>/torchinductor_<user>``,
or $TORCHINDUCTOR_CACHE_DIR), shared by every process of the user, so xdist
workers and later runs reuse each other's kernels.
"""

from __future__ import annotations

import contextlib
import json
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import directions, probes_like
from fuzzdiff.case.layout import Alias, Layout
from fuzzdiff.config import COMPILE_BACKENDS, COMPILE_TRANSFORMS
from fuzzdiff.paths.forward import same_layout
from fuzzdiff.paths.function import differentiable, leaf_function
from fuzzdiff.paths.result import Result
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target

__all__ = [
    "BACKENDS",
    "TRANSFORMS",
    "Run",
    "run",
    "compiled",
    "compiles",
    "aliased_case",
    "dynamo_settings",
    "structure",
    "aliases_param",
    "transform_of",
    "wrt",
    "grad_transform",
    "vjp_transform",
    "jvp_transform",
    "vmap_transform",
    "dual_transform",
]

BACKENDS = COMPILE_BACKENDS
TRANSFORMS = COMPILE_TRANSFORMS


@contextlib.contextmanager
def dynamo_settings() -> Iterator[None]:
    """Dynamo settings for one compiled run, and only for it (fuzzdiff is a
    guest in its user's process): every (target, kwargs) has its own code
    object, but one may still see many guard sets (dtypes, layouts, aliasing);
    a silent fallback to eager at a recompile limit would hide every bug, so
    the limits are high and hitting one is an error."""
    # startup time: torch._dynamo takes seconds to import, and only compile needs it
    import torch._dynamo
    import torch._inductor.config as inductor

    with (
        torch._dynamo.config.patch(
            recompile_limit=256, accumulated_recompile_limit=1 << 20, fail_on_recompile_limit_hit=True
        ),
        inductor.patch(compile_threads=1),
    ):  # no subprocess pool per worker
        yield


# -- the compiled callables, cached -----------------------------------------------------

_CACHE: dict[tuple, Callable] = {}
_AOT_TRACES = [0]


def _call(fn, kwargs):
    """``fn`` at ``kwargs``; a target function with a ``bind`` attribute (a
    program) is bound to them first, so that only its statements are traced."""
    bind = getattr(fn, "bind", None)
    if bind is not None:
        fn, kwargs = bind(**kwargs), {}

    def call(*args):
        return fn(*args, **kwargs)

    return call


def _fresh_code(fn: Callable, n: int) -> Callable:
    """``fn`` with a code object of its own: dynamo keeps one cache per code object."""
    code = fn.__code__.replace(co_name=f"compiled_{n}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def structure(case: Case) -> str:
    """What aot_function's trace depends on: the case without its values and probes."""
    bare = replace(
        case,
        args=tuple(replace(a, values=replace(a.values, seed=0, nudge_seed=0, nudge=0.0)) for a in case.args),
        params={},
        data={},
    )
    return json.dumps(bare.to_json(), sort_keys=True)


def forget() -> None:
    """Drop every compiled callable: the next case of each target compiles
    afresh, as in a new process (a graph dynamo compiled for other shapes can
    take, or miss, a size the record's case has)."""
    _CACHE.clear()


def compiled(
    target: Target, case: Case, backend: str, cast: torch.dtype | None = None, transform: str = "none"
) -> Callable:
    """The target at the case's kwargs, compiled by ``backend`` (cached); under
    ``transform`` (grad, vjp, jvp, vmap) the transformed function is compiled
    whole, with the probes as extra inputs (``transform_of``)."""
    kwargs = json.dumps(case.kwargs, sort_keys=True, default=repr)
    key: tuple[object, ...] = (target.ref, id(target.fn), backend, kwargs)
    if transform != "none":  # "dual" compiles f itself, but traces it with tangents
        key += (transform, tuple(wrt(case)))
    if backend not in ("aot_eager", "inductor"):
        key += (structure(case), str(cast), torch.is_grad_enabled())
        if transform != "none":  # the probes are traced inputs too: their layouts, and vmap's batch
            key += tuple(json.dumps(case.params.get(k), sort_keys=True) for k in ("cotangent", "direction", "batch"))
    fn = _CACHE.get(key)
    if fn is None:
        call = _call(target.fn, dict(case.kwargs))
        if transform in TRANSFORM_FUNCTIONS:
            call = transform_of(transform, _floating(call), case)
        fn = _CACHE[key] = _build(_fresh_code(call, len(_CACHE)), backend)
    return fn


def _build(call: Callable, backend: str) -> Callable:
    if backend in ("aot_eager", "inductor"):
        return torch.compile(call, backend=backend, dynamic=True)
    if backend in ("aot_function", "aot_function_min_cut"):
        # startup time, as in dynamo_settings
        from functorch.compile import (
            aot_function,
            default_partition,
            min_cut_rematerialization_partition,
            nop,
        )

        partition = min_cut_rematerialization_partition if backend.endswith("min_cut") else default_partition
        _AOT_TRACES[0] += 1
        return aot_function(call, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


def compiles() -> int:
    """Compilations so far in this process: dynamo graphs plus aot_function traces."""
    # startup time, as in dynamo_settings
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]) + _AOT_TRACES[0]


# -- torch.func transforms, compiled whole (torch-only: the scripts copy them) -------------


def substituted(args, wrt, values):
    """``args`` with the arguments at positions ``wrt`` replaced by ``values``."""
    out = list(args)
    for i, value in zip(wrt, values):
        out[i] = value
    return out


def grad_transform(f, n, wrt):
    """``g(*args, *v)``: the gradient of ``sum_k Re <v_k, f(*args)_k>`` with respect
    to the arguments at positions ``wrt``, by torch.func.grad."""

    def g(*xs):
        args, v = xs[:n], xs[n:]

        def h(*d):
            total = 0
            for c, o in zip(v, f(*substituted(args, wrt, d))):
                p = (c.conj() * o).sum()
                total = total + (p.real if p.is_complex() else p)
            return total

        return torch.func.grad(h, argnums=tuple(range(len(wrt))))(*(args[i] for i in wrt))

    return g


def vjp_transform(f, n, wrt):
    """``g(*args, *v)``: the outputs of ``f`` and ``v^T J`` with respect to the
    arguments at positions ``wrt``, by torch.func.vjp."""

    def g(*xs):
        args, v = xs[:n], xs[n:]
        outs, pull = torch.func.vjp(lambda *d: tuple(f(*substituted(args, wrt, d))), *(args[i] for i in wrt))  # type: ignore[misc]
        return (*outs, *pull(tuple(v)))

    return g


def jvp_transform(f, n, wrt):
    """``g(*args, *u)``: the outputs of ``f`` and ``J u`` along tangents ``u`` of
    the arguments at positions ``wrt``, by torch.func.jvp."""

    def g(*xs):
        args, u = xs[:n], xs[n:]
        d = tuple(args[i] for i in wrt)
        outs, tangents = torch.func.jvp(lambda *d: tuple(f(*substituted(args, wrt, d))), d, tuple(u))  # type: ignore[misc]
        return (*outs, *tangents)

    return g


def vmap_transform(f, n, wrt):
    """``g(*args)``: ``f`` vmapped over dim 0 of the arguments at positions ``wrt``."""

    def g(*args):
        in_dims = tuple(0 if i in wrt else None for i in range(n))
        return tuple(torch.func.vmap(lambda *a: tuple(f(*a)), in_dims=in_dims)(*args))

    return g


def dual_transform(f, args, wrt, u):
    """The outputs of ``f`` at dual arguments (those at positions ``wrt`` carry
    the tangents ``u``), and each output's tangent: None where it has none."""
    with fwAD.dual_level():
        duals = substituted(args, wrt, [fwAD.make_dual(args[i], t) for i, t in zip(wrt, u)])
        primals, tangents = [], []
        for o in f(*duals):
            p, t = fwAD.unpack_dual(o)
            primals.append(p)
            tangents.append(t)
    return primals, tangents


TRANSFORM_FUNCTIONS = {"grad": grad_transform, "vjp": vjp_transform, "jvp": jvp_transform, "vmap": vmap_transform}


def _floating(call: Callable) -> Callable:
    """``call`` returning its floating-point tensors, as a tuple."""

    def f(*args):
        return tuple(t for t in tree_leaves(call(*args)) if differentiable(t))

    return f


def wrt(case: Case) -> list[int]:
    """The arguments a transform differentiates or batches: those the case differentiates."""
    return [i for i, a in enumerate(case.args) if a.grad != "none"]


def transform_of(transform: str, f: Callable, case: Case) -> Callable:
    """``f`` (floating outputs of the target) under ``transform``; "none" and "dual" leave it as it is."""
    if transform in ("none", "dual"):
        return f
    return TRANSFORM_FUNCTIONS[transform](f, len(case.args), wrt(case))


def batched_args(case: Case, cast: torch.dtype | None) -> list[torch.Tensor]:
    """The vmap transform's arguments: ``params["batch"]`` examples (the case
    reseeded) stacked along a new dim 0 for each differentiated argument."""
    n = int(case.params.get("batch", 2))
    examples = [case.reseeded(e).materialize(requires_grad=False, cast=cast).args for e in range(n)]
    return [torch.stack([ex[i] for ex in examples]) if i in wrt(case) else a for i, a in enumerate(examples[0])]


def transform_probes(case: Case, f: Callable, args: list[torch.Tensor]) -> list[torch.Tensor]:
    """The extra inputs of a transform: cotangents like ``f``'s outputs (grad,
    vjp), tangents of the differentiated arguments in their layouts (jvp, dual)."""
    transform = case.params["transform"]
    if transform in ("grad", "vjp"):
        with torch.no_grad():
            outs = f(*args)
        return probes_like(case.params, "cotangent", outs)
    if transform in ("jvp", "dual"):
        d = [args[i] for i in wrt(case)]
        return [same_layout(a, u) for a, u in zip(d, directions(case.params, d))]
    return []


def tangent_meta(t: torch.Tensor | None, args: list[torch.Tensor]) -> tuple:
    """A dual output's tangent: ("no tangent",), or its output_meta."""
    return ("no tangent",) if t is None else output_meta(t, args)


# -- aliasing for targets that write their inputs ---------------------------------------


def aliased_case(case: Case) -> Case:
    """The case with the aliasing drawn in ``params["aliases"]`` applied: cases()
    draws none for a target that writes its inputs (no other check can run
    one), so the compile check draws it itself (fuzzdiff.checks.compile).
    Entry i is None (argument i as drawn) or its alias, grad and layout."""
    aliases = case.params.get("aliases")
    if not aliases:
        return case
    args = list(case.args)
    for i, spec in enumerate(aliases):
        if spec is not None:
            alias, lay = spec["alias"], spec["layout"]
            args[i] = replace(
                args[i],
                grad=spec["grad"],
                alias=None if alias is None else Alias(alias["of"], alias["kind"]),
                layout=None if lay is None else Layout(lay["storage_size"], tuple(lay["strides"]), lay["offset"]),
            )
    return replace(case, args=tuple(args), data={})


def aliases_param(before, after) -> list | None:
    """``params["aliases"]`` for arguments ``before`` made ``after`` (strategies.aliasing)."""
    out = [
        None
        if a == b
        else {
            "alias": None if b.alias is None else {"of": b.alias.of, "kind": b.alias.kind},
            "grad": b.grad,
            "layout": None if b.layout is None else b.layout.__dict__.copy(),
        }
        for a, b in zip(before, after)
    ]
    return out if any(out) else None


# -- one run ----------------------------------------------------------------------------


@dataclass
class Run:
    """What one side computed: its values as a Result (``values``), which the
    check compares as every path's, and the metadata it compares exactly.
    ``grads`` is None with ``grad_error`` set when the backward raised (eager
    refuses a saved tensor modified in place)."""

    outputs: tuple[torch.Tensor, ...]
    inputs: list[torch.Tensor]  # the arguments after the call
    storages: list[torch.Tensor]  # every input storage after the call, whole
    meta: list[tuple]  # per output, see output_meta
    input_meta: list[tuple]  # per argument: shape, strides, offset, requires_grad
    grads: list[torch.Tensor] | None
    grad_error: str | None = None
    labels: list[str] | None = None  # the outputs' names under a transform ("grad 0", "tangent 1")

    def output_names(self) -> list[str]:
        """One name per output: the transform's labels where it gave them (a
        side that returned more or fewer results than labelled is caught by the
        metadata comparison, which counts them)."""
        labels = self.labels or []
        return [labels[k] if k < len(labels) else f"output {k}" for k in range(len(self.outputs))]

    @property
    def values(self) -> Result:
        """What is compared by value: outputs, inputs and their storages after
        the call, and gradients."""
        names = self.output_names()
        names += [f"input {i} after the call" for i in range(len(self.inputs))]
        names += [f"input storage {i} after the call" for i in range(len(self.storages))]
        tensors = [*self.outputs, *self.inputs, *self.storages]
        if self.grads is not None:
            names += [f"grad {k}" for k in range(len(self.grads))]
            tensors += self.grads
        return Result.of(names, tensors)


def _storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def output_meta(o: torch.Tensor, args: list[torch.Tensor]) -> tuple:
    """(requires_grad, is_leaf, dtype, shape, the inputs it is a view of, its
    strides along dims of size > 1 and storage offset if it is a view of one).
    Strides of a fresh tensor are the compiler's choice; a view's are part of
    its meaning, except where no element can observe them (an empty tensor,
    a dim of size 1)."""
    aliases = tuple(i for i, a in enumerate(args) if _storage_id(a) == _storage_id(o)) if o.numel() else ()
    where = (tuple(s for s, n in zip(o.stride(), o.shape) if n > 1), o.storage_offset()) if aliases else None
    return (o.requires_grad, o.is_leaf, o.dtype, tuple(o.shape), aliases, where)


META_FIELDS = ("requires_grad", "is_leaf", "dtype", "shape", "views of inputs", "strides and offset")


def _inputs(target: Target, case: Case, cast: torch.dtype | None):
    """(leaves, arguments) for one side: fresh tensors on every call."""
    f = leaf_function(target, case, cast=cast)
    if target.functional:
        return f.leaves, f.args
    return f.leaves, f.inputs.rebuild([_copy(l) for l in f.leaves])


def _copy(leaf: torch.Tensor) -> torch.Tensor:
    """A non-leaf tensor with ``leaf``'s values, strides, offset and storage
    contents, whose gradient flows to ``leaf``."""
    with torch.no_grad():
        buf = leaf.new_empty(0).set_(leaf.detach().untyped_storage().clone())
    out = buf.as_strided(leaf.shape, leaf.stride(), leaf.storage_offset())
    return out.copy_(leaf) if leaf.requires_grad else out


def run(target: Target, case: Case, backend: str | None, *, cast: torch.dtype | None = None, grads: bool = True) -> Run:
    """The target at ``case`` run eagerly (``backend=None``) or compiled;
    ``grads=False`` runs it under no_grad (AOTAutograd's inference path)."""
    with contextlib.ExitStack() as stack:
        if backend is not None:
            stack.enter_context(dynamo_settings())
        transform = case.params.get("transform", "none")
        if transform != "none":
            return _run_transform(target, case, backend, cast, transform)
        if not grads:
            stack.enter_context(torch.no_grad())
        return _run(target, aliased_case(case), backend, cast, grads)


def _run_transform(target: Target, case: Case, backend: str | None, cast: torch.dtype | None, transform: str) -> Run:
    """One side of a transform: the target's arguments as plain tensors (fresh),
    the transform eager (``backend=None``) or compiled whole."""
    args = batched_args(case, cast) if transform == "vmap" else case.materialize(requires_grad=False, cast=cast).args
    f = _floating(_call(target.fn, case.kwargs))
    probes = transform_probes(case, f, args)
    if transform == "dual":
        fn = f if backend is None else _floating(compiled(target, case, backend, cast, transform))
        primals, tangents = dual_transform(fn, args, wrt(case), probes)
        outs = (*primals, *(torch.zeros_like(p) if t is None else t for p, t in zip(primals, tangents)))
        meta = [output_meta(o, args) for o in primals] + [tangent_meta(t, args) for t in tangents]
        labels = [f"output {k}" for k in range(len(primals))] + [f"tangent {k}" for k in range(len(primals))]
    else:
        fn = transform_of(transform, f, case) if backend is None else compiled(target, case, backend, cast, transform)
        outs = tuple(fn(*args, *probes))
        meta = [output_meta(o, args) for o in outs]
        labels = _labels(transform, len(outs), len(wrt(case)))
    input_meta = [(tuple(a.shape), a.stride(), a.storage_offset(), a.requires_grad) for a in args]
    return Run(tuple(outs), list(args), _storages(args), meta, input_meta, None, labels=labels)


def _labels(transform: str, count: int, grads: int) -> list[str]:
    """Names of a transform's results: outputs, then gradients or tangents."""
    if transform == "grad":
        return [f"grad {k}" for k in range(count)]
    if transform == "vmap":
        return [f"output {k}" for k in range(count)]
    second = "grad" if transform == "vjp" else "tangent"
    n = count - grads if transform == "vjp" else count // 2
    return [f"output {k}" for k in range(n)] + [f"{second} {k}" for k in range(count - n)]


def _run(target: Target, case: Case, backend: str | None, cast: torch.dtype | None, grads: bool) -> Run:
    leaves, args = _inputs(target, case, cast)
    fn = _call(target.fn, case.kwargs) if backend is None else compiled(target, case, backend, cast)
    outs = tuple(t for t in tree_leaves(fn(*args)) if differentiable(t))
    meta = [output_meta(o, args) for o in outs]
    input_meta = [(tuple(a.shape), a.stride(), a.storage_offset(), a.requires_grad) for a in args]
    written = [] if target.functional else list(args)
    storages = _storages(args)
    result = Run(outs, list(args), storages, meta, input_meta, None)
    if grads and leaves:
        results = [*outs, *written]
        cotangents = probes_like(case.params, "cotangent", results)
        try:
            result.grads = [per_location(g, l) for g, l in zip(vjp(results, leaves, cotangents), leaves)]
        except RuntimeError as e:
            if "modified by an inplace operation" not in str(e):
                raise
            result.grad_error = str(e).splitlines()[0]
    return result


def per_location(grad: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    """``grad`` summed over ``leaf``'s stride-0 dims: one entry per memory location.

    A stride-0 leaf holds one value per location, so only the sum of its
    gradient over the entries that share one is determined (the derivative
    along every direction the leaf can move); how a backward splits it is a
    convention, and torch's own differ: eager ``reshape`` passes the
    cotangent through ([1.5, -0.5]), ``as_strided_backward`` and a
    ``dynamic=True`` compile give the mean ([0.5, 0.5])."""
    dims = [d for d, (n, st) in enumerate(zip(leaf.shape, leaf.stride())) if st == 0 and n > 1]
    return grad.sum(dims, keepdim=True) if dims else grad


def _storages(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each distinct storage the arguments live in, whole, as a 1-D copy."""
    seen, out = set(), []
    for a in args:
        key = _storage_id(a)
        if key not in seen:
            seen.add(key)
            s = a.detach().untyped_storage()
            out.append(a.new_empty(0).set_(s).detach().clone() if s.nbytes() else a.new_empty(0))
    return out
