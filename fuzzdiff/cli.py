"""The ``fuzzdiff`` command (docs/pages/design.md, contract 5).

Exit status: 0 no failure, 1 failures found, 2 usage or input error.
This module only parses the command line; the handlers are in fuzzdiff.commands,
one module per group of subcommands.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser; each command's ``handler`` names its function in fuzzdiff.commands."""
    parser = argparse.ArgumentParser(prog="fuzzdiff", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="fuzz the catalog and OpInfo targets x checks within a budget",
        description="Fuzz (target, check) pairs in batches, round by round: every pair "
        "gets one batch before any gets a second, then batches go to the "
        "pairs whose runs show near-misses, inconclusive verdicts, new input "
        "features or time-outs (the score is in docs/pages/campaigns.md).",
    )
    run.add_argument("--checks", nargs="+", metavar="CHECK", help="checks to run (default: all)")
    run.add_argument(
        "--targets",
        nargs="+",
        metavar="PATTERN",
        help="glob patterns over target names or family/name; opinfo/* for OpInfo, modules/* for "
        "ModuleInfo and the catalog's modules (default: the catalog and, when torch's test databases "
        "import, OpInfo and ModuleInfo)",
    )
    run.add_argument(
        "--budget", type=float, metavar="SECONDS", help="stop starting new batches after this many seconds"
    )
    run.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="stop after N rounds (default: 1 without --budget, else until the budget)",
    )
    run.add_argument(
        "--max-examples",
        type=int,
        default=48,
        metavar="N",
        help="Hypothesis examples per batch, one drawn case each; an eighth of it for "
        "fixed-shape targets (OpInfo samples) and for compile (default: 48)",
    )
    run.add_argument(
        "--variants",
        type=int,
        default=2,
        metavar="N",
        help="value-and-probe variants each drawn case runs at (default: 2)",
    )
    run.add_argument(
        "--batch-seconds",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a batch's own time limit, so a slow pair cannot hold a worker (default: 10)",
    )
    run.add_argument(
        "--seed", type=int, help="make the allocation and every batch reproducible (default: a random seed, printed)"
    )
    run.add_argument(
        "--shard",
        metavar="I/N",
        help="run only the pairs of shard I of N (a hash of check and target: N machines "
        "with shards 1..N cover every pair exactly once)",
    )
    run.add_argument(
        "--db",
        metavar="REDIS_URL",
        default=None,
        help="share Hypothesis's example database through Redis beside ./.hypothesis "
        "(saved failures are tried first on every machine; default: $FUZZDIFF_REDIS_URL, else "
        "./.hypothesis alone, as with --db '')",
    )
    run.add_argument(
        "--corpus",
        metavar="DIR",
        default=None,
        help="write each shrunk failure as a record under DIR (default: $FUZZDIFF_CORPUS or ./corpus)",
    )
    run.add_argument(
        "--dtypes",
        nargs="+",
        metavar="DTYPE",
        help="only cases of these dtypes, e.g. float32 (default: each target's own)",
    )
    run.add_argument(
        "--device",
        metavar="DEVICE",
        help="materialize every case on cpu or cuda (default: cpu, and cuda cases too when a GPU is present)",
    )
    run.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: every core)")
    run.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the batches on the Ray cluster at ADDRESS (HOST:PORT, auto), or without one on a local "
        "Ray instance: one worker per CPU (--jobs at most); needs pip install 'fuzzdiff[cluster]'",
    )
    run.add_argument(
        "--report", metavar="DIR", help="write heatmap.html, heatmap.png and results.json into DIR at the end"
    )
    run.set_defaults(handler="cmd_run")

    lst = sub.add_parser("list", help="targets x checks that apply")
    lst.add_argument("--families", action="store_true", help="only the per-family summary")
    lst.add_argument(
        "--opinfo",
        action="store_true",
        help="include the targets built from torch's OpInfo and ModuleInfo databases (slow to build)",
    )
    lst.add_argument(
        "--vmap-fallbacks",
        action="store_true",
        help="also run one example per target under vmap and list the ops that fall "
        "back to a per-example loop (coverage, not failures)",
    )
    lst.set_defaults(handler="cmd_list")

    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--corpus", metavar="DIR", default=None, help="the corpus directory (default: $FUZZDIFF_CORPUS or ./corpus)"
    )

    chk = sub.add_parser("check", parents=[where], help="fuzz your own function, autograd.Function or custom op")
    chk.add_argument("target", metavar="MODULE:ATTR", help="e.g. mypkg.ops:MyFn.apply")
    chk.add_argument(
        "--spec", help='shape spec, e.g. "x: *b n m, w: m k" (default: the function\'s jaxtyping annotations)'
    )
    chk.add_argument(
        "--domain",
        nargs="+",
        metavar="NAME=LOW:HIGH",
        help="value interval per argument, either end optional: x=0: y=-1:1",
    )
    chk.add_argument("--checks", nargs="+", metavar="CHECK", help="checks to run (default: all that apply)")
    chk.add_argument("--dtypes", nargs="+", metavar="DTYPE", help="default: float64 float32")
    chk.add_argument(
        "--max-examples",
        type=int,
        metavar="N",
        help="drawn cases per check (default: 100); a check stops at its first confirmed failure",
    )
    chk.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="the run's time, shared by the checks by their cost (default: 30, or none with --max-examples; inf: none)",
    )
    chk.add_argument(
        "--structured",
        nargs="*",
        metavar="POINT",
        help="the structured points drawn (zeros ties identity diagonal repeated_singular large offset overflow "
        "all_zero all_equal; "
        "default: every one the --domain holds; none: --structured with no names)",
    )
    chk.add_argument(
        "--variants",
        type=int,
        default=2,
        metavar="N",
        help="value-and-probe variants each drawn case runs at (default: 2)",
    )
    chk.add_argument(
        "--sizes", metavar="MIN:MAX", help="the range of every drawn dim (default 0:4); a spec's n>=1 bounds one name"
    )
    chk.add_argument(
        "--shrink-seconds",
        type=float,
        default=10.0,
        metavar="S",
        help="stop shrinking a failure after S seconds; the report says so (default: 10)",
    )
    for which, default in (("rtol", "1e-7 in float64, 2e-4 in float32"), ("atol", "1e-10 in float64, 1e-5 in float32")):
        chk.add_argument(
            f"--{which}",
            nargs="+",
            metavar="[CHECK=]VALUE",
            help=f"the {which} your function is accurate to, for every check or per check (e.g. grad=1e-6); "
            f"the larger of it and the dtype's default applies ({default})",
        )
    chk.add_argument("--seed", type=int, help="make the run reproducible")
    chk.set_defaults(handler="cmd_check")

    repro = sub.add_parser("repro", parents=[where], help="replay a corpus record without Hypothesis")
    repro.add_argument("record", metavar="RECORD", help="a record's path, or its id (or id prefix)")
    repro.add_argument(
        "--script",
        action="store_true",
        help="print a standalone torch-only script that reproduces it (for a crash record, written by a child process)",
    )
    repro.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    repro.add_argument(
        "--trust-source",
        action="store_true",
        help="run the function source a record carries (a lambda, a local or a "
        "__main__ function); read it first with 'fuzzdiff corpus show'",
    )
    repro.add_argument(
        "--allow-import",
        action="append",
        metavar="MODULE",
        help="import MODULE (and its submodules) to rebuild a record's user target "
        "although it is not the project's code; repeatable (default: only modules "
        "whose files are under the working directory, outside installed packages)",
    )
    repro.set_defaults(handler="cmd_repro")

    report = sub.add_parser(
        "report",
        parents=[where],
        help="a corpus record as an upstream-ready bug report in Markdown",
        description="Write the record's bug report: title and summary, the torch-only script and what it "
        "prints here, expected against actual and how it was confirmed, silent, loud or crash, the versions, "
        "and the upstream issues its known discrepancy cites.",
    )
    report.add_argument("record", metavar="RECORD", help="a record's path, or its id (or a unique prefix)")
    report.add_argument("--no-run", action="store_true", help="leave out the script's output (do not run it)")
    report.add_argument("--trust-source", action="store_true", help="as for fuzzdiff repro")
    report.add_argument("--allow-import", action="append", metavar="MODULE", help="as for fuzzdiff repro")
    report.set_defaults(handler="cmd_report")

    corpus = sub.add_parser("corpus", help="list, show, count and promote corpus records")
    csub = corpus.add_subparsers(dest="action")
    corpus.set_defaults(handler="cmd_corpus_list", corpus=None)
    csub.add_parser("list", parents=[where], help="every record, one line each").set_defaults(handler="cmd_corpus_list")
    show = csub.add_parser("show", parents=[where], help="one record in full")
    show.add_argument("id", metavar="ID", help="a record id (or unique prefix) or path")
    show.set_defaults(handler="cmd_corpus_show")
    csub.add_parser("stats", parents=[where], help="records per check and status").set_defaults(
        handler="cmd_corpus_stats"
    )
    promote = csub.add_parser("promote", parents=[where], help="write a pytest regression test that replays a record")
    promote.add_argument("id", metavar="ID", help="a record id (or unique prefix) or path")
    promote.add_argument(
        "--to", metavar="DIR", default="tests/regressions", help="where to write the test (default: tests/regressions)"
    )
    promote.add_argument("--xfail", action="store_true", help="a strict expected failure (an open upstream bug)")
    promote.add_argument("--force", action="store_true", help="overwrite an existing test file")
    promote.set_defaults(handler="cmd_corpus_promote")
    again = csub.add_parser(
        "replay",
        parents=[where],
        help="replay every record on this torch: still failing, fixed, changed, or cannot be rebuilt",
    )
    again.add_argument(
        "--status", choices=("open", "fixed", "expected"), help="only the records of this status (default: all)"
    )
    again.add_argument(
        "--mark",
        action="store_true",
        help="write what the replay shows: a record fixed here becomes 'fixed' with this release as "
        "its fixed_in, one fixed earlier that fails again becomes 'open'",
    )
    again.add_argument("--trust-source", action="store_true", help="as for fuzzdiff repro")
    again.add_argument("--allow-import", action="append", metavar="MODULE", help="as for fuzzdiff repro")
    again.set_defaults(handler="cmd_corpus_replay")
    merge = csub.add_parser(
        "merge", parents=[where], help="copy the records of corpora from other machines into this one"
    )
    merge.add_argument("sources", nargs="+", metavar="DIR", help="corpus directories to merge in")
    merge.set_defaults(handler="cmd_corpus_merge")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # Startup time: the handlers import torch (seconds); imported here, once the
        # arguments parse, `fuzzdiff --help` and usage errors answer without it.
        from fuzzdiff import commands
        from fuzzdiff.commands.options import UsageError
        from fuzzdiff.record.format import CorpusError

        try:
            return getattr(commands, args.handler)(args)
        except (UsageError, CorpusError) as e:
            print(f"fuzzdiff: error: {e}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("fuzzdiff: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
