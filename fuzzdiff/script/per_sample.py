"""The per_sample check's script fragment: ExpandedWeights vs a loop vs vmap(grad).

The script builds the module with the target's own (copied) builder and the
case's keyword arguments, embeds the batch exactly as the check lays it out
(storage, strides, offset, junk outside the view) and the cotangents, then
restates fuzzdiff.paths.expanded's three paths in plain torch.
"""

from __future__ import annotations

import torch

from fuzzdiff.paths import expanded as path
from fuzzdiff.script.fragments import Fragment, _lines, register
from fuzzdiff.script.literals import ScriptError, tensor_literal, value_literal
from fuzzdiff.script.source import target_code

__all__ = ["per_sample"]

# Plain-torch restatement of fuzzdiff.paths.expanded, for the script.
MACHINERY = '''
def ps_floating(out):
    """The floating-point tensors of a module's output, flattened."""
    return [t for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def ps_dims(module):
    """The batch dim of the inputs, and of the outputs in order (the last repeats):
    an RNN's h_n and c_n have the batch at dim 1 whatever batch_first says."""
    d = 0 if getattr(module, "batch_first", True) else 1
    return d, ((d, 1) if isinstance(module, torch.nn.RNNBase) else (d,))


def ps_out_dim(out_dims, k):
    return out_dims[min(k, len(out_dims) - 1)]


def ps_inputs(requires_grad, d):
    """Fresh copies of the batch (same strides and offset), and the module's arguments."""
    leaves = []
    for i, t in enumerate(PS_BATCHED):
        copy = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().clone(), t.storage_offset(),
                                                  t.shape, t.stride())
        leaves.append(copy.requires_grad_(requires_grad and i in PS_DIFF))
    return leaves, [t.movedim(0, d) if d else t for t in leaves]


def ps_expanded(module):
    """Outputs, grad_sample of every parameter and the inputs' gradients, by ExpandedWeights."""
    from torch.nn.utils._per_sample_grad import call_for_per_sample_grads
    d, _ = ps_dims(module)
    leaves, args = ps_inputs(PS_INPUT_GRAD, d)
    call = call_for_per_sample_grads(module, batch_size=None if PS_INFER_BATCH else PS_BATCH,
                                     loss_reduction=PS_LOSS_REDUCTION, batch_first=d == 0)
    outs = ps_floating(call(*args))
    params = [p for p in module.parameters() if p.requires_grad]
    wrt = params + ([leaves[i] for i in PS_DIFF] if PS_INPUT_GRAD else [])
    if wrt:
        loss = sum((v * o).sum() for v, o in zip(PS_COTANGENTS, outs))
        (loss / PS_BATCH if PS_LOSS_REDUCTION == "mean" else loss).backward()
    grads = []
    for p in params:
        g = getattr(p, "grad_sample", None)
        p.grad_sample = None
        grads.append(torch.zeros((PS_BATCH, *p.shape), dtype=p.dtype) if g is None else g.detach())
    inputs = [torch.zeros_like(leaves[i]) if leaves[i].grad is None else leaves[i].grad
              for i in PS_DIFF] if PS_INPUT_GRAD else []
    return [o.detach() for o in outs] + grads + inputs


def ps_looped(module):
    """The same, one sample at a time: the gradient of <v_b, f(x_b)> per sample."""
    d, out_dims = ps_dims(module)
    leaves, _ = ps_inputs(PS_INPUT_GRAD, d)
    params = [p for p in module.parameters() if p.requires_grad]
    wrt_inputs = [leaves[i] for i in PS_DIFF] if PS_INPUT_GRAD else []
    outs, per_sample = [], [[] for _ in params]
    input_grads = [torch.zeros_like(t) for t in wrt_inputs]
    for b in range(PS_BATCH):
        sample = [t.narrow(0, b, 1).movedim(0, d) if d else t.narrow(0, b, 1) for t in leaves]
        o = ps_floating(module(*sample))
        outs.append([t.detach() for t in o])
        if not params + wrt_inputs:
            continue
        loss = sum((v.narrow(ps_out_dim(out_dims, k), b, 1) * t).sum()
                   for k, (v, t) in enumerate(zip(PS_COTANGENTS, o)))
        grads = torch.autograd.grad(loss, params + wrt_inputs, allow_unused=True)
        for k, p in enumerate(params):
            per_sample[k].append(torch.zeros_like(p) if grads[k] is None else grads[k])
        for k, g in enumerate(grads[len(params):]):
            if g is not None:
                input_grads[k] = input_grads[k] + g
    scale = 1.0 / PS_BATCH if PS_LOSS_REDUCTION == "mean" else 1.0
    stacked = [torch.cat([o[k] for o in outs], ps_out_dim(out_dims, k)) for k in range(len(outs[0]))]
    return (stacked + [torch.stack(g) for g in per_sample]
            + [g * scale if scale != 1.0 else g for g in input_grads])


def ps_vmapped(module):
    """Per-sample parameter and input gradients by vmap(grad(loss)) with functional_call."""
    from torch.func import functional_call, grad, vmap
    d, out_dims = ps_dims(module)
    leaves, _ = ps_inputs(False, d)
    params = {n: p.detach() for n, p in module.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in module.named_parameters() if not p.requires_grad}
    n_args = len(leaves)

    def loss(ps, *xs_and_vs):
        xs, vs = xs_and_vs[:n_args], xs_and_vs[n_args:]
        outs = ps_floating(functional_call(module, {**ps, **frozen}, tuple(x.unsqueeze(d) for x in xs)))
        return sum((v * o.select(ps_out_dim(out_dims, k), 0)).sum()
                   for k, (v, o) in enumerate(zip(vs, outs)))

    argnums = (0,) + (tuple(1 + i for i in PS_DIFF) if PS_INPUT_GRAD else ())
    in_dims = (None,) + (0,) * n_args + tuple(ps_out_dim(out_dims, k) for k in range(len(PS_COTANGENTS)))
    grads = vmap(grad(loss, argnums=argnums), in_dims=in_dims)(params, *leaves, *PS_COTANGENTS)
    scale = 1.0 / PS_BATCH if PS_LOSS_REDUCTION == "mean" else 1.0
    return [grads[0][n] for n in params] + [g * scale if scale != 1.0 else g for g in grads[1:]]
'''.strip("\n")

