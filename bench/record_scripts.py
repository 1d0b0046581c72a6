"""Every corpus record's standalone script, written and run: does it reproduce?

The acceptance of ``fuzzdiff repro --script`` (fuzzdiff.script): every open
record writes a script, and the script reproduces on the torch the record is
open for. For each record of the chosen statuses this writes its script (a
crash record's in a child process, as ``fuzzdiff repro --script`` does), runs
it under ``--python`` (default: this interpreter) with a timeout, and sorts
the outcome:

- reproduced: exit status 1 ending in ``MISMATCH`` for a wrong value, or the
  recorded exception raised (its type, as the record names it), or a crash
  record's process killed by a signal;
- passes: exit status 0 (``OK``): right for a fixed record on a torch from
  its ``fixed_in`` on;
- needs device: exit status 2, the device the case ran on is absent;
- other: anything else (another exception, a timeout), with its last line;
- not written: the writer refused (ScriptError or any error), with why.

Then a table by check: records, scripts written, reproduced, passed, needs
device, other. Figures only, no assertions:

    python bench/record_scripts.py                                  # open records, this torch
    python bench/record_scripts.py --status fixed --python /work/venv214/bin/python
    python bench/record_scripts.py --check vmap --keep /tmp/scripts  # keep the scripts and their output
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from fuzzdiff.corpus import repro
from fuzzdiff.config import default_corpus
from fuzzdiff.record.files import iter_records
from fuzzdiff.script import standalone_script

COLUMNS = ("records", "written", "reproduced", "passes", "needs device", "other")
_RAISED = re.compile(r"^([A-Za-z_][\w.]*)(:|$)")


def write(record, corpus: Path) -> str:
    """The record's script; a crash record's is written by a child process."""
    if record.verdict.kind == "crash":
        command = [sys.executable, "-m", "fuzzdiff.cli", "repro", str(record.path), "--script", "--in-process"]
        done = subprocess.run([*command, "--corpus", str(corpus)], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError((done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1])
        return done.stdout
    record, target = repro.load(record)
    return standalone_script(record.check, record.case, record.verdict, target=target, found_with=record.found_with)


def raised(output: str) -> str | None:
    """The type (last dotted part) of the exception a traceback in ``output`` ends with."""
    lines = output.splitlines()
    starts = [k for k, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if line and not line.startswith(" "):
            found = _RAISED.match(line)
            return found.group(1).rsplit(".", 1)[-1] if found else None
    return None


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, or ""."""
    return (text.strip().splitlines() or [""])[-1]


def outcome(record, code: int | None, stdout: str, stderr: str) -> tuple[str, str]:
    """(column, detail) for a script's exit status and output: its verdict is the
    last line it prints, an exception the traceback on stderr (where warnings go too)."""
    last, error = last_line(stdout), last_line(stderr)
    if code is None:
        return "other", "timed out"
    if code == 2 and error.startswith("needs "):
        return "needs device", error
    if code == 0:
        return "passes", last[:120]
    if code < 0:
        return ("reproduced" if record.verdict.kind == "crash" else "other"), f"killed by signal {-code}"
    exception = record.verdict.errors.get("exception")
    got = raised(stderr)
    if exception is None and got is None and last.startswith("MISMATCH"):
        return "reproduced", last[:120]
    if exception is not None and got == exception:
        return "reproduced", f"raises {got}"
    recorded = f"raises {exception}" if exception else "a mismatch"
    return "other", f"recorded {recorded}; the script: exit status {code}, {(error or last)[:160]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None, help="default: $FUZZDIFF_CORPUS or ./corpus")
    parser.add_argument("--status", action="append", help="records of this status (repeatable; default open)")
    parser.add_argument("--check", action="append", help="records of this check only (repeatable)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the scripts")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per script")
    parser.add_argument("--keep", type=Path, help="write each script and its output here")
    args = parser.parse_args()
    corpus = args.corpus or default_corpus(os.environ)
    statuses = set(args.status or ["open"])
    folder = args.keep or Path(tempfile.mkdtemp(prefix="record_scripts_"))
    folder.mkdir(parents=True, exist_ok=True)
    table: dict[str, Counter] = defaultdict(Counter)
    for path in iter_records(corpus):
        record = repro.read(path)
        if record.status not in statuses or (args.check and record.check not in args.check):
            continue
        row = table[record.check]
        row["records"] += 1
        name = f"{record.check}_{record.id}"
        try:
            script = write(record, corpus)
        except Exception as e:  # noqa: BLE001 - a refusal is a figure of the scan
            print(f"{name}: not written: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        row["written"] += 1
        file = folder / f"{name}.py"
        file.write_text(script)
        try:
            done = subprocess.run(
                [args.python, file.name], capture_output=True, text=True, timeout=args.timeout, cwd=folder
            )
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            code, stdout, stderr = None, "", ""
        (folder / f"{name}.out").write_text(stdout + stderr)
        column, detail = outcome(record, code, stdout, stderr)
        row[column] += 1
        print(f"{name}: {column}: {detail}", flush=True)
    print(f"\nscripts and their output: {folder}")
    print(f"{'check':<12}" + "".join(f"{c:>14}" for c in COLUMNS))
    total: Counter = Counter()
    for check in sorted(table):
        total.update(table[check])
        print(f"{check:<12}" + "".join(f"{table[check][c]:>14}" for c in COLUMNS))
    print(f"{'all':<12}" + "".join(f"{total[c]:>14}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
