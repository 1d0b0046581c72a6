"""Whose bug a failure is: PyTorch's, or the code under test's, with the evidence.

A user who points fuzzdiff at their library must not be sent to debug
torch's compiler, nor a torch maintainer sent a library's wrong backward. The
evidence, strongest first:

1. the target is torch's own (a catalog op, an OpInfo sample);
2. torch failed an internal assert ("please report a bug to PyTorch"), or
   Dynamo crashed inside itself (``InternalTorchDynamoError``: its own
   recursion, say) on code that eager runs: whatever rules the code brings;
3. the failing run left torch's thread-local state changed (fuzzdiff.guards.torch_state);
3a. the code defines no derivative rule of its own, calls a torch function
   whose known discrepancy (the catalog's ``Target.known``) the failure
   matches: ``lambda x: torch.cumprod(x, -1)`` fails where torch.cumprod's
   recorded bug does;
3b. the code defines rules of its own, and the failure matches a known
   discrepancy in how torch runs such rules (fuzzdiff.targets.discrepancies.
   OWN_RULES: compiled code at dual inputs dropping a Function's jvp);
4. the error was raised inside torch's machinery (Dynamo, Inductor,
   AOTAutograd, FX, fake tensors, functorch, the code Inductor generates:
   fuzzdiff.guards.raised), unless the code brings rules of its own that this
   machinery runs (an autograd.Function's jvp under a transform, a custom
   op's fake kernel under compile): then the stand-in decides;
5. a plain-torch stand-in of the same shape fails the same way at the same
   inputs, layouts and check parameters (fuzzdiff.targets.standin): then the
   stand-in is the torch-only repro;
6. the check compares two of torch's ways of running the very same code
   (compiled and eager, batched and looped, two memory layouts...), and the
   code defines no derivative or batching rule of its own, nor asks which
   way runs it (fuzzdiff.search.inspection): whatever differs is torch's.

Otherwise the failure is the code's own: a derivative rule it defines, an
error raised in it, or a mismatch that needs it, shown at the shrunk input.

Where the code's own is the verdict so far, the failure is localized
(fuzzdiff.search.localize, ``located``): an op of torch's that fails alone
at the inputs the call gave it makes the failure PyTorch's after all, named
with its inputs and a few lines of torch that show it; a rule of the code's
that fails alone is named; where every op and rule passes alone, the
composition is the code's. The blame carries that ``level``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.checks import Check
from fuzzdiff.confirm.ladder import repeat_only
from fuzzdiff.search.caught import quietly
from fuzzdiff.search.inspection import BATCHING, COMPILING, LAYOUT, RANDOM, inspect_call
from fuzzdiff.search.localize import LEVELS, Localized
from fuzzdiff.search.runner import verdict_at
from fuzzdiff.targets.discrepancies import OWN_RULES
from fuzzdiff.targets.known import Known, matching
from fuzzdiff.targets.standin import StandIn, stand_in
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict, mismatch

__all__ = [
    "Blame",
    "Evidence",
    "gather",
    "blame",
    "known_reached",
    "PYTORCH",
    "USER",
    "VIA",
    "MECHANISMS",
    "torchs_op",
]

PYTORCH, USER = "pytorch", "user"
# The evidence that decided, in the order it is asked (see the module's docstring).
VIA = (
    "torch's target",
    "internal assert",
    "torch state",
    "torch machinery",
    "torch op",  # an op alone fails, or raises where it should not (fuzzdiff.checking.empty_batch)
    "known discrepancy",
    "stand-in",
    "mechanism",
    "torch op",  # the plain call raises inside a torch op at an input it should take (fuzzdiff.checking.input_domain)
    "op alone",  # an op of torch's fails alone at the inputs the call gave it (fuzzdiff.search.localize)
    "rule alone",  # a Function fails alone at the inputs it received
    "user",
)

# Exceptions that only torch's machinery raises, about itself: whatever code it
# ran when it fell over (a Function of the user's included), the crash is torch's.
CRASHES_OF_TORCH = {
    "InternalTorchDynamoError": "Dynamo crashed inside itself (an InternalTorchDynamoError: its own recursion, say)",
}

# Checks that run the target's own code on both sides, through two of torch's
# mechanisms; what differs between the sides is the mechanism, unless the code
# asks which one runs it (fuzzdiff.search.inspection).
MECHANISMS = {
    "compile": ("compiler", COMPILING),
    "compiled_autograd": ("compiler (compiled autograd, and the forward's torch.compile)", COMPILING),
    "export": ("torch.export", COMPILING),
    "vmap": ("vmap", BATCHING),
    "layout": ("handling of memory layouts", LAYOUT),
    "alias": ("handling of aliased inputs", LAYOUT),
    "device": ("CUDA kernels", None),
    "checkpoint": ("activation checkpointing", RANDOM),
}


@dataclass(frozen=True)
class Blame:
    """``whose``: PYTORCH or USER; ``evidence``: why, in one sentence;
    ``via``: which piece of evidence decided (one of VIA). Where the failure
    was localized (fuzzdiff.search.localize): ``level``, one of "op",
    "rule", "composition"; ``op``, the op (``aten::div_``) or the rule's
    class; ``at``, its inputs in words; ``script``, a few lines of torch
    that fail as it did (the minimal repro)."""

    whose: str
    evidence: str
    via: str = "user"
    level: str | None = None
    op: str | None = None
    at: str | None = None
    script: str | None = None

    @property
    def headline(self) -> str:
        return "likely a PyTorch bug, not your code" if self.whose == PYTORCH else "in your code"

    @property
    def where(self) -> str | None:
        """The piece the failure is in, with its level: "PyTorch's aten::div_
        (op, alone at float64[3] stride (1,))"; None where not localized."""
        if self.level is None:
            return None
        if self.level == "composition":
            return "the composition (every op and rule passes alone)"
        owner = "PyTorch's" if self.whose == PYTORCH else "your"
        what = f"{owner} rule {self.op}" if self.level == "rule" else f"{owner} {self.op}"
        return f"{what} ({self.level}{', ' + self.at if self.at else ''})"

    def to_json(self) -> dict:
        out = {"whose": self.whose, "evidence": self.evidence, "via": self.via}
        for key in ("level", "op", "at", "script"):  # written only when set: additions to the record's format
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @staticmethod
    def from_json(data) -> Blame | None:
        if isinstance(data, dict) and data.get("whose") in (PYTORCH, USER) and isinstance(data.get("evidence"), str):
            via = data.get("via")
            level = data.get("level") if data.get("level") in LEVELS else None
            extra = {k: data[k] if isinstance(data.get(k), str) else None for k in ("op", "at", "script")}
            return Blame(data["whose"], data["evidence"], via if via in VIA else "user", level, **extra)
        return None


