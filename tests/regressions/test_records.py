"""Every corpus record, replayed without Hypothesis, judged by its status.

- ``open``: a failure still present upstream; the replay must be the same
  failure (kind, exception type and message or identity: fuzzdiff.repro.mismatch),
  or match the signature of the known discrepancy that lists the record. A
  replay that passes means upstream fixed it (mark the record ``fixed``);
  any other outcome, an error included, fails the test and names the record;
- ``fixed``: must pass;
- ``expected``: intended behaviour; the replay must give the recorded verdict.
"""

import pytest
import torch

from fuzzdiff.corpus import default_root, iter_records, read_record
from fuzzdiff.repro import mismatch, replay
from fuzzdiff.targets import get_target

RECORDS = list(iter_records(default_root()))


def _evidenced(record, verdict) -> bool:
    """The recorded failure and its replay both match the signature of a known
    discrepancy that lists this record."""
    try:
        target = get_target(record.case.target)
    except Exception:  # noqa: BLE001 - an unknown target is the mismatch's to report
        return False
    return any(record.id in k.records and k.matches(record.check, record.case, record.verdict)
               and k.matches(record.check, record.case, verdict) for k in target.known)


@pytest.mark.parametrize("path", RECORDS, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"
                                               for p in RECORDS])
def test_record(path):
    record = read_record(path)
    if record.case.device == "cuda" and not torch.cuda.is_available():
        pytest.skip("a CUDA record; this machine has no GPU")
    verdict = replay(record)
    for _ in range(2):  # a kernel reading memory outside its input fails only some of the time
        # (and reads other garbage from call to call: the replay's ladder may call that nondeterminism)
        if record.status != "open" or verdict.kind not in ("pass", "inconclusive"):
            break
        verdict = replay(record)
    if record.status in ("open", "expected"):
        why = mismatch(record.verdict, verdict)
        if why is not None and record.status == "open" and _evidenced(record, verdict):
            why = None  # another face of the discrepancy the record evidences (one that reads
            # memory outside its input fails one identity or the other): its signature matches
        if why is not None and record.status == "open" and verdict.kind == "pass":
            why = "it no longer reproduces: fixed upstream? mark the record 'fixed'"
        assert why is None, f"{record.path}: {why}"
    else:
        # Gone means a clean pass: a discrepancy that only shows some of the
        # time (a kernel reading memory outside its input) replays inconclusive.
        assert verdict.kind == "pass", f"{record.path}: {verdict}"
