"""The outcome of one check on one case."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fuzzdiff.errors import FuzzdiffError

__all__ = [
    "Verdict",
    "KINDS",
    "FAILED",
    "Unsupported",
    "error_shape",
    "same_error",
    "headline",
    "mismatch",
    "identity",
    "short_reason",
]

KINDS = ("pass", "fail", "unsupported", "inconclusive", "crash", "timeout")
# "crash": the process died running the case (recorded from the in-flight
# journal, fuzzdiff.record.journal); "timeout": the example did not finish in time.
FAILED = frozenset({"fail", "crash", "timeout"})


class Unsupported(FuzzdiffError):
    """Raised inside a check when the target cannot do what the check needs."""


@dataclass(frozen=True)
class Verdict:
    """``kind`` is one of KINDS. A "fail" is always confirmed (replayed, second
    eps, neighbouring points); what could not be confirmed is "inconclusive".
    "crash" and "timeout" are failures too: nothing is confirmed about a case
    that kills or stalls the process, it must not happen at a valid input."""

    kind: str
    message: str = ""
    errors: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind {self.kind!r} is not one of {KINDS}")

    @property
    def failed(self) -> bool:
        return self.kind in FAILED

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


_NUMBERS = re.compile(r"\d+")
# Dynamo wraps whatever fake-tensor dispatch raised in one sentence for every
# op ("RuntimeError when making fake tensor call"), the error itself in a
# later "got Type('...')"; a backend's failure likewise says "... raised:" and
# puts the error on the next line.
_WRAPPED_GOT = re.compile(r"\bgot (\w+)\((['\"])(.*?)(?:\\n|\2\))", re.DOTALL)


def headline(message: str) -> str:
    """The line of a failure's message that names its error: the first line,
    followed, where that line only wraps another error, by the wrapped one's."""
    lines = message.splitlines()
    first = lines[0] if lines else ""
    if first.endswith("when making fake tensor call"):
        got = _WRAPPED_GOT.search(message)
        if got:
            return f"{first}: {got.group(1)}: {got.group(3).strip()}"
    elif first.endswith("raised:"):
        inner = next((line.strip() for line in lines[1:] if line.strip()), "")
        if inner:
            return f"{first} {inner}"
    return first


def error_shape(verdict: Verdict) -> str:
    """The headline of a failure's message with its numbers and dtypes taken
    out: what makes two raises of one type the same error (the same one at
    other sizes, or in float64 where a low-precision case met it: autograd
    names the tensor ``torch.FloatTensor`` in one and ``torch.DoubleTensor``
    in the other)."""
    return _NUMBERS.sub("#", _DTYPES.sub("<dtype>", headline(verdict.message)))


_DTYPES = re.compile(
    r"\btorch\.(?:Float|Double|Half|BFloat16|ComplexFloat|ComplexDouble)Tensor\b"
    r"|\b(?:float16|float32|float64|bfloat16|complex64|complex128)\b"
)


def same_error(recorded: Verdict, replayed: Verdict) -> bool:
    """Two raises are one error: the same shape (error_shape), where the C++
    source location in front of torch's message may have moved and a later
    release may have added words at the end (torch 2.15 goes on after
    "SymIntArrayRef expected to contain only concrete integers" to say which
    size was symbolic)."""
    old, new = (_SOURCE.sub("", error_shape(v)) for v in (recorded, replayed))
    said = old.split(": ", 1)[-1]  # after "raised RuntimeError: "
    return old == new or (len(said) >= _LEAST_WORDS and new.startswith(old))


# a C++ source location torch puts in front of a message: /path/to/RegisterCPU_#.cpp:#:
_SOURCE = re.compile(r"(?:/[^\s:]+/)?[\w.]+\.(?:cpp|cc|cu|cuh|h|hpp):#:?\s*")
_LEAST_WORDS = 24  # a shorter message says too little to stand for a longer one


def identity(verdict: Verdict) -> str:
    """What a numerical failure compares: its message up to the first colon."""
    return verdict.message.split(":", 1)[0]


def mismatch(recorded: Verdict, replayed: Verdict) -> str | None:
    """Why ``replayed`` is not the failure ``recorded`` (None: it is): the same
    kind, the same exception type for a raise, the same identity for a
    numerical failure (the text before the first colon). A failure that now
    replays inconclusive because its replays disagree still shows."""
    if replayed.kind == "inconclusive" and recorded.kind == "fail" and "nondeterministic" in replayed.message:
        return None  # a failure that shows some of the time (a kernel reading memory outside its input)
    if replayed.kind != recorded.kind:
        return f"recorded {recorded.kind}, replayed {replayed.kind}: {_first_line(replayed.message)[:300]}"
    exception = recorded.errors.get("exception")
    if exception is not None and replayed.errors.get("exception") != exception:
        return f"recorded a raised {exception}, replayed {_first_line(replayed.message)[:300]}"
    if exception is not None and not same_error(recorded, replayed):
        # the same type with another message is another error (fuzzdiff.record.format.signature)
        return f"recorded {_first_line(recorded.message)[:300]!r}, replayed {_first_line(replayed.message)[:300]!r}"
    if exception is None and recorded.kind == "fail" and identity(replayed) != identity(recorded):
        return f"recorded {identity(recorded)!r}, replayed {_first_line(replayed.message)[:300]}"
    return None


def _first_line(message: str) -> str:
    return message.splitlines()[0] if message else ""


_FLOATS = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?|\bnan\b|-?\binf\b")


def short_reason(verdict: Verdict) -> str:
    """Why a run was inconclusive or unsupported, in a few words that many
    runs share: the deciding doubt (after the last "; "), without the
    identity in front and with its numbers taken out."""
    text = _first_line(verdict.message)
    if "; " in text:
        text = text.rsplit("; ", 1)[1]
    elif ": " in text and verdict.kind == "inconclusive":
        text = text.split(": ", 1)[1]
    return _FLOATS.sub("#", text)[:160]