@dataclass(frozen=True)
class Evidence:
    """What running things found: the stand-in's verdict (None: none could be
    built), the derivative rules the target defines itself and what it asks
    about how it is run."""

    stand_in: StandIn | None = None
    stand_in_verdict: Verdict | None = None
    rules: tuple[str, ...] = ()
    asks: tuple[tuple[str, str], ...] = ()  # what the code asks about its run (fuzzdiff.search.inspection)
    # a known torch discrepancy of a torch function the code calls, which the
    # failure matches: (the function's name, Known.describe())
    torch_known: tuple[str, str] | None = None
    # a known torch discrepancy in running code's own rules, which the failure matches (Known.describe())
    rules_known: str | None = None
    # torch errors the code caught itself, and warnings it gave, in a run of the check (fuzzdiff.search.caught)
    caught: tuple[str, ...] = ()
    warned: tuple[str, ...] = ()

    def to_json(self) -> dict:
        out: dict = {"rules": list(self.rules), "asks": [list(a) for a in self.asks]}
        if self.torch_known is not None:
            out["torch_known"] = {"function": self.torch_known[0], "discrepancy": self.torch_known[1]}
        if self.rules_known is not None:
            out["rules_known"] = self.rules_known
        if self.caught:
            out["caught"] = list(self.caught)
        if self.warned:
            out["warned"] = list(self.warned)
        if self.stand_in is not None and self.stand_in_verdict is not None:
            v = self.stand_in_verdict
            out["stand_in"] = {
                "description": self.stand_in.description,
                "source": self.stand_in.source,
                "verdict": {"kind": v.kind, "message": v.message, "errors": v.errors},
            }
        return out


