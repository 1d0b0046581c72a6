"""Every corpus record, replayed without Hypothesis, judged by its status.

- ``open``: a failure still present upstream; a strict xfail, so that an
  upstream fix shows up as XPASS (then mark the record ``fixed``);
- ``fixed``: must pass;
- ``expected``: intended behaviour; the replay must give the recorded verdict.
"""

import pytest
import torch

from fuzzdiff.corpus import default_root, iter_records, read_record
from fuzzdiff.repro import replay

RECORDS = list(iter_records(default_root()))


@pytest.mark.parametrize("path", RECORDS, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"
                                               for p in RECORDS])
def test_record(path, request):
    record = read_record(path)
    if record.case.device == "cuda" and not torch.cuda.is_available():
        pytest.skip("a CUDA record; this machine has no GPU")
    if record.status == "open":
        request.applymarker(pytest.mark.xfail(
            strict=True, reason=f"open: {record.verdict.message.splitlines()[0][:160]}"))
    verdict = replay(record)
    if record.status == "expected":
        assert verdict.kind == record.verdict.kind, f"expected {record.verdict}, replayed {verdict}"
    else:
        # Gone means a clean pass: a discrepancy that only shows some of the
        # time (a kernel reading memory outside its input) replays inconclusive.
        assert verdict.kind == "pass", f"{record.path}: {verdict}"
