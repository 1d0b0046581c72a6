"""docs/pages/discrepancies.md, written from the known signatures and the corpus.

A page copied from the signatures by hand goes stale (it missed signatures,
and its counts drifted from the corpus); here each signature's ``reason`` and
``evidence`` are the one source, and every number is counted. From the
repository root::

    python -m fuzzdiff.corpus.discrepancies_page > docs/pages/discrepancies.md

tests/unit/corpus/test_discrepancies_page.py fails while the committed page differs.
OpInfo signatures are read from their table (fuzzdiff.targets.opinfo.known)
without building torch's op_db, which takes a minute.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fuzzdiff.record.files import iter_records, read_record
from fuzzdiff.corpus.causes import root_causes, severity
from fuzzdiff.targets.known import Known
from fuzzdiff.record.format import Record
from fuzzdiff.targets.releases import release
from fuzzdiff.targets import all_targets, discrepancies, get_target
from fuzzdiff.targets.discrepancies import EAGER_CHECKS
from fuzzdiff.targets.opinfo.known import KNOWN as OPINFO_KNOWN
from fuzzdiff.verdict import headline

__all__ = ["COMMAND", "Signature", "signatures", "render", "main"]

COMMAND = "python -m fuzzdiff.corpus.discrepancies_page > docs/pages/discrepancies.md"

# Signatures of fuzzdiff.targets.discrepancies that no catalog or OpInfo target
# lists: who meets them instead.
_LISTED_ELSEWHERE = {
    "NESTED_JVP_FUNCTION": "every user target (`fuzzdiff.targets.user`) and the self-test zoo's",
    "FUNCTION_JVP_DROPPED_AT_DUALS": "code that brings its own derivative rules, a user's `autograd.Function` "
    "(`fuzzdiff.targets.discrepancies.OWN_RULES`, read by `fuzzdiff.search.blame`); met on the zoo's "
    "`scale_fake_row_major` and its twin",
    "FUNCTION_JVP_DROPPED_UNDER_COMPILED_JVP": "code that brings its own derivative rules, a user's "
    "`autograd.Function` (`fuzzdiff.targets.discrepancies.OWN_RULES`, read by `fuzzdiff.search.blame`); met "
    "on the zoo's `scale_fake_row_major` and its twin",
}


@dataclass
class Signature:
    """One known discrepancy and the targets that list it (one row of the page)."""

    known: Known
    where: list[str] = field(default_factory=list)  # Markdown, one item a target or a pattern


def signatures() -> list[Signature]:
    """Every declared signature once, in declaration order: a signature shared by
    several targets (the same Known object) is one, naming them all."""
    found: dict[int, Signature] = {}

    def add(known: Known, where: str) -> None:
        sig = found.setdefault(id(known), Signature(known))
        if where not in sig.where:
            sig.where.append(where)

    for target in all_targets():
        for known in target.known:
            add(known, f"`{target.name}`")
    for pattern, known in OPINFO_KNOWN:
        add(known, "every OpInfo target" if pattern == "opinfo/*" else f"`{pattern.removesuffix('@*')}`")
    for name, value in vars(discrepancies).items():
        for known in value if isinstance(value, tuple) else (value,):
            if isinstance(known, Known) and id(known) not in found:
                add(known, _LISTED_ELSEWHERE.get(name, "no target lists it"))
    return list(found.values())


# -- sections ----------------------------------------------------------------------------

EAGER = "Eager autograd: reverse and forward mode"
SECOND = "Second derivatives with forward mode in them"
VMAP = "vmap"
COMPILE = "torch.compile and AOTAutograd"
PER_SAMPLE = "Per-sample gradients (ExpandedWeights)"
CHECKPOINT = "Activation checkpointing"
CUDA = "On CUDA"
CONVENTIONS = "Conventions and documented limits"
BUG_SECTIONS = (EAGER, SECOND, VMAP, COMPILE, PER_SAMPLE, CHECKPOINT, CUDA)

_PREFACE = {
    SECOND: "The `forward2` check's identities: forward over forward, reverse over forward, forward "
    "over reverse, reverse over reverse, and `torch.func.hessian`, `jacfwd(jacfwd)` and "
    "`jacrev(jacrev)` where they apply ([checks](checks.md#forward2)).",
    COMPILE: "Unless a row says otherwise, `torch.compile` runs with `dynamic=True`.",
    CONVENTIONS: "Not bugs: what torch documents, or chose on purpose, that a check still reports. "
    "Each signature keeps matching (so CI stays green on it) and says why the behaviour is "
    "intended (`Known.expected`); its records have status `expected`, and `fuzzdiff corpus stats` "
    "counts them among no root cause.",
}


def section(known: Known) -> str:
    """The page section of a signature: conventions apart, then by device, then by check."""
    if known.expected:
        return CONVENTIONS
    if any(_on_cuda(f) for alt in known.features for f in alt.split("|")):
        return CUDA
    checks = set(known.checks)
    for name, title in (
        ("forward2", SECOND),
        ("vmap", VMAP),
        ("compile", COMPILE),
        ("per_sample", PER_SAMPLE),
        ("checkpoint", CHECKPOINT),
    ):
        if checks == {name}:
            return title
    return EAGER


def _on_cuda(feature: str) -> bool:
    """A feature of CUDA inputs, a case's or one argument's ("1:device:cuda")."""
    return (feature.split(":", 1)[1] if feature[:1].isdigit() else feature).startswith("device:cuda")


# -- cells -------------------------------------------------------------------------------

_WORD_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _text(s: str) -> str:
    """Prose in a table cell: pipes, tags and emphasis marks taken literally."""
    s = s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")
    return _WORD_EDGE_UNDERSCORE.sub(r"\\_", s)


def _code(s: str) -> str:
    """A code span in a table cell (the tables extension reads a pipe inside one as text)."""
    ticks, pad = ("``", " ") if "`" in s else ("`", "")
    return f"{ticks}{pad}{s}{pad}{ticks}"


def _checks(known: Known) -> str:
    checks = list(known.checks)
    if set(EAGER_CHECKS) <= set(checks):
        return ", ".join(["the eager checks"] + [c for c in checks if c not in EAGER_CHECKS])
    return ", ".join(checks)


def _shows(known: Known) -> str:
    if known.crash:
        return "crash (kills the process; matched on its inputs, never run)"
    if known.raises:
        return f"raises {_code(known.raises)}"
    return "wrong value, silently"


def _what(known: Known) -> str:
    fixed = f" (fixed in torch {known.fixed_in})" if known.fixed_in else ""
    return f"{_text(known.reason)}{fixed}. Evidence: {_code(known.evidence)}"


def _records(ids: Iterable[str]) -> str:
    return ", ".join(_code(i) for i in ids) or "none yet"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# -- the page ----------------------------------------------------------------------------


def _baseline(records: Sequence[Record]) -> str:
    """The torch release most records were found with: the page's reference."""
    found = Counter(release((r.found_with or {}).get("torch", "")) for r in records if r.found_with)
    return found.most_common(1)[0][0] if found else "?"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _intro(sigs: Sequence[Signature], records: Sequence[Record], baseline: str) -> list[str]:
    status = Counter(r.status for r in records)
    cuda_open = sum(1 for r in records if r.status == "open" and r.case.device.startswith("cuda"))
    fixed_in = Counter(r.fixed_in for r in records if r.status == "fixed" and r.fixed_in)
    unnamed = status["fixed"] - sum(fixed_in.values())
    releases = " and ".join(f"{n} in {v}" for v, n in sorted(fixed_in.items(), key=lambda i: _key(i[0])))
    known = [s.known for s in sigs]
    on_baseline = [r for r in records if r.status_on(baseline) == "open"]
    causes = root_causes(on_baseline, known)
    by_known = sum(1 for c in causes if c.known is not None)
    kinds = Counter(c.kind for c in causes)
    conventions = sum(1 for k in known if k.expected)
    return [
        "# PyTorch discrepancies found",
        "",
        f"<!-- Generated by `{COMMAND}` (fuzzdiff/corpus/discrepancies_page.py) from the known signatures and the "
        "corpus: edit a signature's reason or evidence, not this page. -->",
        "",
        f"Everything below was found by fuzzdiff in torch {baseline} on the CPU unless a row",
        "says otherwise. Each is a `known` signature of its target",
        "([how signatures work](targets.md#known-discrepancies-signatures-not-pairs))",
        "with a standalone torch snippet as evidence, so CI stays green on it and goes",
        "red on anything else. Those the suite has shrunk are corpus records with status",
        "`open`: `fuzzdiff corpus list` shows them, `fuzzdiff repro ID` replays one,",
        "`fuzzdiff repro ID --script` prints a torch-only script for a bug report, and",
        "`tests/regressions/` replays each as the recorded failure (kind, exception type",
        "and message). A record id below is the record's file name:",
        "`corpus/<check>/<target>/<id>.json`. The eager checks are "
        + ", ".join(f"`{c}`" for c in EAGER_CHECKS)
        + ": they run the target eagerly, forward and backward, on the case's own values.",
        "",
        f"The committed corpus holds {len(records)} records: {status['open']} `open`, {status['fixed']} "
        f"`fixed` and {status['expected']} `expected` ({cuda_open} of those open "
        f"{'is a CUDA record' if cuda_open == 1 else 'are CUDA records'}). Of the fixed, {releases}"
        + (f", and {unnamed} with no release named" if unnamed else "")
        + ': `fuzzdiff corpus replay --mark` on each wrote `"fixed_in"` into them, and their rows '
        f"below say so. They still fail on torch {baseline}, where `tests/regressions/` replays them "
        f"as open. `fuzzdiff corpus stats` groups the open records into root causes: on torch "
        f"{baseline}, {len(on_baseline)} open records in {len(causes)} root causes ({by_known} by a "
        f"known signature, {len(causes) - by_known} by an automatic one; "
        + ", ".join(f"{n} {_KIND_WORDS.get(k, k)}" for k, n in sorted(kinds.items(), key=lambda i: (-i[1], i[0])))
        + ").",
        "",
        f"{_plural(len(sigs), 'signature')} in all: {len(sigs) - conventions} torch bugs, and "
        f"{conventions} [conventions and documented limits](#conventions-and-documented-limits) "
        "that the checks report but that are intended behaviour.",
    ]


