"""The in-flight journal: which case each process is running right now.

A case that kills its process (segfault, abort, the out-of-memory killer, a
hang stopped by the hard timeout) cannot report itself. So before each example
runs, the process has its (check, target, case, variant) on disk, and a later
``recover()`` turns the entry of a dead process into a ``crash`` (or
``timeout``) record in the corpus.

Cheap by construction, since it runs around every example: one file per
``fuzz()`` call, the case JSON written once per drawn case (by the C JSON
encoder), and per example only a fixed-width variant field at offset 0,
written through a shared memory map: no system call per example. It is set
idle once the drawn case's variants end. No fsync: a dead process's writes,
mapped or not, are already in the page cache; only an OS crash loses them,
and then the whole run is lost anyway.

File layout, ``<corpus>/.inflight/<host>-<pid>-<token>.json``::

    "          3\\n"     12 bytes: the variant in flight, -1 when idle
    {"format": 1, "host": ..., "pid": ..., "check": ..., "case": {...}}

Beside it, ``<same stem>.hang`` receives faulthandler's traceback when the
hard timeout stops the process (fuzzdiff.guards.timeout); its presence makes the
record a ``timeout`` rather than a ``crash``.

A process stopped on purpose was interrupted, not crashed, and leaves no
entry: Ctrl-C unwinds through ``fuzz()``, which closes its journal; SIGTERM
and SIGHUP, which would kill the process on the spot, are caught while a
journal is open (where nobody else handles them) to remove the process's
entries, and the process then dies of the signal as it would have. What the
process cannot do for itself (SIGKILL sent by the one who stops it, a stop
that lands inside a long C call), its stopper does with ``forget()``: the
campaign for the workers it kills, the pytest plugin for the xdist workers of
an interrupted session. Every other death (a segfault, an abort, the
out-of-memory killer's SIGKILL, ``os._exit``) leaves the entry for ``recover``.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import secrets
import signal
import socket
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from fuzzdiff.verdict import Verdict

__all__ = ["INFLIGHT", "Journal", "Inflight", "recover", "forget", "take", "record_inflight", "case_json", "STOPS"]

INFLIGHT = ".inflight"
FORMAT = 1
HEADER = 12
IDLE = b"%11d\n" % -1
STALE_AFTER = 3600.0  # seconds without a write before another host's entry counts as dead

_HOST = socket.gethostname()
_STEM_HOST = "".join(c if c.isalnum() or c in ".-" else "_" for c in _HOST)


# -- a Case as JSON, fast ---------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(x):
    """The JSON encoder's hook: a dataclass as its fields, shallowly; the C
    encoder does the rest (several times faster than Case.to_json's asdict).
    Fields with compare=False (Case.data, pinned tensors) are not the recipe.
    Non-finite floats come out as NaN/Infinity, which json.loads reads back."""
    names = _FIELDS.get(type(x))
    if names is None:
        if isinstance(x, Mapping):
            return dict(x)
        if not dataclasses.is_dataclass(x) or isinstance(x, type):
            return repr(x)
        names = _FIELDS[type(x)] = tuple(f.name for f in dataclasses.fields(x) if f.compare)
    return {n: getattr(x, n) for n in names}


_encode = json.JSONEncoder(separators=(",", ":"), default=_fields).encode


def case_json(case) -> str:
    """The case as JSON that ``fuzzdiff.record.format.case_from_json`` reads back."""
    return _encode(case)


# -- writing -----------------------------------------------------------------------------


def _state(pid: int) -> tuple[str, int | None] | None:
    """(state letter, start time in clock ticks since boot) from /proc, None if
    no such process. The start time tells a reused pid from the journal's owner."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return "?", None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19]) if len(fields) > 19 else None


def _start_time(pid: int) -> int | None:
    state = _state(pid)
    return None if state is None else state[1]


class Journal:
    """One fuzz() call's journal file: ``begin_case`` once per drawn case,
    ``begin(k)`` before each variant, ``end()`` after the case's variants,
    ``close()`` at the end."""

    def __init__(self, root: Path | str, check: str, target: str, timeout: float = 0.0):
        self.root = Path(root)
        folder = self.root / INFLIGHT
        if not (folder / ".gitignore").exists():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".gitignore").write_text("*\n")  # transient: never committed with the corpus
        pid = self.pid = os.getpid()
        stem = f"{_STEM_HOST}-{pid}-{secrets.token_hex(4)}"
        self.path = folder / f"{stem}.json"
        self.hang_path = folder / f"{stem}.hang"
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        os.pwrite(self._fd, IDLE, 0)
        self._header = mmap.mmap(self._fd, HEADER)  # MAP_SHARED: stores reach the file's pages
        parent = os.getppid()
        head = json.dumps(
            {
                "format": FORMAT,
                "host": _HOST,
                "pid": pid,
                "start": _start_time(pid),
                "parent": parent,
                "parent_start": _start_time(parent),
                "check": check,
                "target": target,
                "timeout": timeout,
            }
        )
        self._prefix = head[:-1].encode() + b', "case": '
        self._marks = [b"%11d\n" % k for k in range(64)]
        self._size = HEADER
        _opened(self)

    def begin_case(self, case) -> None:
        """Write the drawn case (idle until ``begin``: a torn body is never read)."""
        fd = self._fd
        assert fd is not None, "the journal is closed"
        body = self._prefix + case_json(case).encode() + b"}\n"
        os.pwrite(fd, body, HEADER)
        if HEADER + len(body) < self._size:
            os.ftruncate(fd, HEADER + len(body))
        self._size = HEADER + len(body)

    def begin(self, k: int) -> None:
        self._header[:] = self._marks[k] if k < 64 else b"%11d\n" % k

    def end(self) -> None:
        self._header[:] = IDLE

    def close(self) -> None:
        if self._fd is not None:
            self._header.close()
            os.close(self._fd)
            self._fd = None
            self.path.unlink(missing_ok=True)
            _closed(self)


