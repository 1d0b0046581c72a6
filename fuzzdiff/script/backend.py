"""The backend check's script fragment: tensorly's pytorch backend vs its numpy backend.

The backend check (fuzzdiff.checks.backend) calls a target's body on two array
backends at the same values: the tensors themselves, and NumPy views of the
very same memory, so that the fuzzed layouts reach NumPy too. The script does
the same with tensorly's ``backend_context``; it needs tensorly besides torch
(the target's code imports it). Only tensorly's targets
(``catalog.tensorly_ops.TensorlyCall``) say in code how their other backend is
called, so only theirs are written.
"""

from __future__ import annotations

from fuzzdiff.checks.fragment import lines
from fuzzdiff.script.fragments import Fragment, register
from fuzzdiff.script.literals import ScriptError

__all__ = ["backend"]

ON_BACKEND = '''
def on_backend(name):
    """The function's floating-point outputs on tensorly's backend ``name``, at the
    arguments as fuzzed; numpy gets NumPy views of the very same memory."""
    args = make_args(make_leaves(requires_grad=False))
    if name != "pytorch":
        args = [a.numpy() for a in args]
    with tensorly.backend_context(name):
        out = call(*args)
    leaves = (x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in torch.utils._pytree.tree_leaves(out))
    return [t.detach() for t in leaves if t.is_floating_point() or t.is_complex()]
'''.strip("\n")


@register("backend")
def backend(ctx) -> Fragment:
    fn = ctx.target.fn
    if type(fn).__name__ != "TensorlyCall":
        raise ScriptError(
            f"target {ctx.target.name!r}: a backend script is written for tensorly's targets only; "
            f"how a {type(fn).__name__} runs on another backend is not code a script can copy"
        )
    if ctx.on_device:
        raise ScriptError(f"the numpy backend runs on the host; the case is on {ctx.device}")
    return Fragment(
        "tensorly's pytorch backend vs its numpy backend: the same outputs",
        lines(
            "# 1. tensorly's numpy backend, at NumPy views of the same memory.",
            'expected = on_backend("numpy")',
            'print("numpy backend: outputs of shapes", [tuple(t.shape) for t in expected])',
            "# 2. Its pytorch backend, at the tensors themselves.",
            'got = on_backend("pytorch")',
            'names = [f"output {k}" for k in range(len(expected))]',
            "return finish([compare(names, got, expected)])",
        ),
        ("compare", "finish"),
        extra=ON_BACKEND,
        imports=("import torch.utils._pytree",),
    )
