"""Move corpus records to the current record format and draw scheme.

    python -m fuzzdiff.commands.rerecord [--corpus DIR] [--all] [--dry-run] [RECORD ...]

Each record in a format before the current one is replayed under the current draws
(fuzzdiff.case.draws; a crash record in a child process, as ``fuzzdiff repro``
does) and rewritten in place (fuzzdiff.record.files.rewrite_record): the same id,
stored inputs and status, the replayed verdict. A ``fixed`` record must
replay as a pass and keeps the failure it records. A record whose replay is
no longer what it records (fuzzdiff.corpus.repro.mismatch) is left as it is and
listed, with the replay's verdict: another probe may legitimately change a
verdict, and what that means is for a person to decide. So is a CUDA record
on a machine without a GPU, unless ``--keep-unreplayed`` names it: a record
whose failure does not depend on the draws (a fault in the forward pass on
its stored inputs) then changes format only. Exit status 1 when any record
is listed.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from fuzzdiff.case.draws import SCHEME
from fuzzdiff.config import default_corpus
from fuzzdiff.corpus.repro import mismatch, replay
from fuzzdiff.record.files import iter_records, read_record, rewrite_record
from fuzzdiff.record.format import CorpusError

__all__ = ["rerecord", "main"]


def rerecord(
    path, *, dry_run: bool = False, trust_source: bool = False, keep_unreplayed: bool = False
) -> tuple[str, str]:
    """``(outcome, detail)`` for one record: "rewritten" (or "would rewrite"),
    "differs" or "not replayed" (left as they are)."""
    record = read_record(path)
    kept = record.case.device == "cuda" and not _cuda()
    if kept and not keep_unreplayed:
        return "not replayed", "a CUDA record, and this machine has no GPU"
    replayed = record.verdict if kept else replay(record, trust_source=trust_source)
    if record.status == "fixed":
        why = None if replayed.kind == "pass" else f"a fixed record replayed {replayed}"
    else:
        why = mismatch(record.verdict, replayed)
    if why is not None:
        return "differs", why
    # A fixed record keeps the failure it records; a crash replayed in a child
    # process says only how the child died, and the record says more.
    verdict = record.verdict if record.status == "fixed" or replayed.kind == "crash" else replayed
    if not dry_run:
        rewrite_record(record, verdict)
    outcome = "would rewrite" if dry_run else "rewritten"
    if kept:
        return outcome, "not replayed (no GPU here): its recorded verdict kept, its format changed"
    first = replayed.message.splitlines()[0][:160] if replayed.message else ""
    return outcome, f"replayed {replayed.kind}: {first}"


def _cuda() -> bool:
    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzzdiff.commands.rerecord", description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="*", metavar="RECORD", help="record paths (default: the whole corpus)")
    p.add_argument("--corpus", default=None, help="the corpus directory (default: $FUZZDIFF_CORPUS or ./corpus)")
    p.add_argument("--all", action="store_true", help=f"also records already drawn with {SCHEME}")
    p.add_argument("--dry-run", action="store_true", help="replay and report, write nothing")
    p.add_argument("--trust-source", action="store_true", help="run the function source a record carries")
    p.add_argument(
        "--keep-unreplayed",
        action="store_true",
        help="rewrite CUDA records without replaying them when there is no GPU (for "
        "failures that do not depend on the draws)",
    )
    args = p.parse_args(argv)
    paths = args.records or list(iter_records(args.corpus or default_corpus(os.environ)))
    differs = 0
    for path in paths:
        try:
            if not args.all and read_record(path).draws == SCHEME:
                continue
            outcome, detail = rerecord(
                path, dry_run=args.dry_run, trust_source=args.trust_source, keep_unreplayed=args.keep_unreplayed
            )
        except CorpusError as e:
            outcome, detail = "unreadable", str(e)
        differs += outcome in ("differs", "not replayed", "unreadable")
        print(f"{outcome:13s} {path}: {detail}", flush=True)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
