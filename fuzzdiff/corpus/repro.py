"""Replaying corpus records without Hypothesis, and promoting them to tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from fuzzdiff.search.blame import USER, Blame, blame, gather, located
from fuzzdiff.search.localize import NUMERIC, localize
from fuzzdiff.case.case import Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.config import FuzzConfig
from fuzzdiff.paths import compiled, compiled_autograd
from fuzzdiff.record.files import read_record
from fuzzdiff.record.format import CorpusError, Record
from fuzzdiff.script import standalone_script
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets import TargetUnavailable, UnknownTarget, imported_by, resolve
from fuzzdiff.targets.target import Target
from fuzzdiff.targets.user_import import ImportRefused, PlannedImport, plan_import
from fuzzdiff.guards.timeout import ExampleTimeout, limited
from fuzzdiff.verdict import KINDS, Verdict, mismatch

__all__ = [
    "read",
    "load",
    "imports",
    "planned_imports",
    "replay",
    "whose",
    "minimal_script",
    "describe",
    "regression_test",
    "mismatch",
]


def read(record: Record | Path | str) -> Record:
    """The record, parsed and validated, its check one fuzzdiff knows. Plain
    JSON (and safetensors): nothing is imported, no code runs."""
    if not isinstance(record, Record):
        record = read_record(record)
    if record.check not in CHECKS:
        raise CorpusError(f"{record.path}: field 'check' is {record.check!r}; expected one of {', '.join(CHECKS)}")
    return record


def planned_imports(record: Record | Path | str, allow_import: Iterable[str] = ()) -> list[PlannedImport]:
    """What loading the record would import, and from where, found without
    importing it (fuzzdiff.targets.user_import.plan_import). CorpusError when a
    module is not the project's and ``allow_import`` does not name it."""
    record = read(record)
    field = "definition.fn" if record.definition is not None else "target"
    if record.definition is not None and "module" in record.definition:
        field = "definition.module"
    planned = []
    for ref in imported_by(record.target, record.definition):
        try:
            planned.append(plan_import(ref, allow_import))
        except ImportRefused as e:
            raise CorpusError(f"{record.path}: {e}") from None
        except ValueError as e:
            raise CorpusError(f"{record.path}: field {field!r}: {e}") from None
    return planned


def imports(record: Record | Path | str, allow_import: Iterable[str] = ()) -> PlannedImport | None:
    """The first of ``planned_imports``: the module of the record's function
    or class (None if nothing); CorpusError as there."""
    planned = planned_imports(record, allow_import)
    return planned[0] if planned else None


def load(
    record: Record | Path | str, *, trust_source: bool = False, allow_import: Iterable[str] = ()
) -> tuple[Record, Target]:
    """The record and its target; a name that does not resolve is the record's error.

    A user target's module is imported only when it is the project's own code
    (under the working directory, outside installed packages) or named in
    ``allow_import`` (a name also allows its submodules); otherwise, and before
    anything is imported, CorpusError says which module and how to allow it.
    A record that carries its function's source runs it only with ``trust_source``.
    An OpInfo target is rebuilt from the record's stored sample where it has
    one (its call, whatever the sample's index in this torch's list).
    """
    record = read(record)
    allow_import = _names(allow_import)
    planned_imports(record, allow_import)
    try:
        # a per_sample record of a user's module: the module target of one sample, as fuzzdiff.check fuzzed it
        target = resolve(
            record.target,
            record.definition,
            record.opinfo_sample,
            trust_source=trust_source,
            module_target=record.check == "per_sample",
        )
    except UnknownTarget as e:
        raise CorpusError(
            f"{record.path}: field 'target': {e}: no target of fuzzdiff's has that name, and the record "
            "has no 'definition' to build a user's function or module from"
        ) from None
    except TargetUnavailable as e:
        where = "target" if record.opinfo_sample is None else "opinfo_sample"
        raise CorpusError(f"{record.path}: field {where!r}: cannot be rebuilt here: {e}") from None
    except CorpusError:
        raise
    except ValueError as e:
        where = "definition" if record.definition is not None else "target"
        raise CorpusError(f"{record.path}: field {where!r}: {e}") from None
    return record, target


def whose(record: Record, target: Target) -> Blame:
    """Whose bug the record's failure is: as recorded, else found now
    (fuzzdiff.search.blame), localized where it is the code's (fuzzdiff.search.localize)."""
    recorded = Blame.from_json(record.blame)
    if recorded is not None:
        return recorded
    check = CHECKS[record.check]
    found = blame(record.check, target, record.verdict, gather(check, target, record.case, record.verdict))
    numeric = record.check in NUMERIC or record.verdict.errors.get("exception")
    if found.whose != USER or target.torchs_own or record.verdict.kind != "fail" or not numeric:
        return found
    return located(found, localize(check, target, record.case, record.verdict))


def minimal_script(record: Record, target: Target) -> str:
    """The record's torch-only repro: the few lines of the op or ops its
    failure was localized to (its blame's ``script``) where there are any,
    else the check's standalone script at the record's case (fuzzdiff.script)."""
    recorded = Blame.from_json(record.blame)
    if recorded is not None and recorded.script is not None:
        return recorded.script
    return standalone_script(record.check, record.case, record.verdict, target=target, found_with=record.found_with)


def _names(allow_import: Iterable[str]) -> tuple[str, ...]:
    if isinstance(allow_import, str):  # one name, not its letters
        allow_import = (allow_import,)
    return tuple(allow_import)


