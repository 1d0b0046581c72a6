"""compile: compiled execution against eager, for every backend.

The backend is drawn per case (``params["backend"]``, fuzzdiff.paths.compiled):
aot_function with nop compilers and the default or min-cut partitioner,
torch.compile with aot_eager, and with inductor. Both sides run the same
inputs (aliasing and layouts included; a target that writes its inputs gets
non-leaf copies and aliasing drawn here, since cases() draws none for it).

Compared:

- output values and gradients of ``<v, outputs> + <w, inputs after>``
  (random cotangents), and every input and input storage after the call
  (mutations, and writes a functional target must not make), with the
  check's tolerance;
- output metadata, exactly: requires_grad, is_leaf, dtype, shape, which
  inputs each output is a view of, and the strides and storage offset of
  an output that is a view of an input. Not the strides of an output that
  aliases no input: they are the compiler's choice (inductor returns
  contiguous results where eager keeps a permuted input's layout), and no
  program can observe them except through ``stride()``. A view's strides
  are observable through every write into its base, so they must agree;
- input metadata after the call: shape, strides, offset, requires_grad.

Never crying wolf: a value mismatch must repeat (compiled and eager alike),
must not vanish at a neighbouring point (a tie or a clamp boundary), and in
low precision the compiled result must be further from a float64 eager run
than eager is, by a factor of 10 beyond the tolerance (inductor reassociates
sums). A metadata mismatch must repeat. Dynamo's Unsupported errors, graph
breaks, data-dependent guards and code the tracer cannot follow
(``.numpy()`` or ``.tolist()`` at a FakeTensor; from a custom op, whose fake
kernel must not read data, that is a finding) are "unsupported"; so is an
example eager itself rejects (a partially overlapping write). Where eager
refuses only the backward (a saved tensor written in place), both sides run
under no_grad: AOTAutograd traces that backward and would refuse the forward
too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace

from hypothesis import reject
from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.case.layout import Layout
from fuzzdiff.checks.check import Check, CiSample, Cost, OpInfoRole
from fuzzdiff.checks.opcheck import custom_op
from fuzzdiff.config import FuzzConfig
from fuzzdiff.confirm.against_eager import judge_against_eager
from fuzzdiff.confirm.ladder import Ladder
from fuzzdiff.confirm.steps import identical_to, repeat
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.guards.unsupported import unsupported_reason, vmap_unsupported_reason
from fuzzdiff.paths import compiled as path
from fuzzdiff.targets import discrepancies as known
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.aliasing import aliasing
from strategies.cotangents import probes

__all__ = [
    "CHECK",
    "CONTIGUOUS_DIRECTION",
    "RESTRICTED",
    "contiguous_direction",
    "restricted",
    "CompileParams",
    "METADATA_LADDER",
]

# compiled against eager: fuzzdiff.confirm.against_eager.LADDER; metadata is exact
METADATA_LADDER = Ladder(("repeat",))
_PROBE = probes().map(lambda p: p.__dict__.copy())
_CONTIGUOUS_PROBE = _PROBE.map(lambda p: {**p, "layout": "contiguous"})


@dataclass(frozen=True)
class CompileParams:
    """The compile check's draws: a backend among ``backends``
    (FuzzConfig.compile_backends), a cotangent, and for a target that writes
    its inputs the aliasing between them (cases() draws none for it). For a
    functional target with a differentiated argument, also a transform
    (fuzzdiff.paths.compiled) among ``transforms`` (FuzzConfig.compile_transforms),
    weighted so that "none" keeps three shares in eight, with a tangent
    direction and a vmap batch size."""

    backends: tuple[str, ...] = path.BACKENDS
    transforms: tuple[str, ...] = path.TRANSFORMS

    def __call__(self, target: Target, case: Case) -> st.SearchStrategy:
        if target.functional:
            if not path.wrt(case):
                return _base(self.backends)
            transforms = tuple(t for t in self.transforms if SKIPPED_WITH.get(t) not in target.skip)
            return _with_transform(self.backends, transforms, _conditions(case))
        base = _base(self.backends)
        groups = [0 if a.grad != "none" else None for a in case.args]
        aliased = aliasing(case.args, groups, views=False).map(lambda after: path.aliases_param(case.args, after))
        return st.tuples(base, aliased).map(lambda p: {**p[0], "aliases": p[1]} if p[1] else p[0])


# The eager check of a transform: a target that skips it (torch documents that
# vmap refuses a training-mode norm's running statistics) is not drawn the
# transform, compiled or not
SKIPPED_WITH = {"vmap": "vmap", "jvp": "forward", "dual": "forward"}
# "none" first: a failing case shrinks towards compiling f alone
TRANSFORM_WEIGHTS = ("none", "none", "none", "grad", "vjp", "jvp", "vmap", "dual")
# Backends a transform is not drawn with, and why: torch bugs of the transform
# machinery, whatever the op, each a known discrepancy with its records (stated
# in the docs; a record that names such a pair still runs it). A restriction
# holds while one of its discrepancies is present in the running torch: from the
# release that fixed them on, the pair is drawn again, and a bug that comes back
# is news. The condition: "any" case, or "layout": a differentiated argument
# that is not contiguous at offset 0 in a storage of its own size.
RESTRICTED: dict[tuple[str, str, str], tuple[Known, ...]] = {
    ("dual", "inductor", "any"): (known.DUAL_INDUCTOR_NO_TANGENTS,),
    ("jvp", "aot_eager", "layout"): (known.JVP_TANGENT_COPY_DYNAMIC,),
    ("jvp", "inductor", "layout"): (known.JVP_TANGENT_COPY_DYNAMIC,),
    ("jvp", "aot_function", "layout"): (known.JVP_STRIDE0_AOT_FUNCTION, known.JVP_VIEW_AOT_FUNCTION),
    ("jvp", "aot_function_min_cut", "layout"): (known.JVP_STRIDE0_AOT_FUNCTION, known.JVP_VIEW_AOT_FUNCTION),
}


# Transforms and backends whose tangent direction is drawn contiguous: jvp under
# dynamic shapes raises when make_dual copies a tangent into another layout than
# its primal's, an expanded tangent of a contiguous primal too (record
# 2def52e7055c03dd); "layout" above keeps the primal contiguous. Versioned alike.
CONTIGUOUS_DIRECTION: dict[tuple[str, str], tuple[Known, ...]] = {
    ("jvp", "aot_eager"): (known.JVP_TANGENT_COPY_DYNAMIC,),
    ("jvp", "inductor"): (known.JVP_TANGENT_COPY_DYNAMIC,),
}


def _present(discrepancies: tuple[Known, ...]) -> bool:
    return any(k.present for k in discrepancies)


def restricted(transform: str, backend: str, conditions: Iterable[str]) -> bool:
    """Whether the running torch keeps ``transform`` from ``backend`` at a case meeting ``conditions``."""
    return any(_present(RESTRICTED.get((transform, backend, c), ())) for c in conditions)


def contiguous_direction(transform: str, backend: str) -> bool:
    """Whether the running torch needs ``transform``'s tangent direction contiguous on ``backend``."""
    return _present(CONTIGUOUS_DIRECTION.get((transform, backend), ()))