_KIND_WORDS = {"crash": "crashes", "timeout": "time-outs"}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _cuda_found_with(records: Sequence[Record]) -> str:
    found = Counter(
        ", ".join(f"{lib} {v}" for lib, v in sorted((r.found_with or {}).items()) if lib in ("torch", "hypothesis"))
        for r in records
        if r.case.device.startswith("cuda")
    )
    return f"Its records were found with {found.most_common(1)[0][0]}." if found else ""


def _unlisted(records: Sequence[Record], sigs: Sequence[Signature]) -> list[Record]:
    listed = {rid for s in sigs for rid in s.known.records}
    return [r for r in records if r.id not in listed]


def _record_row(record: Record) -> list[str]:
    status = record.status + (f" (fixed in torch {record.fixed_in})" if record.fixed_in else "")
    found = (record.found_with or {}).get("torch", "?")
    what = (record.reason or headline(record.verdict.message)).rstrip(".")
    try:
        why_cpu = get_target(record.target).cpu_only
    except Exception:  # noqa: BLE001 - a record of a target gone or not importable here
        why_cpu = None
    if why_cpu:
        what += f". The target is `cpu_only`: {why_cpu}"
    return [
        _code(record.target),
        record.check,
        _code(status),
        f"{_text(what)} (found with torch {found}; {severity(record.verdict)})",
        _code(record.id),
    ]