def gather(check: Check, target: Target, case: Case, verdict: Verdict | None = None) -> Evidence:
    """Run what the blame needs beyond the failure itself, for user code only.
    With the ``verdict``, also whether it is a known discrepancy of a torch
    function the code calls; and, from one more run of the check, the torch
    errors the code caught itself and the warnings it gave."""
    if target.torchs_own:
        return Evidence()
    evidence = _gathered(check, target, case, verdict)
    try:
        with repeat_only():
            quiet = quietly(lambda: verdict_at(check, target, case))
    except Exception:  # noqa: BLE001 - the run raising here tells nothing more
        return evidence
    return dataclasses.replace(evidence, caught=quiet.caught, warned=quiet.warned)


def _gathered(check: Check, target: Target, case: Case, verdict: Verdict | None) -> Evidence:
    seen = inspect_call(target, case)
    # with rules of the code's own in the call, only torch's own error text is
    # evidence enough: a known raise of a torch function it calls (a wrong
    # value could be the rule's)
    known = None if verdict is None else torch_known(seen.calls, check.name, case, verdict, raised=bool(seen.rules))
    if known is not None:
        return Evidence(rules=seen.rules, asks=seen.asks, torch_known=known)
    running = matching(OWN_RULES, check.name, case, verdict) if verdict is not None and seen.rules else None
    if running is not None:
        return Evidence(rules=seen.rules, asks=seen.asks, rules_known=running.describe())
    if target.module is not None:  # per-sample gradients need the module itself
        return Evidence(rules=seen.rules, asks=seen.asks)
    standin = stand_in(target, case)
    if standin is None:
        return Evidence(rules=seen.rules, asks=seen.asks)
    try:
        verdict = verdict_at(check, standin.target, case)
    except Exception as e:  # noqa: BLE001 - e.g. the case's params do not fit the stand-in: no evidence
        verdict = Verdict("unsupported", f"the stand-in could not run this case: {type(e).__name__}: {e}")
    return Evidence(standin, verdict, seen.rules, seen.asks)


def known_reached(evidence: dict | None) -> Known | None:
    """The known discrepancy of torch's that a failure of user code matched,
    from its evidence as JSON (``Evidence.to_json``): a torch function's it
    calls, or one in how torch runs rules of its own. The failure is then
    that discrepancy, reached through the code: known, not a new failure."""
    if not isinstance(evidence, dict):
        return None
    function = evidence.get("torch_known")
    if isinstance(function, dict):
        candidates: Sequence[Known] = _known_by_function().get(function.get("function", ""), ())
        said = function.get("discrepancy")
    else:
        candidates, said = OWN_RULES, evidence.get("rules_known")
    return next((k for k in candidates if said is not None and k.describe() == said), None)


def torch_known(
    calls: Sequence[str], check: str, case: Case, verdict: Verdict, raised: bool = False
) -> tuple[str, str] | None:
    """The known discrepancy of a torch function among ``calls`` (by name)
    that the failure matches, as (the function, Known.describe()): code that
    only calls ``torch.cumprod`` fails where torch.cumprod's own recorded bug
    does, with the same signature. ``raised``: only the known raises count
    (the code brings rules of its own, which could give a wrong value alike)."""
    table = _known_by_function()
    # the latest call first: an error is raised at or after the call that made it (code that
    # normalizes, then takes a logsumexp, meets logsumexp's raise, which normalize's p=1 shares)
    for name in dict.fromkeys(reversed(calls)):
        for known in table.get(name, ()):
            if (known.raises is not None or not raised) and known.matches(check, case, verdict):
                return name, known.describe()
    return None