NAMES = frozenset(
    {
        "ps_floating",
        "ps_dims",
        "ps_out_dim",
        "ps_inputs",
        "ps_expanded",
        "ps_looped",
        "ps_vmapped",
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
        outs = path._floating(module(*args))
    cotangents = path.probes_like(case.params, "cotangent", outs)
    names, skipped = path._names(module, outs, batch), ""
    if not ctx.crashed:  # a crash record's case killed its process: the script runs it, not this
        try:
            sides = path.run(target, case)
            names, skipped = list(sides.looped.names), sides.vmapped.skipped
        except Exception:  # noqa: BLE001 - the script raises the same at ExpandedWeights
            pass
    plan = batch.plan
    block = "\n".join(
        [
            f"PS_KWARGS = {value_literal(dict(case.kwargs))}  # the module's hyperparameters",
            f"PS_BATCH = {plan.batch}",
            f"PS_LOSS_REDUCTION = {plan.loss_reduction!r}",
            f"PS_INPUT_GRAD = {plan.input_grad!r}  # the floating inputs require grad",
            f"PS_INFER_BATCH = {plan.infer_batch!r}  # batch_size=None: ExpandedWeights infers it",
            f"PS_DIFF = {batch.diff!r}  # the floating (differentiable) arguments",
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
            "                       ps_vmapped(fresh()), looped[n_out:]))",
        ]
    )
    return Fragment(
        "ExpandedWeights per-sample gradients vs a loop over the samples vs vmap(grad)",
        _lines(
            "def fresh():",
            f"    return {build}(*PS_SAMPLE, **PS_KWARGS)",
            "",
            "# ExpandedWeights against one gradient per sample (outputs, then each",
            "# parameter's per-sample gradient, then the inputs' gradients).",
            "looped = ps_looped(fresh())",
            "results = [compare(PS_NAMES, ps_expanded(fresh()), looped)]",
            "n_out = sum(n.startswith('output') for n in PS_NAMES)",
            *vmap_lines,
            "return finish(results)",
        ),
        ("compare", "finish"),
        (),
        extra=f"{data}\n\n\n{MACHINERY}",
    )