_TAIL = """## Found by the tests, not in the corpus

- A user's `autograd.Function` that leaves torch (`NumpySin` in
  `tests/unit/checks/test_compile.py`): `torch.compile` (any backend, `backend="eager"`
  too; `dynamic` True or False) of `torch.func.grad` or `torch.func.vjp` through
  an `autograd.Function` whose forward computes in NumPy returns a zero
  gradient, silently; eager `torch.func.grad`, the compiled function under plain
  `torch.autograd.grad`, and a graph break inside `torch.func.grad` without the
  Function are right. With `NumpySin.forward(x) =
  torch.from_numpy(np.sin(x.detach().numpy()))` and `backward(ctx, g) = g *
  x.cos()`, `torch.compile(torch.func.grad(lambda t: (NumpySin.apply(t) *
  1.5).sum()), backend='eager')(torch.tensor([[0.75]]).double())` gives `[[0.]]`
  instead of `[[1.0975]]`; the test
  `test_compiled_torch_func_grad_through_an_untraceable_function_is_zero` holds
  the repro.
- A short `fuzzdiff run --device cuda` campaign on one H100 found nothing
  besides two known `per_sample` discrepancies
  ([benchmarks](benchmarks.md#on-a-gpu)).

## Worked around in the framework

Two torch behaviours fuzzdiff works around rather than records as target bugs:

- vmap of an output that is not batched at its level, moved to a nonzero
  `out_dims`, gives garbage sizes: `vmap(lambda a: torch.zeros(3).double(),
  out_dims=-1)(torch.randn(2).double()).shape` is `[34359738369, 3]` (with
  `out_dims=1` it raises). Such an output gets an exact batched zero added.
- `forward_ad.make_dual` raises an overlapping-write error for a stride-0
  primal whose tangent has other metadata, even when that tangent is itself
  stride 0. fuzzdiff hands it a tangent with the primal's exact metadata.
"""