@functools.cache
def _known_by_function() -> dict[str, tuple[Known, ...]]:
    """The catalog's known discrepancies by the name of the torch function its
    target is (``Target.torch_function``: ``torch.cumprod`` itself, or
    ``torch.linalg.solve`` behind the wrapper that makes its matrix
    invertible), and by the samplers an implicitly reparameterized sample is
    drawn by (``Target.implicit``: code calling ``torch._standard_gamma`` meets them);
    and OpInfo's, by the op an entry names (code calling ``torch.linalg.eigh``
    meets ``opinfo/linalg.eigh@*``'s)."""
    from fuzzdiff.targets import all_targets, opinfo_known_by_op  # built once, only when a blame needs it

    spaces = {space.__name__: space for space in _TORCH_SPACES}
    found: dict[str, list[Known]] = {}
    for t in all_targets():
        if not t.known or not t.torchs_own:
            continue
        space, _, name = (t.torch_function or "").rpartition(".")
        # by the name the call is seen by (torch.linalg.solve's is "linalg_solve")
        called = getattr(getattr(spaces.get(space), name, None), "__name__", None)
        if isinstance(called, str):
            found.setdefault(called, []).extend(t.known)
        for sampler in t.implicit.samplers if t.implicit is not None else ():
            found.setdefault(sampler, []).extend(t.known)
    # OpInfo's, by the op an entry names ("opinfo/linalg.eigh@*": every sample of linalg.eigh)
    for op, knowns in opinfo_known_by_op().items():
        space, _, name = f"torch.{op}".rpartition(".")
        called = getattr(getattr(spaces.get(space), name, None), "__name__", None)
        if isinstance(called, str):
            found.setdefault(called, []).extend(knowns)
    # torch.slogdet is torch.linalg.slogdet by another name (normflows calls the old one)
    for alias, original in _torch_aliases():
        for one, other in ((alias, original), (original, alias)):
            if other in found:
                mine = found.setdefault(one, [])
                mine.extend(k for k in found[other] if not any(k is m for m in mine))
    return {name: tuple(ks) for name, ks in found.items()}


# How torch's documentation says that a function is another's under a second name.
_ALIAS = re.compile(r"Alias (?:for|of) :func:`(torch\.[\w.]+)`")


def _torch_aliases() -> list[tuple[str, str]]:
    """The functions torch documents as aliases ("Alias for :func:`torch.linalg.slogdet`."),
    each as (its name, the name of the function it is), by the names calls are seen by."""
    pairs = []
    for space in _TORCH_SPACES:
        for attribute in dir(space):
            fn = getattr(space, attribute, None)
            doc = getattr(fn, "__doc__", None)
            said = _ALIAS.search(doc[:400]) if callable(fn) and isinstance(doc, str) else None
            if said is None:
                continue
            home, _, name = said.group(1).rpartition(".")
            original = getattr(_SPACE_NAMES.get(home), name, None)
            names = getattr(fn, "__name__", None), getattr(original, "__name__", None)
            if isinstance(names[0], str) and isinstance(names[1], str) and names[0] != names[1]:
                pairs.append((names[0], names[1]))
    return pairs


_TORCH_SPACES = (torch, torch.nn.functional, torch.linalg, torch.special, torch.fft)
_SPACE_NAMES = {space.__name__: space for space in _TORCH_SPACES}


