"""The compile check's script fragment: the target compiled by the case's backend vs eager.

The script rebuilds the inputs as the check ran them (with the aliasing the
check drew for a target that writes its inputs), embeds the cotangents, and
runs the target eagerly and compiled, each on its own fresh inputs; it
prints the output metadata both ways and every compared tensor's error, as
``fuzzdiff.paths.compiled.run`` computes them, and, as the check, a
backward that refuses a saved tensor written in place as a mismatch. A
program target is printed as the plain torch function it is; its numbers,
like every keyword argument, reach the function through a closure
(fuzzdiff.script.fragments). Where the function raised at a transform's
arguments when the script was written, grad's and vjp's scripts have no
cotangents: they call it first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fuzzdiff.case.directions import probes_like
from fuzzdiff.checks.fragment import lines
from fuzzdiff.paths import compiled as path
from fuzzdiff.script.fragments import Fragment, register
from fuzzdiff.script.helpers import reserve
from fuzzdiff.script.inputs import inputs_code
from fuzzdiff.script.literals import dtype_name, tensor_literal

__all__ = ["compile_fragment", "TRANSFORM_NAMES"]

# The transforms' wrappers, copied by source: registered now, so that the
# script's names (fuzzdiff.script.SCRIPT_NAMES) include them.
TRANSFORMS: dict[str, Callable[..., Any]] = {**path.TRANSFORM_FUNCTIONS, "dual": path.dual_transform}
reserve(tuple(TRANSFORMS.values()))
# Module-level names a transform's script defines besides them
TRANSFORM_NAMES = ("N_ARGS", "PROBES", "LABELS", "transform_args", "target_outputs", "compare_runs")

COMPILED = '''
def compiled(fn):
    """fn compiled by BACKEND, as the compile check does."""
    if BACKEND in ("aot_eager", "inductor"):
        return torch.compile(fn, backend=BACKEND, dynamic=True)
    from functorch.compile import aot_function, default_partition, min_cut_rematerialization_partition, nop
    partition = min_cut_rematerialization_partition if BACKEND == "aot_function_min_cut" else default_partition
    return aot_function(fn, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)


def copy(leaf):
    """A non-leaf tensor with the leaf's values, strides, offset and storage, whose
    gradient flows to the leaf: a target may write it in place."""
    with torch.no_grad():
        buf = leaf.new_empty(0).set_(leaf.detach().untyped_storage().clone())
    out = buf.as_strided(leaf.shape, leaf.stride(), leaf.storage_offset())
    return out.copy_(leaf) if leaf.requires_grad else out


def metadata(o, args):
    """requires_grad, is_leaf, dtype, shape, the inputs o is a view of, and then its
    strides (dims of size > 1) and storage offset."""
    ids = [a.untyped_storage()._cdata for a in args]
    views = tuple(i for i, s in enumerate(ids) if s == o.untyped_storage()._cdata) if o.numel() else ()
    where = (tuple(s for s, n in zip(o.stride(), o.shape) if n > 1), o.storage_offset()) if views else None
    return (o.requires_grad, o.is_leaf, o.dtype, tuple(o.shape), views, where)
'''.strip("\n")

MACHINERY = '''
def storages(args):
    """Every distinct storage the arguments live in, whole, after the call."""
    seen, out = set(), []
    for a in args:
        if a.untyped_storage()._cdata not in seen:
            seen.add(a.untyped_storage()._cdata)
            out.append(a.new_empty(0).set_(a.detach().untyped_storage()).detach().clone())
    return out


def run(fn):
    """(names, tensors compared by value, output metadata, argument metadata after the
    call, the backward's error where it refuses a saved tensor written in place)."""
    with torch.set_grad_enabled(GRAD):  # the copies too: a view made under no_grad must not see a write made with grad
        leaves = make_leaves()
        args = make_args([copy(l) for l in leaves] if WRITES_INPUTS else leaves)
        outs = outputs(fn(*args))
        meta = [metadata(o, args) for o in outs]
        arg_meta = [(tuple(a.shape), a.stride(), a.storage_offset(), a.requires_grad) for a in args]
        written = list(args) if WRITES_INPUTS else []
        tensors = [*outs, *args, *storages(args)]
        names = ([f"output {k}" for k in range(len(outs))] + [f"{n} after the call" for n in ARG_NAMES]
                 + [f"storage {k} after the call" for k in range(len(tensors) - len(outs) - len(args))])
        backward_error = None
        if GRAD and leaves:
            try:
                tensors += vjp([*outs, *written], leaves, COTANGENTS)
                names += [f"grad of {n}" for n in LEAF_NAMES]
            except RuntimeError as e:
                if "modified by an inplace operation" not in str(e):
                    raise
                backward_error = "raises: " + str(e).splitlines()[0]
    return names, [t.detach() for t in tensors], meta, arg_meta, backward_error
'''.strip("\n")


def _data(ctx) -> tuple[str, bool]:
    """(the inputs as the check ran them, constants and cotangents; whether it ran with grad)."""
    case, target = ctx.case, ctx.target
    aliased = path.aliased_case(case)
    inputs = inputs_code(aliased, aliased.storages(), ctx.names, on_device=ctx.on_device)
    try:
        eager = path.run(target, case, None)
    except Exception:  # noqa: BLE001 - the function raises at the case: so does the script's run(call)
        eager = None
    grad = eager is None or eager.grad_error is None
    written = [] if target.functional or eager is None else eager.inputs
    cotangents = [] if eager is None else probes_like(case.params, "cotangent", [*eager.outputs, *written])
    blocks = [
        f"DTYPE = {dtype_name(case.torch_dtype)}",
        inputs.storages,
        inputs.functions,
        f"ARG_NAMES = {ctx.names!r}\nLEAF_NAMES = {inputs.leaf_names!r}",
        f"BACKEND = {case.params['backend']!r}",
        f"WRITES_INPUTS = {not target.functional!r}  # the target writes its inputs: both sides get non-leaf copies"
        if not target.functional
        else "WRITES_INPUTS = False  # a functional target: the leaves are passed as they are",
        f"GRAD = {grad!r}"
        + (
            "" if grad else "  # eager's backward raises here (a saved tensor written in place): both run under no_grad"
        ),
        "# Cotangents: one per output, then one per argument after the call when it is written",
        "COTANGENTS = [\n"
        + "".join(f"    {tensor_literal(t, indent='    ', on_device=ctx.on_device)},\n" for t in cotangents)
        + "]",
        COMPILED,
        MACHINERY,
    ]
    return "\n\n\n".join(blocks), grad


TRANSFORM_MACHINERY = '''
def target_outputs(fn):
    """fn's floating-point outputs, as a tuple, with fn held in a closure, as the
    compile check holds the function under test: dynamo specializes an int it
    reaches through a global (an OpInfo sample's alpha=1), not one it reaches
    through a closure, which it traces as a symbolic int."""

    def floating(*args):
        return tuple(outputs(fn(*args)))

    return floating


def compare_runs(want, got, args_want, args_got, want_tangents=None, got_tangents=None):
    """Output metadata (and for dual outputs, which have a tangent), then every result's error."""
    want_meta = [metadata(o, args_want) for o in want]
    got_meta = [metadata(o, args_got) for o in got]
    if want_tangents is not None:
        want_meta += [("no tangent",) if t is None else metadata(t, args_want) for t in want_tangents]
        got_meta += [("no tangent",) if t is None else metadata(t, args_got) for t in got_tangents]
        want = [*want, *(torch.zeros_like(p) if t is None else t for p, t in zip(want, want_tangents))]
        got = [*got, *(torch.zeros_like(p) if t is None else t for p, t in zip(got, got_tangents))]
    print("metadata, eager:   ", want_meta)
    print("metadata, compiled:", got_meta)
    results = [(want_meta == got_meta, "output metadata (views of inputs, their strides, requires_grad, "
                                       "is_leaf, dtype, shape; a dual output's tangent)")]
    if len(got) != len(want):
        results.append((False, f"{len(got)} results, eager has {len(want)}"))
    else:
        labels = LABELS or [f"result {k}" for k in range(len(want))]  # None: eager raised when written
        results.append(compare(labels, [t.detach() for t in got], [t.detach() for t in want]))
    return results
'''.strip("\n")


def _transform_data(ctx) -> tuple[str, str | None]:
    """(the arguments (vmap: batched), the probes and the results' names, for a
    transform; the exception the function raised drawing the probes, if it did)."""
    case, target = ctx.case, ctx.target
    transform = case.params["transform"]
    inputs = inputs_code(case, case.storages(), ctx.names, on_device=ctx.on_device)
    args = path.batched_args(case, None) if transform == "vmap" else case.materialize(requires_grad=False).args
    try:
        labels = repr(path.run(target, case, None).output_names())
    except Exception as e:  # noqa: BLE001 - the eager side raises: so does the script, where it runs it
        labels = f"None  # the eager side raised {type(e).__name__} when this was written"
    raised = None
    try:
        probes = path.transform_probes(case, path._floating(path._call(target.fn, case.kwargs)), args)
    except Exception as e:  # noqa: BLE001 - cotangents like outputs that the raising call never gives
        raised, probes = type(e).__name__, []
    wrt = path.wrt(case)
    if transform == "vmap":
        batched = "\n".join(
            f"    args[{i}] = {tensor_literal(args[i], indent='    ', on_device=ctx.on_device)}"
            f"  # {ctx.names[i]}, a batch along dim 0"
            for i in wrt
        )
        make = (
            "def transform_args():\n"
            f'    """The arguments, plain tensors; those at WRT batched: {case.params.get("batch", 2)} examples."""\n'
            "    args = make_args(make_leaves(requires_grad=False))\n" + batched + "\n    return args"
        )
    else:
        make = (
            "def transform_args():\n"
            '    """The arguments as plain tensors (no requires_grad), as users pass them to torch.func."""\n'
            "    return make_args(make_leaves(requires_grad=False))"
        )
    what = {"grad": "cotangents v", "vjp": "cotangents v", "jvp": "tangents u", "dual": "tangents u"}
    blocks = [
        f"DTYPE = {dtype_name(case.torch_dtype)}",
        inputs.storages,
        inputs.functions,
        f"ARG_NAMES = {ctx.names!r}\nLEAF_NAMES = {inputs.leaf_names!r}",
        f"# The arguments differentiated (vmap: batched): {', '.join(ctx.names[i] for i in wrt)}\nWRT = {wrt!r}",
        f"N_ARGS = {len(case.args)}\nBACKEND = {case.params['backend']!r}",
        f"# The results compared, by name\nLABELS = {labels}",
        make,
        f"# {what.get(transform, 'no probes: vmap takes none')}, one per "
        + ("output" if transform in ("grad", "vjp") else "argument at WRT")
        + "\nPROBES = [\n"
        + "".join(f"    {tensor_literal(t, indent='    ', on_device=ctx.on_device)},\n" for t in probes)
        + "]",
        COMPILED,
        TRANSFORM_MACHINERY,
    ]
    return "\n\n\n".join(blocks), raised


def _transform_fragment(ctx) -> Fragment:
    case = ctx.case
    transform, backend = case.params["transform"], case.params["backend"]
    wrapper = TRANSFORMS[transform]
    extra, raised = _transform_data(ctx)
    if transform == "dual":
        body = lines(
            "args = transform_args()",
            "want, want_tangents = dual_transform(target_outputs(call), args, WRT, PROBES)",
            "compiled_call = compiled(call)",
            "got_args = transform_args()",
            "got, got_tangents = dual_transform(lambda *a: outputs(compiled_call(*a)), got_args, WRT, PROBES)",
            "return finish(compare_runs(want, got, args, got_args, want_tangents, got_tangents))",
        )
        summary = f"{backend}: the compiled function at dual inputs vs eager: outputs and their tangents"
    else:
        body = lines(
            f"transformed = {wrapper.__name__}(target_outputs(call), N_ARGS, WRT)",
            "args = transform_args()",
            "want = list(transformed(*args, *PROBES))",
            "got_args = transform_args()",
            "got = list(compiled(transformed)(*got_args, *PROBES))",
            "return finish(compare_runs(want, got, args, got_args))",
        )
        summary = f"{backend}: torch.func.{transform} of the function, compiled whole, vs eager"
    if raised is not None:  # grad's and vjp's cotangents, like outputs it never gave: it runs first
        body = (
            lines(
                f"if not PROBES:  # the function raised {raised} at the arguments when this was written",
                "    target_outputs(call)(*transform_args())  # raises it here",
                f'    print("OK: the function runs at the arguments, where it raised {raised} when this "',
                '          "script was written: no cotangents were drawn, so nothing else is compared")',
                "    return 0",
            )
            + "\n"
            + body
        )
    return Fragment(
        summary,
        body,
        ("outputs", "compare", "finish"),
        (),
        extra=extra,
        inputs=False,
        copies=(wrapper,),
        forward_ad=transform == "dual",
    )


@register("compile", kwargs_in_closure=True)
def compile_fragment(ctx) -> Fragment:
    if ctx.case.params.get("transform", "none") != "none":
        return _transform_fragment(ctx)
    backend = ctx.case.params["backend"]
    extra, _ = _data(ctx)
    return Fragment(
        f"{backend} vs eager: outputs, output metadata, inputs after the call and gradients",
        lines(
            "names, want, want_meta, want_args, want_error = run(call)",
            "_, got, got_meta, got_args, got_error = run(compiled(call))",
            'print("output metadata, eager:   ", want_meta)',
            'print("output metadata, compiled:", got_meta)',
            'results = [(want_meta == got_meta, "output metadata (views of inputs, their strides, "',
            '            "requires_grad, is_leaf, dtype, shape)"),',
            '           (want_args == got_args, "argument metadata after the call"),',
            "           (want_error == got_error, f\"the backward: eager {want_error or 'runs'}, \"",
            "                                     f\"compiled {got_error or 'runs'}\")]",
            "if len(got) != len(want):",
            '    results.append((False, f"{len(got)} results, eager has {len(want)}"))',
            "else:",
            "    results.append(compare(names, got, want))",
            "return finish(results)",
        ),
        ("outputs", "vjp", "compare", "finish"),
        (),
        extra=extra,
        inputs=False,
    )
