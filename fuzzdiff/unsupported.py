"""Telling "this target cannot do that" from a bug.

An op without a forward-mode formula, without double backward or without
complex support raises when a check asks for it; that is "unsupported" and
never a failure. The patterns are torch's own messages, matched precisely:
an error that does not say "no formula, no rule, cannot trace" is a finding,
a ``NotImplementedError`` raised by the target's own code included.
"""

from __future__ import annotations

import re

from fuzzdiff.verdict import Unsupported

__all__ = ["UNSUPPORTED_PATTERNS", "unsupported_reason"]

UNSUPPORTED_PATTERNS = tuple(
    re.compile(p, re.I)
    for p in (
        r"derivative for .* is not implemented",
        r"forward AD .*(not|isn't) (supported|implemented)",
        r"Trying to use forward AD with .* that does not support it",
        r"does not (support|implement) (forward|double backward|jvp)",
        r"jvp is not implemented",
        r"not implemented for '(Complex|BFloat16|Half)",
        r"does not support automatic differentiation for outputs with complex dtype",
        r"is not supported for complex",
        r"double backward.*not (supported|implemented)",
        r"element \d+ of tensors does not require grad",
        r"You must implement the jvp function",
        r"You must implement either the backward or vjp method for your custom autograd\.Function",
        r"To use autograd\.Function with vmap, you must either override the vmap staticmethod",
        r"Run vmap on autograd\.Function with kwarg-only Tensor args",
        r"Autograd has not been implemented for operator",
        # the dispatcher: no kernel of this op for a backend (a sparse, complex or CUDA variant)
        r"Could not run '[^']+' with arguments from the '[^']+' backend",
        r"differentiated Tensors appears to not have been used in the graph",
        r"trying to differentiate twice a function that was marked with @once_differentiable",
        # vmap: no batching rule, or code that cannot run on a batched tensor
        r"Batching rule not implemented",
        r"but it does not have vmap support",
        r"it must override the setup_context staticmethod",
        r"vmap: It looks like you're .*(calling \.item\(\)|data-dependent control flow)",
        r"vmap: .* is not possible because",
        r"vmap: .*We cannot support this",
        r"inside of vmap",
        r"Cannot access (storage|data pointer) of (BatchedTensorImpl|TensorWrapper|Tensor that doesn't have storage)",
        r"vmap: We do not (yet )?support calling random operations",
        r"NYI: .* inside vmap is only supported with",
        r"don't yet support saved tensor hooks",
        # compile: what dynamo or AOTAutograd cannot trace (graph breaks fall back to eager silently)
        r"torch\._dynamo\.exc\.(Unsupported|UserError)",
        r"^Unsupported: ",
        r"GuardOnDataDependentSymNode|DataDependentOutputException|DynamicOutputShapeException",
        r"Could not guard on data-dependent expression",
        r"Please convert all Tensors to FakeTensors first",  # aot_function: a closed-over tensor
        # a target that reads data pointers (a cache keyed by storage) cannot be traced
        r"Cannot access data pointer of Tensor \(e\.g\. FakeTensor, FunctionalTensor\)",
        r"Attempted to access the data pointer on an invalid python storage",
        # ExpandedWeights (per_sample): its own errors for what it does not support
        # (torch/nn/utils/_expanded_weights: an op without a per-sample rule,
        # unbatched inputs, a layer norm over the batch dim, mixed frozen parameters)
        r"Expanded ?Weights?",
        r"^NotImplementedError: dilation=.* not supported\.",  # its conv3d unfold
        r"conflicting batch_first arguments in the same layer",
    )
)


def unsupported_reason(exc: BaseException) -> str | None:
    """torch's reason when ``exc`` says a formula is missing, else None."""
    if isinstance(exc, Unsupported):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    if any(p.search(text) for p in UNSUPPORTED_PATTERNS):
        return text.splitlines()[0][:300]
    return None