# -- stop requests -----------------------------------------------------------------------

STOPS = (signal.SIGTERM, signal.SIGHUP)  # "stop", by default fatal without a word
_OPEN: dict[int, Journal] = {}
_HANDLED: set[int] = set()  # the signals _on_stop was installed for (over SIG_DFL)


def _on_stop(signum, frame) -> None:
    """Examples in flight when the process is told to stop were interrupted:
    remove this process's entries, then die of the signal as without fuzzdiff.
    (A forked child inherits the handler and the registry, not the entries.)"""
    for journal in list(_OPEN.values()):
        if journal.pid == os.getpid():
            journal.path.unlink(missing_ok=True)
            journal.hang_path.unlink(missing_ok=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _opened(journal: Journal) -> None:
    _OPEN[id(journal)] = journal
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; Ctrl-C still unwinds
    for sig in STOPS:
        if sig not in _HANDLED and signal.getsignal(sig) == signal.SIG_DFL:
            # Someone else's handler (fuzzdiff run's, a test runner's) is left alone:
            # it unwinds through fuzz(), which closes the journal.
            signal.signal(sig, _on_stop)
            _HANDLED.add(sig)


def _closed(journal: Journal) -> None:
    _OPEN.pop(id(journal), None)
    if _OPEN or threading.current_thread() is not threading.main_thread():
        return
    for sig in _HANDLED:
        if signal.getsignal(sig) is _on_stop:
            signal.signal(sig, signal.SIG_DFL)
    _HANDLED.clear()


# -- recovery ----------------------------------------------------------------------------


def _owner_alive(entry: Path, info: Mapping, stale_after: float) -> bool:
    pid, host = info.get("pid"), info.get("host")
    if host != _HOST or not isinstance(pid, int):
        try:
            return time.time() - entry.stat().st_mtime < stale_after
        except FileNotFoundError:
            return True  # someone else recovered it
    if pid == os.getpid():
        return True
    state = _state(pid)
    if state is None:
        if os.path.isdir("/proc/self"):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    code, start = state
    if code in ("Z", "X"):
        return False  # a zombie: dead, not yet reaped (e.g. a crashed xdist worker)
    return info.get("start") is None or start is None or start == info["start"]


def _read(entry: Path) -> tuple[int, dict | None] | None:
    try:
        raw = entry.read_bytes()
    except FileNotFoundError:
        return None
    try:
        k = int(raw[:HEADER])
    except ValueError:
        return -1, None
    try:
        info, _ = json.JSONDecoder().raw_decode(raw[HEADER:].decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        info = None
    return k, info


def _hang_report(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    return text if text.startswith("Timeout") else None


def recover(root: Path | str, *, cause: str | None = None, stale_after: float = STALE_AFTER) -> list[Path]:
    """Turn the journal entries of dead processes under ``root`` into records.

    An entry whose owner is alive (same host, pid running with the same start
    time; another host: written to within ``stale_after`` seconds) is left
    alone. A dead owner's in-flight example becomes a ``crash`` record, or a
    ``timeout`` record when the hard timeout stopped it; an idle entry is just
    removed. Safe to run concurrently: records are deduplicated by signature.
    ``cause`` (e.g. "xdist worker gw1 crashed") is added to the message.
    Returns the record paths, one per recovered in-flight entry.
    """
    folder = Path(root) / INFLIGHT
    try:
        entries = sorted(folder.glob("*.json"))
    except OSError:
        return []
    records = []
    for entry in entries:
        read = _read(entry)
        if read is None:
            continue
        k, info = read
        if info is not None and _owner_alive(entry, info, stale_after):
            continue
        if info is None and time.time() - _mtime(entry) < 60:
            continue  # being created right now, or torn: look again later
        hang_path = entry.with_suffix(".hang")
        if k >= 0 and info is not None:
            # startup time: torch is imported only when there is an entry to recover
            from fuzzdiff.record.format import case_from_json

            try:
                case = case_from_json(info["case"], where="journal.case").reseeded(k)
                check = info["check"]
            except Exception as e:  # noqa: BLE001 - a bad entry must not stop recovery
                warnings.warn(f"fuzzdiff: unreadable journal entry {entry} dropped: {e}", stacklevel=2)
            else:
                try:
                    records.append(_record(root, entry, info, k, check, case, _hang_report(hang_path), cause))
                except Exception as e:  # noqa: BLE001 - keep the entry for a later try
                    warnings.warn(f"fuzzdiff: could not record journal entry {entry}: {e}", stacklevel=2)
                    continue
        entry.unlink(missing_ok=True)
        hang_path.unlink(missing_ok=True)
    for stray in folder.glob("*.hang"):  # a hang file whose journal was closed normally
        if not stray.with_suffix(".json").exists() and time.time() - _mtime(stray) > 60:
            stray.unlink(missing_ok=True)
    return records


def forget(
    root: Path | str, *, pid: int | None = None, children_of: int | None = None, keep: bool = False
) -> list[Path]:
    """Remove the entries of processes stopped on purpose: those of ``pid``
    (this host's), or of the dead processes whose parent is ``children_of``
    (a live process of this host, e.g. the pytest controller whose xdist
    workers were killed when its session was interrupted). Their cases were
    interrupted, not crashed. Returns the entries removed (found, with ``keep``)."""
    folder = Path(root) / INFLIGHT
    if pid is not None:
        entries = [
            e for e in folder.glob(f"{_STEM_HOST}-{pid}-*.json") if e.stem.rsplit("-", 2)[:2] == [_STEM_HOST, str(pid)]
        ]
    elif children_of is not None:
        born = _start_time(children_of)
        entries = []
        for entry in folder.glob(f"{_STEM_HOST}-*.json"):
            read = _read(entry)
            info = read and read[1]
            if (
                info
                and info.get("host") == _HOST
                and info.get("parent") == children_of
                and info.get("parent_start") == born
                and not _owner_alive(entry, info, STALE_AFTER)
            ):
                entries.append(entry)
    else:
        raise TypeError("forget() needs pid= or children_of=")
    if keep:
        return entries
    for entry in entries:
        entry.unlink(missing_ok=True)
        entry.with_suffix(".hang").unlink(missing_ok=True)
    return entries


@dataclasses.dataclass(frozen=True)
class Inflight:
    """A dead process's journal entry as plain data: what a machine without the
    corpus sends to the one that writes the records (fuzzdiff.campaign.cluster)."""

    name: str  # the journal file's name
    variant: int  # the variant in flight, -1 when idle
    info: dict  # the entry's header and case JSON
    hang: str | None = None  # faulthandler's report when the hard timeout stopped the process


def take(root: Path | str, pid: int) -> list[Inflight]:
    """Read and remove the entries of ``pid`` (this host's), a process known to
    be dead (a campaign's worker on another machine): its in-flight examples,
    to be recorded elsewhere with ``record_inflight``; idle entries are dropped."""
    entries = []
    for entry in forget(root, pid=pid, keep=True):
        read = _read(entry)
        if read is not None and read[0] >= 0 and read[1] is not None:
            entries.append(Inflight(entry.name, read[0], read[1], _hang_report(entry.with_suffix(".hang"))))
        entry.unlink(missing_ok=True)
        entry.with_suffix(".hang").unlink(missing_ok=True)
    return entries


def record_inflight(root: Path | str, entry: Inflight, cause: str | None = None) -> Path:
    """The ``crash`` (or ``timeout``) record of a dead process's example in
    flight, written under ``root`` as ``recover`` writes it."""
    # startup time: torch is imported only when there is an entry to record
    from fuzzdiff.record.format import case_from_json

    case = case_from_json(entry.info["case"], where="journal.case").reseeded(entry.variant)
    return _record(root, Path(entry.name), entry.info, entry.variant, entry.info["check"], case, entry.hang, cause)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def _record(root, entry, info, k, check, case, hang, cause) -> Path:
    # startup time: torch is imported only when there is an entry to recover
    from fuzzdiff.record.files import write_record

    who = f"pid {info.get('pid')} on {info.get('host')}"
    errors = {"journal": entry.name, "variant": k, "pid": info.get("pid"), "host": info.get("host")}
    if hang is not None:
        frames = [line.strip() for line in hang.splitlines() if line.strip().startswith("File ")]
        errors["traceback"] = frames[:8]
        message = (
            f"the example did not finish within its {float(info.get('timeout') or 0):g}s timeout and could "
            f"not be interrupted; the hard timeout stopped the process ({who}, journal "
            f"{entry.name})" + (f"; innermost frame: {frames[0]}" if frames else "")
        )
        verdict = Verdict("timeout", message, errors)
    else:
        message = f"the process ({who}) died while running this case (journal {entry.name})"
        if cause:
            message += f": {cause}"
        verdict = Verdict("crash", message, errors)
    path, _ = write_record(root, check, case, verdict, "open")
    return path
