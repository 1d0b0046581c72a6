"""``fuzzdiff repro`` and ``fuzzdiff report``: one corpus record, replayed or written up as a bug report.

A record is read as JSON first, and what rebuilding its target would import
is said and checked (--allow-import, --trust-source) before anything is.
"""

from __future__ import annotations

import subprocess
import sys

from fuzzdiff.commands.options import UsageError, allowed_imports, record_path
from fuzzdiff.corpus import repro
from fuzzdiff.corpus.bug_report import bug_report
from fuzzdiff.script import ScriptError

__all__ = ["cmd_report", "cmd_repro"]


def cmd_repro(args) -> int:
    allowed = allowed_imports(args)
    path = record_path(args, args.record)
    record = repro.read(path)  # JSON only: nothing imported yet
    if args.script and not args.in_process and record.verdict.kind == "crash":
        return _script_in_child(path, args)
    for planned in repro.planned_imports(record, allowed):  # refused (exit 2) before anything is imported
        print(f"fuzzdiff: {planned}", file=sys.stderr)
    record, target = repro.load(record, trust_source=args.trust_source, allow_import=allowed)
    if args.script:
        try:
            print(repro.minimal_script(record, target), end="")  # the localized op's own, where there is one
        except ScriptError as e:
            raise UsageError(f"{record.path}: {e}") from None
        return 0
    print(f"record:   {record.path}")
    print(f"check:    {record.check} of {record.target} ({record.case.dtype}, {record.case.device})")
    for line in repro.describe(record.case):
        print(f"          {line}")
    print(f"recorded: {record.verdict}")
    if record.redrawn:
        print(f"note:     {record.redrawn}")
    verdict = repro.replay(record, trust_source=args.trust_source, allow_import=allowed)
    print(f"replayed: {verdict}")
    same = verdict.kind == record.verdict.kind
    print("reproduced" if same else f"did not reproduce: recorded {record.verdict.kind}, replayed {verdict.kind}")
    if verdict.failed:
        whose = repro.whose(record, target)
        print(f"whose:    {whose.headline}: {whose.evidence}")
        if whose.where is not None:
            print(f"where:    {whose.where}")
    return 1 if verdict.failed else 0


def cmd_report(args) -> int:
    allowed = allowed_imports(args)
    record = repro.read(record_path(args, args.record))  # JSON only: nothing imported yet
    for planned in repro.planned_imports(record, allowed):  # refused (exit 2) before anything is imported
        print(f"fuzzdiff: {planned}", file=sys.stderr)
    record, target = repro.load(record, trust_source=args.trust_source, allow_import=allowed)
    try:
        print(bug_report(record, target, run=not args.no_run))
    except ScriptError as e:
        raise UsageError(f"{record.path}: {e}") from None
    return 0


def _script_in_child(path, args) -> int:
    """A crash record's script, written by a child process: writing it imports
    the target and builds its code, and whatever killed the worker must not
    kill this command."""
    command = [sys.executable, "-m", "fuzzdiff.cli", "repro", str(path), "--script", "--in-process"]
    if args.trust_source:
        command.append("--trust-source")
    for name in args.allow_import or []:
        command += ["--allow-import", name]
    if args.corpus is not None:
        command += ["--corpus", str(args.corpus)]
    child = subprocess.run(command, capture_output=True, text=True)
    if child.returncode == 0:
        print(child.stderr, end="", file=sys.stderr)  # what it imported
        print(child.stdout, end="")
        return 0
    if child.returncode == 2:  # a usage or record error, already worded
        print(child.stderr, end="", file=sys.stderr)
        return 2
    raise UsageError(
        f"{path}: writing the script of this crash record killed the process that wrote it "
        f"(exit status {child.returncode}); replay it with 'fuzzdiff repro {path}', which runs "
        f"the case in a child process\n{child.stderr[-2000:]}"
    )