def blame(check: str, target: Target, verdict: Verdict, evidence: Evidence) -> Blame:
    """Whose bug the failure ``verdict`` of ``check`` on ``target`` is (see the
    module's docstring), with the warnings the code gave while it failed."""
    found = _blamed(check, target, verdict, evidence)
    if not evidence.warned:
        return found
    said = "; ".join(evidence.warned[:3])
    return dataclasses.replace(found, evidence=f"{found.evidence}; while it failed, your code warned: {said}")


def _blamed(check: str, target: Target, verdict: Verdict, evidence: Evidence) -> Blame:
    errors = verdict.errors if isinstance(verdict.errors, dict) else {}
    if target.torchs_own:
        return Blame(PYTORCH, f"the target is torch's own ({target.family} {target.name})", "torch's target")
    if errors.get("internal_assert"):
        return Blame(
            PYTORCH, f"torch failed an internal assert ({errors.get('raised_in', 'in C++')})", "internal assert"
        )
    if errors.get("exception") in CRASHES_OF_TORCH:
        crash = CRASHES_OF_TORCH[errors["exception"]]
        return Blame(
            PYTORCH, f"{crash} ({errors.get('raised_in', 'in torch')}), on code that eager runs", "torch machinery"
        )
    if errors.get("torch_state"):
        return Blame(PYTORCH, f"the failing run left torch broken: {errors['torch_state']}", "torch state")
    if evidence.torch_known is not None:
        function, discrepancy = evidence.torch_known
        return Blame(
            PYTORCH,
            f"your function calls torch's {function}, and the failure matches that function's known "
            f"discrepancy: {discrepancy}",
            "known discrepancy",
        )
    if evidence.rules_known is not None:
        return Blame(
            PYTORCH,
            f"torch runs your own rule(s) ({', '.join(evidence.rules)}) wrongly here, as on record: "
            f"{evidence.rules_known}",
            "known discrepancy",
        )
    part = errors.get("torch_part")
    if part and not evidence.rules:  # with rules of the code's own, the stand-in decides
        return Blame(
            PYTORCH,
            f"raised inside torch's {part} ({errors.get('raised_in')}), not in your code",
            "torch machinery",
        )
    if evidence.stand_in is not None and evidence.stand_in_verdict is not None:
        if mismatch(verdict, evidence.stand_in_verdict) is None:
            return Blame(
                PYTORCH,
                f"{evidence.stand_in.description} fails the same way at the same inputs, layouts and check "
                "parameters: no code of yours is needed",
                "stand-in",
            )
    refused = _refused_by_contract(check, verdict, errors)
    if refused is not None:  # the op is named: localizing would replay it at the case's own layout
        return Blame(USER, refused, level="op", op="torch.Tensor.view")
    if errors.get("swallowed"):
        return Blame(
            USER,
            f"your code caught torch's {errors['swallowed']}, which torch raises through it on purpose "
            f"(checkpoint stops a recomputation so once it has the tensors it needs), and raised its own "
            f"({errors.get('raised_in')}): an `except Exception` there must let it pass",
        )
    if check in MECHANISMS and evidence.caught:
        return Blame(
            USER,
            f"your function catches torch's error itself and goes on another way ({evidence.caught[0]}): "
            f"the {check} check's two runs differ by your code's choice, not by torch's {MECHANISMS[check][0]}",
        )
    if check in MECHANISMS:
        mechanism, kind = MECHANISMS[check]
        asked = [name for name, k in evidence.asks if k == kind]
        if not evidence.rules and not asked:
            return Blame(
                PYTORCH,
                f"the {check} check runs your function's own code on both sides, which differ only in torch's "
                f"{mechanism}; your function defines no derivative rule of its own and does not ask which runs it",
                "mechanism",
            )
        if asked:
            return Blame(
                USER,
                f"your function asks {', '.join(asked)}: {kind} is what tells the {check} check's two runs "
                "apart, and your code chooses what to do by it",
            )
    return Blame(USER, _why_user(errors, evidence))


