"""A corpus record as a bug report a PyTorch maintainer can file as it is.

``fuzzdiff report RECORD`` writes Markdown: a title and a summary, the
torch-only script and what it prints on the torch at hand (the few lines
of the op the failure was localized to, where it was: fuzzdiff.search.localize;
else the check's standalone script, fuzzdiff.script),
expected against actual and how the failure was confirmed, the versions,
whether the failure is silent (a wrong value), loud (an exception) or a
crash, and the upstream issues the record's known discrepancy cites.
"""

from __future__ import annotations

import platform
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from fuzzdiff.corpus.causes import op_of, severity
from fuzzdiff.targets.known import Known
from fuzzdiff.record.format import Record
from fuzzdiff.script import standalone_script
from fuzzdiff.search.blame import Blame
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import headline

__all__ = ["bug_report", "upstream_issues"]

_UPSTREAM = re.compile(r"\b(?:pytorch/pytorch#\d+|https://github\.com/pytorch/pytorch/(?:issues|pull)/\d+)")
SCRIPT_SECONDS = 300


def upstream_issues(known: Known | None) -> list[str]:
    """The upstream issues and pull requests a known discrepancy cites, as written there."""
    if known is None:
        return []
    return list(dict.fromkeys(_UPSTREAM.findall(f"{known.reason} {known.evidence}")))


def _known_of(record: Record, target: Target) -> Known | None:
    return next((k for k in target.known if record.id in k.records), None)


def _run(script: str) -> tuple[int | None, str]:
    """The script's exit status and what it prints, in a process of its own (a crash kills only that)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "repro.py"
        path.write_text(script)
        try:
            done = subprocess.run(
                [sys.executable, str(path)], capture_output=True, text=True, timeout=SCRIPT_SECONDS, cwd=folder
            )
        except subprocess.TimeoutExpired:
            return None, f"(still running after {SCRIPT_SECONDS} s)"
    out = (done.stdout + done.stderr).strip()
    lines = out.splitlines()
    if len(lines) > 60:
        out = "\n".join(lines[:20] + [f"... ({len(lines) - 40} lines) ..."] + lines[-20:])
    return done.returncode, out


def _status(code: int | None) -> str:
    if code is None:
        return "did not finish"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _needs(script: str) -> str:
    """What the script needs, as its header says (an OpInfo op from torch's op_db: expecttest)."""
    needs = re.search(r"^Needs (.+) besides torch", script, re.M)
    if needs is None:
        return "A torch-only script (no other dependency):"
    return f"A script that needs torch and {needs.group(1)}:"


def bug_report(record: Record, target: Target, *, run: bool = True) -> str:
    """The Markdown report of ``record``; ``run``: run its script here and show what it prints."""
    known = _known_of(record, target)
    kind = severity(record.verdict)
    verdict = record.verdict
    whose = Blame.from_json(record.blame)
    localized = whose is not None and whose.level == "op" and whose.op is not None
    op = whose.op if localized and whose is not None else op_of(record.target)
    what = {
        "silent": "silently wrong derivative",
        "loud": "raises",
        "crash": "crashes the process",
        "timeout": "hangs",
    }[kind]
    case = record.case
    identity = verdict.message.split(":", 1)[0] if kind == "silent" else ""
    title = f"`{op}`: {what}" + (f" ({identity})" if identity else "") + f", {case.dtype} on {case.device}"
    summary = (
        known.reason
        if known is not None
        else f"{headline(verdict.message)} (found by property-based fuzzing; shrunk to the inputs below)"
    )
    if localized and whose is not None:
        summary += f"\n\nLocalized to {whose.where}: {whose.evidence}"
    # the few lines of the op the failure was localized to, where there are any (fuzzdiff.search.localize)
    script = (
        whose.script
        if whose is not None and whose.script is not None
        else standalone_script(record.check, case, verdict, target=target, found_with=record.found_with)
    )
    lines = [f"### 🐛 {title}", "", summary, ""]
    lines += [
        "**Kind:** "
        + {
            "silent": "silent: a wrong value, no error",
            "loud": "loud: an exception where the operation should succeed",
            "crash": "crash: the process dies",
            "timeout": "hang: the call does not return",
        }[kind],
        "",
    ]
    lines += [
        "#### To reproduce",
        "",
        _needs(script),
        "",
        "```python",
        script.rstrip(),
        "```",
        "",
    ]
    ran = _run(script) if run else None
    if ran is not None:
        lines += [
            f"Its output on torch {torch.__version__} ({_status(ran[0])}):",
            "",
            "```",
            ran[1] or "(nothing)",
            "```",
            "",
        ]
    said = re.search(r"[;,]?\s*\bconfirmed\b:?\s*", verdict.message)
    actual, confirmed = (
        (verdict.message[: said.start()], verdict.message[said.end() :]) if said else (verdict.message, "")
    )
    lines += ["#### Expected and actual", ""]
    if kind == "silent":
        lines += [
            f"Expected: the two sides agree ({identity}), within the tolerance the script states.",
            "",
            f"Actual: {actual.splitlines()[0] if actual else verdict.kind}",
            "",
        ]
    elif kind == "loud":
        lines += [
            "Expected: the call succeeds, as it does for the same values in other layouts or modes "
            "(the script's other side).",
            "",
            f"Actual: {headline(verdict.message)}",
            "",
        ]
    else:
        died = f"the script's process was {_status(ran[0])}" if ran is not None else verdict.message.splitlines()[0]
        lines += [f"Expected: the call returns. Actual: {died}.", ""]
    if confirmed:
        lines += [f"How it was confirmed: {confirmed.splitlines()[0]}", ""]
    if known is not None:
        lines += [f"Standalone evidence: `{known.evidence}`", ""]
    if record.fixed_in is not None:
        lines += [f"Fixed upstream: the record passes from torch {record.fixed_in} on (`fuzzdiff corpus replay`).", ""]
    issues = upstream_issues(known)
    lines += ["#### Related upstream issues", "", ", ".join(issues) if issues else "none found", ""]
    found = ", ".join(f"{k} {v}" for k, v in (record.found_with or {}).items())
    lines += [
        "#### Versions",
        "",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), Python {platform.python_version()}, "
        f"{platform.platform()}",
        f"- found with: {found or 'not recorded'}; corpus record `{record.id}` ({record.check}/{record.target})",
        "",
    ]
    return "\n".join(lines)