def render(sigs: Sequence[Signature], records: Sequence[Record]) -> str:
    """The page: the introduction's counts, a table per section, the records no
    signature lists, and the fixed notes at the end."""
    baseline = _baseline(records)
    lines = _intro(sigs, records, baseline)
    for title in (*BUG_SECTIONS, CONVENTIONS):
        rows = [s for s in sigs if section(s.known) == title]
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        if title in _PREFACE:
            lines += [_PREFACE[title], ""]
        if title == CUDA and _cuda_found_with(records):
            lines += [_cuda_found_with(records), ""]
        last = "why it is intended" if title == CONVENTIONS else "shows as"
        lines += _table(
            ("targets", "checks", "what", last, "records"),
            (
                [
                    ", ".join(s.where),
                    _checks(s.known),
                    _what(s.known),
                    _text(s.known.expected) if title == CONVENTIONS else _shows(s.known),
                    _records(s.known.records),
                ]
                for s in rows
            ),
        )
    unlisted = _unlisted(records, sigs)
    if unlisted:
        lines += [
            "",
            "## Records no signature lists",
            "",
            "Fixed records whose bug was gone before the torch releases the suite runs on, expected "
            "ones (intended behaviour, not a torch bug), and open ones that no signature explains yet:",
            "",
        ]
        lines += _table(("target", "check", "status", "what", "record"), (_record_row(r) for r in unlisted))
    return "\n".join(lines) + "\n\n" + _TAIL


def read_corpus(root: Path | str) -> list[Record]:
    """Every record under ``root``, in path order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no corpus at {root}: run from the repository root, or pass --corpus")
    return [read_record(p) for p in sorted(iter_records(root))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzzdiff.corpus.discrepancies_page", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="corpus", help="the corpus to count (default: ./corpus)")
    args = parser.parse_args(argv)
    sys.stdout.write(render(signatures(), read_corpus(args.corpus)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