# What torch ops refuse by their documented contract, at a layout the layout and
# alias checks draw: the code that calls them there, not torch, is at fault.
LAYOUT_CONTRACTS = (
    (
        re.compile(r"view size is not compatible with input tensor's size and stride"),
        "torch.Tensor.view refuses a layout it cannot view without a copy, by its documented contract "
        "(the error says: use .reshape(...) instead)",
    ),
)


def _refused_by_contract(check: str, verdict: Verdict, errors: dict) -> str | None:
    """Why the layout or alias check's raise is the code's: an op it calls
    itself (the raising frame is not torch's) refuses that layout by contract.
    The same refusal raised in torch's own Python (a torch function calling
    view at a layout it promises to take) stays torch's."""
    where = str(errors.get("raised_in", ""))
    if check not in ("layout", "alias") or not errors.get("exception") or where.startswith("torch/"):
        return None
    said = next((why for words, why in LAYOUT_CONTRACTS if words.search(verdict.message)), None)
    return None if said is None else f"{said}; your code calls it at this layout ({where})"


def _why_user(errors: dict, evidence: Evidence) -> str:
    parts: list[str] = []
    if errors.get("exception"):
        parts.append(f"raised in {errors.get('raised_in', 'your code')}")
    if evidence.rules:
        parts.append(f"your own derivative rule(s) take part: {', '.join(evidence.rules)}")
    if evidence.stand_in is not None and evidence.stand_in_verdict is not None:
        kind = evidence.stand_in_verdict.kind
        outcome = "passes" if kind == "pass" else f"is {kind}"
        parts.append(f"{evidence.stand_in.description} {outcome} at the same inputs and check parameters")
    return "; ".join(parts) or "the failure needs your function: nothing points at torch"


def located(blame: Blame, found: Localized) -> Blame:
    """``blame`` with where ``found`` localized the failure: an op of
    torch's that fails alone is PyTorch's; a rule that fails alone is its
    author's (torch's, for a Function torch defines); the composition keeps
    the blame's owner. Not localized, the blame stays, its evidence saying why."""
    if found.level == "op" or found.level == "rule":
        whose = PYTORCH if found.torchs else USER
        via = "op alone" if found.level == "op" else "rule alone"
        return Blame(whose, found.evidence, via, found.level, found.op, found.at, found.script)
    if found.level == "composition":
        return replace(blame, evidence=f"{found.evidence}; {blame.evidence}", level="composition")
    return replace(blame, evidence=f"{blame.evidence}; {found.evidence}")


def torchs_op(blame: Blame, target: Target, found: Localized | None, called: Sequence[str] = ()) -> Blame:
    """The blame of a failure of torch's own ``target``, naming its op: the
    aten op or torch's rule that ``found`` fails alone, else the torch
    function the target is (an OpInfo's, a module's), which fails at the
    case by itself, else the aten ops its call runs (``called``: a wrapper of
    several, no one of them shown failing alone). A maintainer reading a
    record starts from that op."""
    if found is not None and found.level in ("op", "rule"):
        return Blame(
            PYTORCH, f"{found.evidence}; {blame.evidence}", blame.via, found.level, found.op, found.at, found.script
        )
    unlocalized = f"; {found.evidence}" if found is not None and found.level is None else ""
    function = target.torch_function
    if function is not None:
        evidence = f"{blame.evidence}: {function} fails at the case{unlocalized}"
        return replace(blame, evidence=evidence, level="op", op=function)
    if len(called) == 1:
        evidence = f"{blame.evidence}: its call runs one aten op, {called[0]}{unlocalized}"
        return replace(blame, evidence=evidence, level="op", op=called[0])
    if called:
        ops = ", ".join(called[:6]) + (f" and {len(called) - 6} more" if len(called) > 6 else "")
        return replace(blame, evidence=f"{blame.evidence}: the aten ops its call runs: {ops}{unlocalized}", op=ops)
    return replace(blame, evidence=f"{blame.evidence}{unlocalized}")