def replay(record: Record | Path | str, *, trust_source: bool = False, allow_import: Iterable[str] = ()) -> Verdict:
    """The check's verdict at the record's exact inputs, on the torch at hand.

    A ``crash`` record replays in a child process (in this one it would kill
    the replayer); a ``timeout`` record replays under the per-example timeout.
    What the record may import, and ``trust_source``: as for ``load``.
    """
    record, target = load(record, trust_source=trust_source, allow_import=allow_import)
    if record.verdict.kind == "crash" and record.path is not None:
        return _replay_isolated(record, trust_source, _names(allow_import))
    if record.verdict.kind == "timeout":
        # the record's own limit, else the default one (FuzzConfig.timeout)
        seconds = float(record.verdict.errors.get("timeout") or 0) or FuzzConfig().timeout
        try:
            with limited(seconds):
                return run_check(record.check, target, record.case)
        except ExampleTimeout as stop:
            return Verdict("timeout", str(stop))
    if CHECKS[record.check].compiles:
        # compiled as the check first compiled it: not a graph cached for other cases' shapes
        compiled.forget()
        compiled_autograd.forget()
    return run_check(record.check, target, record.case)


_CHILD = """
import json, sys
from fuzzdiff.corpus.repro import load
from fuzzdiff.search.runner import run_check
record, target = load(sys.argv[1], trust_source=sys.argv[2] == "trust", allow_import=json.loads(sys.argv[3]))
print(run_check(record.check, target, record.case).kind)
"""


def _replay_isolated(record: Record, trust_source: bool = False, allow_import: tuple[str, ...] = ()) -> Verdict:

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(record.path),
            "trust" if trust_source else "-",
            json.dumps(list(allow_import)),
        ],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
    )
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return Verdict("crash", f"the replay died by {name}", {"signal": name})
    if done.returncode != 0:
        return Verdict(
            "crash",
            f"the replay exited with status {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}",
            {"status": done.returncode},
        )
    kind = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if kind not in KINDS:  # the child printed no verdict: nothing is known, and nothing passed
        return Verdict(
            "inconclusive",
            f"the replay in a child process exited cleanly without a verdict (its output ended {kind[-200:]!r})",
        )
    return Verdict(kind, f"the replay in a child process did not crash (verdict {kind})")


def describe(case: Case) -> list[str]:
    """One line per argument: dtype, shape, and where it lives."""
    lines = []
    for i, a in enumerate(case.args):
        dtype = a.dtype or case.dtype
        where = []
        lay = a.strided
        if a.alias is not None:
            where.append("the same tensor as" if a.alias.kind == "same" else "a view sharing storage with")
            where[-1] += f" arg {a.alias.of}"
        if not lay.is_contiguous(a.shape):
            where.append(f"strides {list(lay.strides)}")
        if lay.offset:
            where.append(f"storage offset {lay.offset}")
        if a.grad == "view":
            where.append("a view of a leaf that requires grad")
        elif a.grad == "none":
            where.append("no grad")
        if a.values.specials:
            where.append("specials " + ", ".join(name for _, name in a.values.specials))
        if a.values.structure:
            where.append("structured: " + ", ".join(name for name, _ in a.values.structure))
        lines.append(f"arg {i}: {dtype}{list(a.shape)}" + (f" ({'; '.join(where)})" if where else ""))
    if case.kwargs:
        lines.append("kwargs: " + ", ".join(f"{k}={v!r}" for k, v in case.kwargs.items()))
    return lines


_TEST = '''"""Regression: the {check} check of {target}.

{message}

Promoted from the corpus record {record}
(status: {status}; found with {found}).
Inputs:
{inputs}
Replay by hand: fuzzdiff repro {record} [--script]
"""

from pathlib import Path
{imports}
from fuzzdiff.corpus.repro import replay

RECORD = Path(__file__).parent / {relpath!r}


{mark}def {name}():
    verdict = replay(RECORD)
    assert not verdict.failed, f"{{verdict.kind}}: {{verdict.message}}"
'''


def regression_test(record: Record, folder: Path | str, xfail: bool = False) -> tuple[str, str]:
    """A readable pytest module that fails while the record's failure is present.

    Returns ``(file name, source)``. With ``xfail`` (for an open upstream bug)
    the test is a strict expected failure: an upstream fix shows as XPASS.
    """
    if record.path is None:
        raise ValueError(f"record {record.id} has no file for the test to replay: write it to a corpus first")
    folder = Path(folder)
    slug = re.sub(r"\W+", "_", record.target).strip("_").lower()
    name = f"test_{record.check}_{slug}_{record.id[:8]}"
    message = record.verdict.message.splitlines()[0] if record.verdict.message else record.verdict.kind
    found = ", ".join(f"{k} {v}" for k, v in (record.found_with or {}).items()) or "unknown versions"
    mark = f"@pytest.mark.xfail(strict=True, reason={f'open: {message}'[:200]!r})\n" if xfail else ""
    source = _TEST.format(
        check=record.check,
        target=record.target,
        message=textwrap.fill(f"Recorded {record.verdict.kind}: {message}", 88),
        record=_display(record.path),
        status=record.status,
        found=found,
        inputs="\n".join(f"  {line}" for line in describe(record.case)),
        imports="\nimport pytest\n" if xfail else "",
        relpath=os.path.relpath(Path(record.path).resolve(), folder.resolve()),
        mark=mark,
        name=name,
    )
    return f"{name}.py", source


def _display(path: Path | str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
