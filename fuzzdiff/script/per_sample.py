"""The per_sample check's script fragment: ExpandedWeights vs a loop vs vmap(grad).

The script builds the module with the target's own (copied) builder and the
case's keyword arguments, embeds the batch exactly as the check lays it out
(storage, strides, offset, junk outside the view) and the cotangents, then
runs fuzzdiff.paths.expanded's three paths, copied.
"""

from __future__ import annotations

import torch

from fuzzdiff.checks.fragment import lines
from fuzzdiff.paths import expanded as path
from fuzzdiff.script.fragments import Fragment, register
from fuzzdiff.script.literals import ScriptError, tensor_literal, value_literal
from fuzzdiff.script.source import target_code

__all__ = ["per_sample"]

NAMES = frozenset(
    {
        "SETUP",
        "PS_KWARGS",
        "PS_SAMPLE",
        "PS_BATCHED",
        "PS_COTANGENTS",
        "PS_DIFF",
        "PS_NAMES",
        "PS_BATCH",
        "PS_LOSS_REDUCTION",
        "PS_INPUT_GRAD",
        "PS_INFER_BATCH",
    }
)


def _tensors(name: str, tensors, doc: str) -> str:
    items = "".join(f"    {tensor_literal(t, indent='    ')},\n" for t in tensors)
    return f"# {doc}\n{name} = [\n{items}]"


def _data(ctx) -> tuple[str, str, str]:
    """(the data block, the builder's name, why vmap is not run or "")."""
    target, case = ctx.target, ctx.case
    build = target.module
    code = target_code(target.fn, target.name)
    if build is None or build.__name__ not in code.names:
        raise ScriptError(
            f"target {target.name!r}: its module builder is not part of the code "
            "its function refers to, so the script cannot build the module"
        )
    clash = code.names & NAMES
    if clash:
        raise ScriptError(f"target {target.name!r} defines {sorted(clash)}, which the script uses")
    batch = path.Batch(target, case)
    module = batch.module()
    d, _ = path.batch_dims(module)
    leaves, args = batch.inputs(False, d)
    with torch.no_grad():
        outs = path.floating(module(*args))
    cotangents = path.probes_like(case.params, "cotangent", outs)
    names, skipped = path._names(module, len(outs), batch), ""
    if not ctx.crashed:  # a crash record's case killed its process: the script runs it, not this
        try:
            sides = path.run(target, case)
            names, skipped = list(sides.looped.names), sides.vmapped.skipped
        except Exception:  # noqa: BLE001 - the script raises the same at ExpandedWeights
            pass
    block = "\n".join(
        [
            f"PS_KWARGS = {value_literal(dict(case.kwargs))}  # the module's hyperparameters",
            "# the batch size, loss_reduction, whether the floating inputs require grad, whether",
            "# ExpandedWeights infers the batch size, and the floating (differentiable) arguments",
            f"SETUP = {batch.setup!r}",
            f"PS_NAMES = {names!r}",
            "",
            _tensors("PS_SAMPLE", batch.samples[0], "One sample (the module is built for its shapes and dtype)"),
            "",
            _tensors(
                "PS_BATCHED",
                leaves,
                "The batch, samples stacked at dim 0, in the drawn layout "
                "(moved to the module's batch dim when it is not 0)",
            ),
            "",
            _tensors("PS_COTANGENTS", cotangents, "Cotangents, one per output, batched"),
        ]
    )
    return block, build.__name__, skipped


@register("per_sample")
def per_sample(ctx) -> Fragment:
    data, build, skipped = _data(ctx)
    vmap_lines = (
        [f"print({'vmap(grad(functional_call)) not run: ' + skipped!r})"]
        if skipped
        else [
            "results.append(compare([f'vmap: {n}' for n in PS_NAMES[n_out:]],",
            "                       by_vmap(fresh(), SETUP, PS_BATCHED, PS_COTANGENTS), looped[n_out:]))",
        ]
    )
    return Fragment(
        "ExpandedWeights per-sample gradients vs a loop over the samples vs vmap(grad)",
        lines(
            "def fresh():",
            f"    return {build}(*PS_SAMPLE, **PS_KWARGS)",
            "",
            "# ExpandedWeights against one gradient per sample (outputs, then each",
            "# parameter's per-sample gradient, then the inputs' gradients).",
            "_, expanded = by_expanded_weights(fresh(), SETUP, PS_BATCHED, lambda outputs: PS_COTANGENTS)",
            "looped = by_loop(fresh(), SETUP, PS_BATCHED, PS_COTANGENTS)",
            "results = [compare(PS_NAMES, expanded, looped)]",
            "n_out = len(PS_COTANGENTS)",
            *vmap_lines,
            "return finish(results)",
        ),
        ("compare", "finish"),
        (),
        extra=data,
        copies=(path.Setup, path.by_expanded_weights, path.by_loop, path.by_vmap),
    )
