"""Where an exception came from: torch's own machinery, or the code it ran.

Part of the evidence for whose bug a failure is (fuzzdiff.search.blame). An error
raised by Dynamo, Inductor, AOTAutograd, FX tracing, fake tensors or the
functorch transforms, while they run code that eager runs without complaint,
is torch's; so is any failed internal assert ("please report a bug to
PyTorch"). An error raised in the target's own code, or by a torch op the
target called with those inputs, is the target's to explain.

What is kept of an exception is plain data (``Raised``), for a verdict's
errors and a corpus record: the exception itself does not survive a process
boundary, and its traceback pins every frame's locals.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

__all__ = ["Raised", "raised", "frame_text", "INTERNAL_ASSERT", "internal_assert", "RULES_UNDER_TRANSFORMS"]

# How torch words a failed internal assert (TORCH_INTERNAL_ASSERT, and its Python twin).
INTERNAL_ASSERT = ("INTERNAL ASSERT FAILED", "please report a bug to PyTorch")

# The machinery that runs a target's own autograd.Function under torch.func's
# transforms: an error there may well be the Function's (a jvp that reads
# what it should not), not torch's.
RULES_UNDER_TRANSFORMS = "functorch's support for autograd.Function"
# torch's machinery, by the path of its source under torch/, most specific first.
_PARTS = (
    ("_functorch/_aot_autograd/", "AOTAutograd"),
    ("_functorch/aot_autograd.py", "AOTAutograd"),
    ("_functorch/partitioners.py", "AOTAutograd's partitioner"),
    ("_functorch/autograd_function.py", RULES_UNDER_TRANSFORMS),
    ("_functorch/", "functorch"),
    ("_dynamo/", "Dynamo"),
    ("_inductor/", "Inductor"),
    ("fx/", "FX tracing"),
    ("_subclasses/", "fake or functional tensors"),
    ("_higher_order_ops/", "higher-order ops"),
    ("_prims/", "prims"),
    ("_prims_common/", "prims"),
    ("_refs/", "the reference decompositions"),
    ("_decomp/", "the decompositions"),
    ("_guards.py", "Dynamo"),
    ("export/", "export"),
    ("_export/", "export"),
    ("_library/", "torch.library"),
    ("utils/checkpoint.py", "checkpoint"),
)
_TORCH = os.sep + "torch" + os.sep


@dataclass(frozen=True)
class Raised:
    """``where``: the innermost frame of the root cause ("file:line in name");
    ``part``: the piece of torch's machinery that frame is in (None: not
    machinery); ``internal``: a failed internal assert of torch."""

    where: str
    part: str | None
    internal: bool
    swallowed: str | None = None  # the control-flow signal of torch's (CONTROL_FLOW) the code caught

    def as_errors(self) -> dict:
        out: dict = {"raised_in": self.where}
        if self.part is not None:
            out["torch_part"] = self.part
        if self.internal:
            out["internal_assert"] = True
        if self.swallowed is not None:
            out["swallowed"] = self.swallowed
        return out


def internal_assert(message: str) -> bool:
    return any(mark in message for mark in INTERNAL_ASSERT)


# Exceptions torch raises through the code it runs on purpose, as control flow
# (checkpoint's early stop of a recomputation, once it has the tensors it needs):
# code that catches one and raises its own has broken that contract.
CONTROL_FLOW = ("torch.utils.checkpoint._StopRecomputationError",)


def raised(exc: BaseException) -> Raised:
    """Where ``exc`` was raised, following ``raise ... from`` to its root cause
    (Dynamo wraps the error it met while compiling), but not past one of
    torch's control-flow signals (CONTROL_FLOW): the code that caught it and
    raised its own is where the error comes from (einx wraps every exception
    of its generated code, checkpoint's early stop included)."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root and not _control_flow(root.__cause__):
        root = root.__cause__
    cause = root.__cause__
    swallowed = None if cause is None or not _control_flow(cause) else type(cause).__name__
    frames = traceback.extract_tb(root.__traceback__)
    text = f"{exc}\n{root}"
    if not frames:
        return Raised("(no Python frame)", None, internal_assert(text), swallowed)
    last = frames[-1]
    where = frame_text(last.filename, last.lineno, last.name)
    return Raised(where, _part(last.filename), internal_assert(text), swallowed)


def _control_flow(exc: BaseException) -> bool:
    return f"{type(exc).__module__}.{type(exc).__qualname__}" in CONTROL_FLOW


def frame_text(filename: str, lineno: int | None, name: str) -> str:
    """A frame as ``Raised.where`` words it: "file:line in name", the file from torch/ on."""
    return f"{_short(filename)}:{lineno} in {name}"


def _part(filename: str) -> str | None:
    if f"{os.sep}torchinductor_" in filename:  # the kernels Inductor writes to its cache and runs
        return "Inductor's generated code"
    index = filename.rfind(_TORCH)
    if index < 0:
        return None
    inside = filename[index + len(_TORCH) :].replace(os.sep, "/")
    return next((name for prefix, name in _PARTS if inside.startswith(prefix)), None)


def _short(filename: str) -> str:
    """A path from torch/ (or the site-packages folder) on, else as it is."""
    index = filename.rfind(_TORCH)
    if index >= 0:
        return filename[index + 1 :]
    marker = os.sep + "site-packages" + os.sep
    index = filename.rfind(marker)
    return filename[index + len(marker) :] if index >= 0 else filename