def _conditions(case: Case) -> frozenset[str]:
    """The RESTRICTED conditions ``case`` meets."""
    wrt = [case.args[i] for i in path.wrt(case)]
    out = {"any"}
    if any(a.strided != Layout.contiguous(a.shape) for a in wrt):
        out.add("layout")
    return frozenset(out)


@functools.cache
def _base(backends: tuple[str, ...]) -> st.SearchStrategy:
    return st.fixed_dictionaries({"backend": st.sampled_from(backends), "cotangent": _PROBE})


@functools.cache
def _transforms(backend: str, allowed: tuple[str, ...], conditions: frozenset[str]) -> st.SearchStrategy:
    """``allowed``'s transforms that ``backend`` can take at a case meeting
    ``conditions``, by TRANSFORM_WEIGHTS; f alone where it can take none of them."""
    drawn = tuple(t for t in TRANSFORM_WEIGHTS if t in allowed and not restricted(t, backend, conditions))
    return st.sampled_from(drawn or ("none",))


@functools.cache
def _with_transform(
    backends: tuple[str, ...], transforms: tuple[str, ...], conditions: frozenset[str]
) -> st.SearchStrategy:
    def params(backend: str) -> st.SearchStrategy:
        def with_transform(transform: str) -> st.SearchStrategy:
            contiguous = contiguous_direction(transform, backend)
            return st.fixed_dictionaries(
                {
                    "backend": st.just(backend),
                    "transform": st.just(transform),
                    "cotangent": _PROBE,
                    "direction": _CONTIGUOUS_PROBE if contiguous else _PROBE,
                    "batch": st.integers(2, 3),
                }
            )

        return _transforms(backend, transforms, conditions).flatmap(with_transform)

    return st.sampled_from(backends).flatmap(params)


def _configure(check: Check, config: FuzzConfig) -> Check:
    return replace(check, params=CompileParams(config.compile_backends, config.compile_transforms))


