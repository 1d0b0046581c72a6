"""Add the stored sample (``opinfo_sample``) to a corpus's OpInfo records that lack it.

A one-off step for records written before records stored their sample's call:
each target is rebuilt from its sample index on the running torch, which must
be the release the records were found with (the committed corpus: 2.13.0);
records found with another release are left alone and listed. Every other
field of a record stays as it is (fuzzdiff.record.files.store_opinfo_sample).

    python bench/store_opinfo_samples.py [CORPUS]   # default: ./corpus

Exit status 1 when a record could not be given its sample, 0 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fuzzdiff.record.files import iter_records, read_record, store_opinfo_sample
from fuzzdiff.record.format import OPINFO


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "corpus")
    added = present = 0
    failed: list[str] = []
    for path in iter_records(root):
        record = read_record(path)
        if not record.target.startswith(OPINFO):
            continue
        try:
            if store_opinfo_sample(record):
                added += 1
                read_record(path)  # what was written reads back
            else:
                present += 1
        except (KeyError, ValueError) as e:  # OpInfoError, SampleError, another torch
            failed.append(f"{path}: {e}")
    print(f"{added} records given their sample, {present} had one, {len(failed)} could not be given one")
    for line in failed:
        print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
