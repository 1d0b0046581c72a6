"""Every corpus record, replayed without Hypothesis, judged by its status on
this torch (fuzzdiff.corpus.replay, as ``fuzzdiff corpus replay`` does).

- ``open``: a failure still present upstream; the replay must be the same
  failure (kind, exception type and message or identity: fuzzdiff.corpus.repro.mismatch),
  or match the signature of the known discrepancy that lists the record. A
  replay that passes means upstream fixed it: ``fuzzdiff corpus replay --mark``
  marks it ``fixed`` in this release; any other outcome, an error included,
  fails the test and names the record;
- ``fixed``: must pass from its ``fixed_in`` release on, and fail as recorded
  before it (the torch CI pins may predate the fix);
- ``expected``: intended behaviour; the replay must give the recorded verdict.
"""

import os

import pytest

from fuzzdiff.config import default_corpus
from fuzzdiff.record.files import iter_records, read_record
from fuzzdiff.corpus.replay import outcome

RECORDS = list(iter_records(default_corpus(os.environ)))
GOOD = ("still failing", "still fixed", "as expected")


@pytest.mark.parametrize("path", RECORDS, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"
                                               for p in RECORDS])
def test_record(path):
    record = read_record(path)
    found = outcome(record)
    if found.kind == "not run":
        pytest.skip(found.detail)
    hint = "; mark it with 'fuzzdiff corpus replay --mark'" if found.kind == "fixed" else ""
    assert found.kind in GOOD, f"{record.path}: {found.kind}: {found.detail}{hint}"