def _metadata(eager: path.Run, other: path.Run) -> str | None:
    if len(eager.meta) != len(other.meta):
        return f"{len(other.meta)} outputs, eager has {len(eager.meta)}"
    for label, e, c in zip(eager.output_names(), eager.meta, other.meta):
        if len(e) != len(c) or len(e) != len(path.META_FIELDS):  # a dual output's tangent, or its absence
            if e != c:
                return f"{label}: {_tangent(c)} (eager: {_tangent(e)})"
            continue
        for name, a, b in zip(path.META_FIELDS, e, c):
            if a != b:
                return f"{label}: {name} {b} (eager: {a})"
    for i, (e, c) in enumerate(zip(eager.input_meta, other.input_meta)):
        if e != c:
            return f"input {i} after the call: (shape, strides, offset, requires_grad) {c} (eager: {e})"
    if eager.grads is not None and other.grads is None:
        return f"the backward raised: {other.grad_error}"
    return None


def _tangent(meta: tuple) -> str:
    return meta[0] if len(meta) == 1 else "a tangent"


# How a transform's identity reads in a verdict ("none": as before the transforms)
DESCRIBED = {
    "grad": "grad(<v, f>)",
    "vjp": "vjp(f)(v)",
    "jvp": "jvp(f)(u)",
    "vmap": "vmap(f)",
    "dual": "f at dual inputs",
}


def run(target: Target, case: Case) -> Verdict:
    backend = case.params["backend"]
    transform = case.params.get("transform", "none")
    tol = tolerance(target, "compile", case.torch_dtype)
    grads = True
    # An exception of eager itself is a finding at a valid input (the runner
    # confirms it), as under every other check: never "nothing to compare";
    # only torch's refusal of an invalid input (Target.invalid) rejects it,
    # and a transform torch cannot apply to the target (no vmap rule, no
    # forward-mode formula) is unsupported.
    try:
        eager = path.run(target, case, None)
    except Exception as e:  # noqa: BLE001
        if target.rejects(e):
            reject()
        if transform == "vmap":
            reason = vmap_unsupported_reason(e, lambda: path.run(target, case, None))
        else:
            reason = unsupported_reason(e) if transform != "none" else None
        if reason is not None:
            return Verdict("unsupported", f"eager {DESCRIBED[transform]}: {reason}")
        raise
    if eager.grad_error:
        # Eager refuses the backward (a saved tensor was written in place), and
        # AOTAutograd, tracing that backward, would too: compare without grad.
        grads, note = False, f" (run under no_grad: eager's backward raises: {eager.grad_error})"
        eager = path.run(target, case, None, grads=False)
    else:
        note = ""
    identity = f"{backend} vs eager" if transform == "none" else f"{backend}, {DESCRIBED[transform]} vs eager"
    try:
        got = path.run(target, case, backend, grads=grads)
    except Exception as e:  # noqa: BLE001
        # Code the tracer cannot follow (.numpy() at a FakeTensor) is unsupported;
        # from a custom op it is the op's fake kernel reading data: a finding.
        reason = unsupported_reason(e, traced=not custom_op(target.fn))
        if reason is not None:
            return Verdict("unsupported", f"{identity.removesuffix(' vs eager')}: {reason}")
        raise

    def rerun(c: Case, side: str | None, cast=None) -> path.Run:
        return path.run(target, c, side, cast=cast, grads=grads)

    meta = _metadata(eager, got)
    if meta is not None:
        again = repeat(lambda: _metadata(rerun(case, None), rerun(case, backend)), same=identical_to(meta))
        return METADATA_LADDER.climb(identity, meta + note, {"metadata": meta}, {"repeat": again})
    return judge_against_eager(
        identity,
        case,
        lambda c, cast: rerun(c, None, cast).values,
        lambda c, cast: rerun(c, backend, cast).values,
        tol,
        (eager.values, got.values),
        side="compiled",
        note=note,
    )


def applies(target: Target) -> str | None:
    if target.random:
        return (
            "the target draws random numbers: compiled code draws its own (inductor's philox), "
            "and a traced graph does not see the generators seeded before each call"
        )
    return None


# CI: the program targets and a rotating sample of catalog targets, few cases each
# (an inductor compile takes seconds); the nightly profile runs the whole catalog.
CHECK = Check(
    "compile",
    run,
    params=CompileParams(),
    configure=_configure,
    applies=applies,
    needs_grad=False,
    ci=CiSample(targets=4, always=("program*",), max_examples=3),
    compiles=True,
    # from 0.97 s a batch, 80.9 ms a run, in a run in which a compile pair's first batch
    # draws the cheap backends (fuzzdiff.campaign.loop.CHEAP_BACKENDS): no code generation
    cost=Cost(0.2, 0.113),
    opinfo=OpInfoRole(
        tests=(("TestEagerFusionOpInfo", "test_aot_autograd_exhaustive"), ("TestInductorOpInfo", "test_comprehensive"))
    ),
)
