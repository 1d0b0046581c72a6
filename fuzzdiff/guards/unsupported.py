"""Telling "this target cannot do that" from a bug: one table of refusals.

An op without a forward-mode formula, without double backward or without
complex support raises when a check asks for it; that is "unsupported" and
never a failure. So is code a path cannot trace: a function that reads a
tensor's memory (``.numpy()``, a numba kernel) or its values into Python
(``.item()``, ``if x.sum() > 0``) under torch.compile, AOTAutograd or a
torch.func transform. Each such refusal is one named entry of ``REFUSALS``:
torch's own messages for it, matched precisely, and the reason said to the
user. An error that does not say "no formula, no rule, cannot trace" is a
finding, a ``NotImplementedError`` raised by the target's own code included.

Some refusals torch does not say: a backward marked ``@once_differentiable``
reads as a zero second derivative, and vmap indexing by a boolean mask that
varies over the batch raises an IndexError at an empty example. Their
entries name a detector, which every check that could meet them asks
(``refuse_once_differentiable``, ``vmap_unsupported_reason``), so that all
of them refuse alike and with the same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.guards.graph import graph_nodes
from fuzzdiff.verdict import Unsupported

__all__ = [
    "Refusal",
    "REFUSALS",
    "refusal",
    "refusal_of",
    "unsupported_reason",
    "UNSUPPORTED_PATTERNS",
    "ONCE_DIFFERENTIABLE",
    "through_once_differentiable",
    "refuse_once_differentiable",
    "VMAP_DATA_DEPENDENT_SHAPE",
    "indexes_by_batched_mask",
    "vmap_unsupported_reason",
]


@dataclass(frozen=True)
class Refusal:
    """One thing a target cannot have done to it. ``messages``: torch's words
    for it (case-insensitive regular expressions, searched in
    ``"ExceptionType: message"``); ``reason``: what it means, said before
    torch's first line; ``traced``: the words are a refusal only where the
    caller traces the target (they are said by the tensor subclasses a tracer
    runs it on, and elsewhere come from the user's own subclass or from a
    custom op's fake kernel, which must not read data: opcheck's finding);
    ``detector``: for a refusal torch does not raise, what finds it."""

    name: str
    reason: str
    messages: tuple[re.Pattern[str], ...] = ()
    traced: bool = False
    detector: Callable[..., bool] | None = None

    def said_in(self, text: str) -> bool:
        return any(p.search(text) for p in self.messages)


def _words(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.I) for p in patterns)


# -- refusals torch does not say: detectors ---------------------------------------------

ONCE_DIFFERENTIABLE = "a backward is marked @once_differentiable: no double backward"


def through_once_differentiable(*tensors: torch.Tensor) -> bool:
    """Whether the graph of any of ``tensors`` (a first derivative taken with
    create_graph and a cotangent that requires grad) passes through a backward
    marked once_differentiable. Its error node hangs off detached copies, which
    ``torch.autograd.grad`` never reaches: differentiated again by reverse or
    forward mode, it reads as a zero second derivative instead of raising."""
    return any(type(node).__name__ in ("Error", "DelayedError") for node in graph_nodes(tensors))


def refuse_once_differentiable(*tensors: torch.Tensor) -> None:
    """Raise Unsupported where a second derivative would go through a backward
    marked once_differentiable (``through_once_differentiable``)."""
    if through_once_differentiable(*tensors):
        raise Unsupported(ONCE_DIFFERENTIABLE)


class _BatchedMask(FuzzdiffError):
    """Raised by the detector at the indexing, so that nothing after it runs."""


def _batched(t: object) -> bool:
    """Whether ``t`` is batched at some vmap level, under any wrappers of grad or jvp levels."""
    functorch = torch._C._functorch
    while isinstance(t, torch.Tensor):
        if functorch.is_batchedtensor(t):
            return True
        if not functorch.is_functorch_wrapped_tensor(t):
            return False
        t = functorch.get_unwrapped(t)
    return False


def _masks(index: object):
    if isinstance(index, (tuple, list)):
        for i in index:
            yield from _masks(i)
    elif isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
        yield index


class _DetectBatchedMask(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and any(map(_batched, _masks(args[1]))):
            raise _BatchedMask
        return func(*args, **(kwargs or {}))


def indexes_by_batched_mask(call: Callable[[], object]) -> bool:
    """Whether ``call`` (a torch.func.vmap, maybe composed) indexes a tensor by
    a boolean mask that varies over the batch before anything raises. vmap
    refuses that in words (a data-dependent shape), but at an empty example
    it raises an IndexError of its own instead (torch 2.13): the vmap check
    asks this when vmap raises words no entry has."""
    try:
        with _DetectBatchedMask():
            call()
    except _BatchedMask:
        return True
    except Exception:  # noqa: BLE001 - anything else raised before any such indexing
        return False
    return False


_READS_MEMORY = "the function reads a tensor's memory (.numpy(), .tolist(), np.asarray, a non-torch kernel)"
_READS_VALUES = "the function reads a tensor's values into Python (.item(), .tolist(), a tensor in an if)"
_SHAPE_OF_VALUES = "the function's output shape depends on its values (boolean-mask indexing, nonzero, unique)"
VMAP_DATA_DEPENDENT_SHAPE = f"{_SHAPE_OF_VALUES}, which vmap cannot batch"

# First match wins: the entries that reword a refusal (what the function did)
# come before the broad ones that would also match their words.
REFUSALS: tuple[Refusal, ...] = (
    # -- what the function does, which a transform or a tracer cannot follow
    Refusal(
        "torch.func memory read",
        f"{_READS_MEMORY}, which a torch.func transform cannot trace",
        _words(
            r"Cannot access (storage|data pointer) of "
            r"(BatchedTensorImpl|TensorWrapper|Tensor that doesn't have storage)"
        ),
    ),
    Refusal(
        "traced memory read",
        f"{_READS_MEMORY}, which cannot be traced",
        _words(
            r"Cannot access data pointer of Tensor \(e\.g\. FakeTensor, FunctionalTensor\)",
            # a target that reads data pointers (a cache keyed by storage)
            r"Attempted to access the data pointer on an invalid python storage",
        ),
    ),
    Refusal(
        "traced data-dependent value",
        f"{_READS_VALUES}, which cannot be traced",
        _words(
            r"GuardOnDataDependentSymNode|DataDependentOutputException|Could not guard on data-dependent expression"
        ),
    ),
    # TorchScript's interpreter asks bool() of a traced tensor at a branch and
    # reraises with an empty message: only the marked line says what it was.
    Refusal(
        "traced TorchScript branch",
        "the function branches on a tensor's values inside TorchScript (a tensor in an if or a while), "
        "which cannot be traced",
        (
            re.compile(
                r"The following operation failed in the TorchScript interpreter\."
                r"[\s\S]*\n\s*(?:if|elif|while)\b[^\n]*\n\s*~+ <--- HERE(?![\s\S]*<--- HERE)"
                r"[\s\S]*RuntimeError:\s*$"
            ),
        ),
        traced=True,
    ),
    Refusal(
        "traced data-dependent shape",
        f"{_SHAPE_OF_VALUES}, which cannot be traced",
        _words(r"DynamicOutputShapeException"),
    ),
    Refusal(
        "traced .numpy()",
        "the function calls .numpy() (np.asarray, a non-torch kernel), which cannot be traced",
        (re.compile(r"\.numpy\(\) is not supported for tensor subclasses\."),),
        traced=True,
    ),
    Refusal(
        "traced .tolist()",
        "the function calls .tolist(), which cannot be traced",
        (
            re.compile(
                r"\.tolist\(\) is not supported for tensor subclasses|"
                r"tolist\(\) shouldn't be called on a tensor with unallocated storage"
            ),
        ),
        traced=True,
    ),
    # torch.func refuses .data on purpose (functorch's own words, "not allowed"):
    # pytorch_metric_learning's ArcFace assigns W.data = W.data.to(...) on every call.
    Refusal(
        "torch.func .data",
        "the function reads or assigns a tensor's .data, which torch.func transforms refuse",
        _words(
            r"accessing `data` under vmap transform is not allowed",
            r"mutating directly with `\.data` (inside functorch|under vmap) transform is not allowed",
        ),
    ),
    # vmap's words start with "vmap:", said only under vmap: the same code in
    # eager is judged. Under a grad or jvp inside vmap, torch cannot tell
    # .item() from control flow: one entry, so that every composition says alike.
    Refusal(
        "vmap data-dependent value",
        "the function reads a tensor's values into Python (.item(), a tensor in an if), which vmap cannot batch",
        _words(
            r"vmap: It looks like you're calling \.item\(\)",
            r"vmap: It looks like you're attempting to use a Tensor in some data-dependent control flow",
            r"vmap: It looks like you're either \(1\) calling \.item\(\) on a Tensor or \(2\) "
            r"attempting to use a Tensor in some data-dependent control flow",
        ),
    ),
    Refusal(
        "vmap data-dependent shape",
        VMAP_DATA_DEPENDENT_SHAPE,
        _words(
            r"vmap: We do not support batching operators that can (support|output) dynamic shape",
            r"vmap: .* We cannot support this because for each batch this would return a differently shaped Tensor",
        ),
        detector=indexes_by_batched_mask,
    ),
    Refusal(
        "vmap random",
        "the function draws random numbers, which vmap refuses (randomness='error')",
        _words(
            r"vmap: We do not (yet )?support calling random operations",
            r"vmap: called random operation while in randomness error mode",
        ),
    ),
    Refusal(
        "no batching rule",
        "vmap cannot batch an op here",
        _words(
            r"Batching rule not implemented",
            r"vmap: .* is not possible because",
            r"vmap: .*We cannot support this",
            r"inside of vmap",
            r"NYI: .* inside vmap is only supported with",
            r"vmap over .* isn't supported yet",  # torch.allclose, torch.equal: a Python bool of a batch
        ),
    ),
    Refusal(
        "custom Function under torch.func",
        "a custom autograd.Function lacks what torch.func needs",
        _words(
            r"To use autograd\.Function with vmap, you must either override the vmap staticmethod",
            r"Run vmap on autograd\.Function with kwarg-only Tensor args",
            r"but it does not have vmap support",
            r"it must override the setup_context staticmethod",
        ),
    ),
    Refusal(
        "saved tensor hooks under torch.func",
        "torch.func transforms do not support saved tensor hooks (activation checkpointing, offloading)",
        _words(r"don't yet support saved tensor hooks"),
    ),
    # -- formulas torch lacks
    Refusal(
        "once_differentiable",
        ONCE_DIFFERENTIABLE,
        _words(r"trying to differentiate twice a function that was marked with @once_differentiable"),
        detector=through_once_differentiable,
    ),
    Refusal(
        "no double backward",
        "no double backward (an op's derivative formula is not differentiable)",
        _words(r"double backward.*not (supported|implemented)", r"does not (support|implement) double backward"),
    ),
    Refusal(
        "no forward-mode formula",
        "no forward-mode formula (an op's, or a custom Function's jvp)",
        _words(
            r"forward AD .*(not|isn't) (supported|implemented)",
            r"Trying to use forward AD with .* that does not support it",
            r"does not (support|implement) (forward|jvp)",
            r"jvp is not implemented",
            r"You must implement the jvp function",
        ),
    ),
    Refusal(
        "no derivative formula",
        "no derivative formula (an op's, or a custom Function's backward)",
        _words(
            r"derivative for .* is not implemented",
            r"Autograd has not been implemented for operator",
            r"You must implement either the backward or vjp method for your custom autograd\.Function",
        ),
    ),
    Refusal(
        "no kernel",
        "no kernel for this dtype or backend",
        _words(
            r"not implemented for '(Complex|BFloat16|Half)",
            r"does not support automatic differentiation for outputs with complex dtype",
            r"is not supported for complex",
            # the dispatcher: no kernel of this op for a backend (a sparse, complex or CUDA variant)
            r"Could not run '[^']+' with arguments from the '[^']+' backend",
        ),
    ),
    # torch documents it (torch.utils.checkpoint): a reentrant checkpoint runs its own
    # backward, so torch.autograd.grad and backward(inputs=...) cannot reach through it.
    # memory-efficient-attention-pytorch checkpoints so at its default use_reentrant.
    Refusal(
        "reentrant checkpoint",
        "the function uses torch.utils.checkpoint with use_reentrant=True, which torch.autograd.grad "
        "cannot differentiate (torch's documented limit; .backward() works)",
        _words(r"When use_reentrant=True, torch\.utils\.checkpoint is incompatible with \.grad\(\)"),
    ),
    Refusal(
        "nothing to differentiate",
        "nothing to differentiate: an output or an input is not in the graph",
        _words(
            r"element \d+ of tensors does not require grad",
            r"differentiated Tensors appears to not have been used in the graph",
            # reentrant checkpoint of a function whose output is a constant at this input
            r"none of output has requires_grad=True, this checkpoint\(\) is not necessary",
        ),
    ),
    # -- compile: what dynamo or AOTAutograd cannot trace (graph breaks fall back to eager silently)
    Refusal(
        "dynamo",
        "torch.compile cannot trace the function",
        _words(r"torch\._dynamo\.exc\.(Unsupported|UserError)", r"^Unsupported: "),
    ),
    Refusal(
        "compiled autograd",
        "compiled autograd cannot trace this backward",
        _words(
            r"compiled_args nyi",
            r"not supported by compiled autograd",
            r"Compiled autograd can not trace",
            r"Re-entrant into Compiled Autograd",
            r"Trying to run compiled autograd within another compiled autograd call",
            r"which is not supported by FakeTensorMode",
        ),
    ),
    Refusal(
        "export",
        "torch.export refuses the function (export's documented limits: exportdb)",
        _words(r"^UserError: "),
    ),
    Refusal(
        "traced closure",
        "aot_function cannot trace a tensor the function closes over",
        _words(r"Please convert all Tensors to FakeTensors first"),
    ),
    # -- ExpandedWeights (per_sample): its own errors for what it does not support
    # (torch/nn/utils/_expanded_weights: an op without a per-sample rule,
    # unbatched inputs, a layer norm over the batch dim, mixed frozen parameters)
    Refusal(
        "ExpandedWeights",
        "ExpandedWeights has no per-sample rule for this",
        _words(
            r"Expanded ?Weights?",
            r"^NotImplementedError: dilation=.* not supported\.",  # its conv3d unfold
            r"conflicting batch_first arguments in the same layer",
        ),
    ),
)


def vmap_unsupported_reason(error: BaseException, rerun: Callable[[], object]) -> str | None:
    """``unsupported_reason(error)`` for an error raised under vmap, and where
    no entry has its words, the data-dependent shape refusal when ``rerun``
    (the same vmap again) indexes by a boolean mask that varies over the batch."""
    reason = unsupported_reason(error)
    first = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    if reason is None and _WRITES_BATCHED_INTO_UNBATCHED.search(first):
        return f"{VMAP_INPLACE}: {first}"
    if reason is None and indexes_by_batched_mask(rerun):
        return f"{VMAP_DATA_DEPENDENT_SHAPE}: it indexes by a boolean mask that varies over the batch ({first})"
    return reason


# torch.func's documented limit (docs: "UX Limitations", in-place operations): an
# in-place op that writes a batched value into a tensor vmap does not batch. torch
# 2.13 says so only by the shapes: the broadcast one is the written one with the
# batch dims in front.
VMAP_INPLACE = (
    "the function writes a batched value in place into a tensor that is not batched "
    "(torch.func's documented limit on in-place operations)"
)
_WRITES_BATCHED_INTO_UNBATCHED = re.compile(
    r"output with shape \[([\d, ]+)\] doesn't match the broadcast shape \[(?:\d+, )+\1\]"
    r"|output with shape \[\] doesn't match the broadcast shape \[[\d, ]+\]"
)


# Every word that says "unsupported" wherever it comes from; a standalone
# script skips an identity on these (fuzzdiff.script.helpers).
UNSUPPORTED_PATTERNS = tuple(p for r in REFUSALS if not r.traced for p in r.messages)

_BY_NAME = {r.name: r for r in REFUSALS}


def refusal(name: str) -> Refusal:
    """The entry called ``name``."""
    return _BY_NAME[name]


def refusal_of(exc: BaseException, *, traced: bool = False) -> Refusal | None:
    """The entry whose words ``exc`` says, first in table order; the
    ``traced`` entries only where ``exc`` comes from tracing the target."""
    text = f"{type(exc).__name__}: {exc}"
    return next((r for r in REFUSALS if (traced or not r.traced) and r.said_in(text)), None)


def unsupported_reason(exc: BaseException, *, traced: bool = False) -> str | None:
    """The reason to report when ``exc`` says a formula is missing or the code
    cannot be traced: the entry's reason, then torch's first line; else None.
    An ``Unsupported`` raised by a check is its own reason. ``traced``: ``exc``
    comes from tracing the target (the compiled side of the compile check)."""
    if isinstance(exc, Unsupported):
        return str(exc)
    found = refusal_of(exc, traced=traced)
    if found is None:
        return None
    first = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return f"{found.reason}: {first}"
