"""Telling "this target cannot do that" from a bug.

An op without a forward-mode formula, without double backward or without
complex support raises when a check asks for it; that is "unsupported" and
never a failure. So is code a path cannot trace: a function that reads a
tensor's memory (``.numpy()``, a numba kernel) or its values into Python
(``.item()``, ``if x.sum() > 0``) under torch.compile, AOTAutograd or a
torch.func transform. The patterns are torch's own messages, matched
precisely: an error that does not say "no formula, no rule, cannot trace" is
a finding, a ``NotImplementedError`` raised by the target's own code included.
"""

from __future__ import annotations

import re

from fuzzdiff.verdict import Unsupported

__all__ = ["UNSUPPORTED_PATTERNS", "MEANINGS", "UNTRACEABLE", "unsupported_reason"]

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
        r"vmap: called random operation while in randomness error mode",  # vmap's default randomness="error"
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


_READS_MEMORY = "the function reads a tensor's memory (.numpy(), .tolist(), np.asarray, a non-torch kernel)"

# What some of those refusals mean, said first in the reason: torch's words
# name the mechanism (a tensor without storage), not what the function did.
MEANINGS = tuple(
    (re.compile(p, re.I), meaning)
    for p, meaning in (
        (
            r"Cannot access (storage|data pointer) of "
            r"(BatchedTensorImpl|TensorWrapper|Tensor that doesn't have storage)",
            f"{_READS_MEMORY}, which a torch.func transform cannot trace",
        ),
        (
            r"Cannot access data pointer of Tensor \(e\.g\. FakeTensor, FunctionalTensor\)",
            f"{_READS_MEMORY}, which cannot be traced",
        ),
        (
            r"GuardOnDataDependentSymNode|DataDependentOutputException|Could not guard on data-dependent expression",
            "the function reads a tensor's values into Python (.item(), .tolist(), a tensor in an if), "
            "which cannot be traced",
        ),
    )
)

# Said by the tensor subclasses a tracer runs the function on (FakeTensor,
# FunctionalTensor): unsupported only where the caller traces. Elsewhere they
# come from the user's own subclass, or from a custom op's fake kernel, which
# must not read data (opcheck's finding).
UNTRACEABLE = tuple(
    (re.compile(p), meaning)
    for p, meaning in (
        (
            r"\.numpy\(\) is not supported for tensor subclasses\.",
            "the function calls .numpy() (np.asarray, a non-torch kernel), which cannot be traced",
        ),
        (
            r"\.tolist\(\) is not supported for tensor subclasses|"
            r"tolist\(\) shouldn't be called on a tensor with unallocated storage",
            "the function calls .tolist(), which cannot be traced",
        ),
    )
)


def unsupported_reason(exc: BaseException, *, traced: bool = False) -> str | None:
    """torch's reason when ``exc`` says a formula is missing or the code
    cannot be traced, else None; what it means comes first where torch's
    words do not say (MEANINGS). ``traced``: ``exc`` comes from tracing the
    target (the compiled side of the compile check), so UNTRACEABLE applies."""
    if isinstance(exc, Unsupported):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    first = text.splitlines()[0][:300]
    for pattern, meaning in (*MEANINGS, *(UNTRACEABLE if traced else ())):
        if pattern.search(text):
            return f"{meaning}: {first}"
    if any(p.search(text) for p in UNSUPPORTED_PATTERNS):
        return first
    return None
