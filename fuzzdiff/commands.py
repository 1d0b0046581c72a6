"""The ``fuzzdiff`` command handlers (``cmd_*``) and their helpers, apart from fuzzdiff.cli
so that parsing arguments imports no torch: ``--help`` and usage errors answer at once."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from fuzzdiff import api, repro
from fuzzdiff.blame import Blame
from fuzzdiff.bug_report import bug_report
from fuzzdiff.campaign import BatchSize, case_options, round_one_order, run_campaign
from fuzzdiff.case import DTYPES
from fuzzdiff.checks import CHECKS, UnknownCheck, get_check
from fuzzdiff.cluster import ClusterError, connected, preflight, ray_pool
from fuzzdiff.config import ConfigError, FuzzConfig
from fuzzdiff.corpus import (
    STATUSES,
    CorpusError,
    default_root,
    find_record,
    iter_records,
    merge,
    read_record,
)
from fuzzdiff.corpus_causes import root_causes
from fuzzdiff.corpus_replay import NEWS, mark_outcome, outcome
from fuzzdiff.fuzzing import settle_heap
from fuzzdiff.journal import recover
from fuzzdiff.plan import plan
from fuzzdiff.report import pair_rows, write_report
from fuzzdiff.schedule import Shard
from fuzzdiff.script import ScriptError, standalone_script
from fuzzdiff.spec import SpecError
from fuzzdiff.targets import all_targets
from fuzzdiff.targets.opinfo import OpInfoError
from fuzzdiff.targets.opinfo import select as select_opinfo
from fuzzdiff.targets.opinfo_known import KNOWN as OPINFO_KNOWN  # the signatures alone: no op_db import
from fuzzdiff.targets.recipe import references
from fuzzdiff.targets.user import import_object, is_module_name, user_target
from fuzzdiff.vmap_fallbacks import fallback_report

__all__ = [
    "CorpusError",
    "UsageError",
    "cmd_check",
    "cmd_corpus_list",
    "cmd_corpus_merge",
    "cmd_corpus_promote",
    "cmd_corpus_show",
    "cmd_corpus_stats",
    "cmd_list",
    "cmd_repro",
    "cmd_run",
]


class UsageError(Exception):
    """Bad input from the command line: exit status 2, a message, no traceback."""


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [p for v in values for p in v.split(",") if p]


OPINFO = "opinfo"


def _config(**options) -> FuzzConfig:
    """The command's settings, resolved once: the defaults, then $FUZZDIFF_*,
    then its flags (those given). The one place a command reads the
    environment; everything it runs is handed the result."""
    try:
        return FuzzConfig.resolve(os.environ, **options)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _select_pairs(args, notes: list[str] | None = None):
    """The (target, check) pairs of ``--targets`` and ``--checks``. Without
    ``--targets``: the catalog and, when torch's OpInfo database imports, its
    targets (``notes`` gets why not)."""
    checks = _split(args.checks) or list(CHECKS)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise UsageError(f"unknown check(s) {', '.join(unknown)}; expected {', '.join(CHECKS)}")
    given = _split(args.targets)
    patterns = given or ["*"]
    targets = [
        t
        for t in all_targets()
        if any(fnmatch.fnmatchcase(t.name, p) or fnmatch.fnmatchcase(f"{t.family}/{t.name}", p) for p in patterns)
    ]
    opinfo = [p for p in patterns if p.startswith(OPINFO)] if given else [f"{OPINFO}/*"]
    if opinfo:  # built on demand: torch's op_db takes a while to import
        try:
            with warnings.catch_warnings():
                # building torch's test samples warns about deprecated ops it samples on purpose
                warnings.simplefilter("ignore")
                targets += select_opinfo(opinfo)
        except OpInfoError as e:
            if given:
                raise UsageError(str(e)) from None
            if notes is not None:
                notes.append(f"OpInfo targets left out: {e}")
    if not targets:
        raise UsageError(f"no target matches {', '.join(patterns)}; see 'fuzzdiff list'")
    return [(t, CHECKS[c]) for c in checks for t in targets if CHECKS[c].why_not(t) is None]


def _run_dtypes(args):
    """--dtypes as torch dtypes (None: every dtype a target takes)."""
    names = _split(args.dtypes)
    if not names:
        return None
    bad = [d for d in names if d not in DTYPES or not (DTYPES[d].is_floating_point or DTYPES[d].is_complex)]
    if bad:
        raise UsageError(
            f"--dtypes: unknown or non-floating dtype(s) {', '.join(bad)}; expected some of "
            + ", ".join(d for d, t in DTYPES.items() if t.is_floating_point or t.is_complex)
        )
    return [DTYPES[d] for d in names]


def _run_device(name: str | None, cluster: bool = False) -> str | None:
    """--device: cpu or cuda (cuda:N); cuda only where torch sees a GPU (with
    --ray, the cluster's GPUs: fuzzdiff.cluster checks there are some)."""
    if name is None:
        return None
    if name == "cpu":
        return name
    if name.split(":")[0] != "cuda":
        raise UsageError(f"--device {name!r}: expected cpu or cuda (cuda:N)")
    if cluster:
        return name
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {name}: no CUDA device is available to torch "
            f"{torch.__version__} (CUDA build: {torch.version.cuda or 'no'})"
        )
    try:
        torch.device(name)
        index = torch.device(name).index
    except RuntimeError as e:
        raise UsageError(f"--device {name!r}: {e}") from None
    if index is not None and index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    return name


RUN_COLUMNS = (
    ("batches", "batches"),
    ("examples", "examples"),
    ("passed", "pass"),
    ("failed", "fail"),
    ("unsupported", "unsupported"),
    ("inconclusive", "inconclusive"),
    ("crashed", "crashed"),
    ("known", "known"),
    ("new records", "new records"),
    ("PyTorch's", "pytorch's"),
    ("yours", "yours"),
)


def _run_table(campaign):
    covered, given = campaign.covered()
    table = Table(
        title=f"fuzzdiff run: {covered} of {given} pairs covered, {campaign.batches} batches "
        f"in {campaign.rounds} round(s), {campaign.seconds:.0f}s on {campaign.jobs} worker(s)"
    )
    table.add_column("check")
    table.add_column("coverage", justify="right")
    for title, _ in RUN_COLUMNS:
        table.add_column(title, justify="right")
    total: Counter[str] = Counter()
    for check, row in campaign.per_check().items():
        total.update(row)
        table.add_row(check, f"{row['targets']}/{row['applicable']}", *(str(row[k]) for _, k in RUN_COLUMNS))
    table.add_row(
        "all", f"{total['targets']}/{total['applicable']}", *(str(total[k]) for _, k in RUN_COLUMNS), style="bold"
    )
    return table


def _coverage_line(campaign) -> str:
    """Pairs started of pairs given: the catalog's, then OpInfo's."""
    done, given = campaign.covered()
    opinfo = campaign.covered(OPINFO)
    line = f"catalog {done - opinfo[0]}/{given - opinfo[1]}"
    return line + (f", opinfo {opinfo[0]}/{opinfo[1]}" if opinfo[1] else "")


class _Live:
    """The live display of ``fuzzdiff run``: the round, coverage per check,
    examples/s and failures so far, and what each worker runs."""

    def __init__(self, console, cluster: bool = False):
        self.console = console
        self.campaign = None
        self.started: float | None = None
        self.workers: dict[int, str] = {}
        self.failures = 0
        self.cluster = cluster  # and per node: its examples/s

    def on_start(self, slot, target, check):
        if self.started is None:
            self.started = time.monotonic()
        self.workers[slot] = "" if target is None else f"{check} {target}"

    def on_batch(self, campaign, pair, batch):
        self.campaign = campaign
        if batch.failed:
            self.failures += 1
            what = batch.error or batch.failure.verdict.message
            self.console.print(f"[red]FAIL[/red] {batch.check} {pair.target}: {what.splitlines()[0][:200]}")

    def __rich__(self):
        c = self.campaign
        if c is None:
            return Text("starting the workers...")
        seconds = max(time.monotonic() - (self.started or time.monotonic()), 1e-9)
        head = Text(
            f"round {c.rounds} | covered {_coverage_line(c)} | {c.examples / seconds:.0f} examples/s "
            f"| {c.batches} batches | {self.failures} failing pair(s) | {seconds:.0f}s"
        )
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        table.add_column("check")
        table.add_column("covered", justify="right")
        table.add_column("examples", justify="right")
        table.add_column("failed", justify="right")
        for check, row in c.per_check().items():
            table.add_row(
                check, f"{row['targets']}/{row['applicable']}", str(row["examples"]), str(row["fail"] + row["crashed"])
            )
        if self.cluster:  # hundreds of workers: their count, and each node's rate
            busy = sum(bool(w) for w in self.workers.values())
            lines = [Text(_nodes_line(c, seconds)), Text(f"  {busy} of {c.jobs} workers busy", style="dim")]
        else:
            lines = [Text(f"  worker {k}: {w}", style="dim") for k, w in sorted(self.workers.items()) if w]
        return Group(head, table, *lines)


def _nodes_line(campaign, seconds: float) -> str:
    """The node count and each node's examples/s (the cluster's share of the work)."""
    nodes = campaign.nodes
    each = ", ".join(f"{name} {n.examples / max(seconds, 1e-9):.0f}" for name, n in sorted(nodes.items()))
    return f"{len(nodes)} node(s), examples/s per node: {each}"


def _nodes_meta(campaign) -> dict:
    """The per-node breakdown of a --ray run's report."""
    seconds = max(campaign.seconds, 1e-9)
    return {
        name: {
            "workers": n.slots,
            "batches": n.batches,
            "examples": n.examples,
            "busy_seconds": round(n.seconds, 1),
            "examples_per_s": round(n.examples / seconds, 1),
        }
        for name, n in sorted(campaign.nodes.items())
    }


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def _stops_interrupt():
    """SIGTERM (a CI job cancelled, a cluster scheduler) and SIGHUP (the terminal
    gone) end the command as Ctrl-C does, where they would kill it on the spot:
    the examples in flight unwind and are forgotten (fuzzdiff.journal), not
    left behind to be recorded later as crashes. A signal already handled or
    ignored (nohup) is left as it is."""
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:
                installed[sig] = signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, before in installed.items():
            signal.signal(sig, before)


def cmd_run(args) -> int:
    if args.max_examples < 1:
        raise UsageError("--max-examples must be at least 1")
    if args.variants < 1:
        raise UsageError("--variants must be at least 1")
    if args.budget is not None and args.budget <= 0:
        raise UsageError("--budget must be positive")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    if args.batch_seconds is not None and args.batch_seconds <= 0:
        raise UsageError("--batch-seconds must be positive")
    try:
        shard = None if args.shard is None else Shard.parse(args.shard)
    except ValueError as e:
        raise UsageError(str(e)) from None
    config = _config(corpus=args.corpus, redis_url=args.db)
    corpus = default_root(config.corpus)
    config = replace(config, corpus=corpus)
    cluster = args.ray is not None
    if cluster:
        try:
            preflight(args.ray or None)  # before the targets are built (OpInfo's take seconds)
        except ClusterError as e:
            raise UsageError(str(e)) from None
    dtypes, device = _run_dtypes(args), _run_device(args.device, cluster)
    jobs = args.jobs or os.cpu_count() or 1
    console = Console(stderr=True)
    notes: list[str] = []
    if not args.targets:
        console.print("fuzzdiff run: building the targets (torch's OpInfo database takes seconds)...")
    pairs = round_one_order(_select_pairs(args, notes))
    if dtypes is not None:
        pairs = [(t, c) for t, c in pairs if case_options(t, c, dtypes) is not None]
        if not pairs:
            raise UsageError(f"no selected (target, check) pair takes {', '.join(_split(args.dtypes) or ())}")
    if shard is not None:
        pairs = shard.select(pairs, key=lambda p: f"{p[1].name}/{p[0].ref}")
    for path in recover(corpus):  # cases that killed an earlier run
        console.print(f"[red]recovered[/red] a case that killed an earlier run: {path}")
    idle = [c for c in _split(args.checks) or CHECKS if c not in {check.name for _, check in pairs}]
    if idle and pairs:
        console.print(
            "not run: "
            + "; ".join(f"{c} ({CHECKS[c].why_not(pairs[0][0]) or 'applies to no target selected'})" for c in idle)
        )
    for note in notes:
        console.print(note)
    families = Counter(OPINFO if t.family == OPINFO else "catalog" for t, _ in pairs)
    size = BatchSize(args.max_examples, 1, args.variants)
    seed = args.seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    budget_plan = plan(pairs, size, args.budget, jobs) if args.budget and pairs else None
    console.print(
        f"fuzzdiff run: {len(pairs)} (target, check) pairs ("
        + ", ".join(f"{k} {v}" for k, v in families.items())
        + "), "
        + (
            f"batches of {size.examples} examples (fewer for fixed shapes and compile)"
            if budget_plan is None
            else f"batches of at most {budget_plan.examples} examples"
        )
        + f" x {size.variants} variants, "
        + (f"{jobs} worker(s)" if not cluster else f"Ray {args.ray or '(a local instance)'}")
        + f", seed {seed}"
        + (f", budget {args.budget:g}s" if args.budget else "")
        + (f", {args.rounds} round(s)" if args.rounds else "")
        + (f", shard {shard.index}/{shard.count}" if shard else "")
        + (f", dtypes {' '.join(_split(args.dtypes) or ())}" if dtypes else "")
        + (f", device {device}" if device else "")
    )
    if budget_plan is not None:
        console.print(f"plan: {budget_plan.describe()}")
    # Interrupted, the campaign kills its busy workers and forgets their cases in flight.
    live = _Live(console, cluster)
    with contextlib.ExitStack() as stack:
        if cluster:
            try:
                stack.enter_context(connected(args.ray or None, cpus=jobs))
            except ClusterError as e:
                raise UsageError(str(e)) from None
        stack.enter_context(_stops_interrupt())
        display = stack.enter_context(
            Live(
                live,
                console=console,
                transient=True,
                refresh_per_second=2,
                redirect_stdout=cluster,  # Ray's notices (a worker died) print above the display, not through it
                redirect_stderr=False,
            )
        )
        live.console = display.console
        try:
            campaign = _campaign(args, config, pairs, live, size, seed, jobs, dtypes, device, cluster, budget_plan)
        except ClusterError as e:
            raise UsageError(str(e)) from None

    Console(width=max(Console().width, 140)).print(_run_table(campaign))
    console.print(
        f"coverage: {_coverage_line(campaign)}; {campaign.examples} examples, "
        f"{campaign.examples / max(campaign.seconds, 1e-9):.0f} examples/s"
    )
    if cluster:
        console.print(_nodes_line(campaign, campaign.seconds))
    if campaign.replaced:
        console.print(
            f"[yellow]replaced[/yellow] {len(campaign.replaced)} worker(s) whose process a batch disturbed, "
            f"first after {campaign.replaced[0][:300]}"
        )
    for note in campaign.retried:
        console.print(f"[yellow]ran again[/yellow] {note}")
    if campaign.lost:
        console.print(f"[red]the workers were lost[/red] before the campaign's end ({campaign.lost}): results so far")
    if campaign.skipped_for_budget:
        console.print(f"budget reached: {campaign.skipped_for_budget} pairs not started")
    cut = sum(r.cut for r in campaign.results)
    if cut:
        console.print(f"{cut} pairs had a batch stopped by its time limit before all its examples ran")
    for path in campaign.recovered:
        console.print(f"[red]crash record[/red] of a worker that died: {path}")
    for r in campaign.results:
        for known, n in r.tally.known.items():
            print(f"\nknown discrepancy, {r.check} {r.target}, {n} example(s): {known[:300]}")
    for r in campaign.failures:
        message = r.error or (r.failure.verdict.message if r.failure is not None else "")
        print(f"\n{r.check} {r.target}: {message}")
        if r.failure is not None:
            whose = Blame.from_json(r.failure.blame)
            if whose is not None:
                print(f"  whose: {whose.headline}: {whose.evidence}")
            if r.failure.elsewhere:
                print(f"  {r.failure.elsewhere}")
            print(f"  case: {json.dumps(r.failure.case.to_json(), sort_keys=True)}")
            if r.failure.record_path:
                state = "new record" if r.failure.record_created else "already recorded"
                print(f"  {state}: {r.failure.record_path}")
        for crash_record in r.crash_records:
            print(f"  new crash record: {crash_record}")
    _print_new_root_causes(campaign)
    if args.report:
        meta = {
            "budget": args.budget,
            "max_examples": args.max_examples,
            "variants": args.variants,
            "seed": seed,
            "rounds": campaign.rounds,
            "batches": campaign.batches,
            "jobs": jobs,
            "dtypes": _split(args.dtypes),
            "device": device,
            "shard": args.shard,
            "ray": args.ray,
            "seconds": round(campaign.seconds, 1),
            "skipped_for_budget": campaign.skipped_for_budget,
        }
        if cluster:
            meta["nodes"] = _nodes_meta(campaign)
        out = write_report(Path(args.report), pair_rows(campaign, pairs), meta=meta, title="fuzzdiff run")
        console.print(f"report: {out['html']}, {out['png']}, {out['results']}")
    return 1 if campaign.failures else 0


def _campaign(args, config, pairs, live, size, seed, jobs, dtypes, device, cluster, budget_plan=None):
    """The campaign of ``fuzzdiff run``: on this machine's cores, or on Ray.
    Its workers run at ``config``, the command's settings."""
    return run_campaign(
        pairs,
        config=config,
        size=size,
        budget=args.budget,
        rounds=args.rounds,
        seed=seed,
        jobs=args.jobs if cluster else jobs,
        dtypes=dtypes,
        device=device,
        batch_seconds=args.batch_seconds,
        database_url=config.redis_url or "",
        pool=ray_pool() if cluster else None,
        on_batch=live.on_batch,
        on_start=live.on_start,
        sizing=None if budget_plan is None else functools.partial(budget_plan.size, size),
    )


def cmd_list(args) -> int:
    targets = _listed_targets(args)
    console = Console(width=max(Console().width, 40 + 11 * len(CHECKS)))
    if not args.families:
        table = Table(title="targets x checks (+ applies, - does not, k known discrepancy)")
        table.add_column("family")
        table.add_column("target")
        for c in CHECKS:
            table.add_column(c, justify="center")
        for t in targets:
            marks = ["k" if c in t.known_checks() else "-" if CHECKS[c].why_not(t) else "+" for c in CHECKS]
            table.add_row(t.family, t.name, *marks)
        console.print(table)
    per_family = Table(title="targets per family, and how many of them each check applies to")
    per_family.add_column("family")
    per_family.add_column("targets", justify="right")
    for c in CHECKS:
        per_family.add_column(c, justify="right")
    families: dict[str, list] = {}
    for t in targets:
        families.setdefault(t.family, []).append(t)
    for family, members in sorted(families.items()):
        per_family.add_row(
            family, str(len(members)), *(str(sum(CHECKS[c].why_not(t) is None for t in members)) for c in CHECKS)
        )
    per_family.add_row(
        "all", str(len(targets)), *(str(sum(CHECKS[c].why_not(t) is None for t in targets)) for c in CHECKS)
    )
    console.print(per_family)
    if args.vmap_fallbacks:
        hits = {name: ops for name, ops in fallback_report(targets).items() if ops}
        console.print(f"vmap fallbacks (ops without a batching rule, run one example at a time): {len(hits)} targets")
        for name, ops in sorted(hits.items()):
            console.print(f"  {name}: {', '.join(ops)}")
    return 0


def _listed_targets(args):
    if args.opinfo:
        print("building the OpInfo targets (imports torch's op_db; a minute or two)...", file=sys.stderr)
    return all_targets(include_opinfo=args.opinfo)


def _domain(items: list[str] | None) -> dict:
    """``x=0:`` -> {"x": (0.0, None)}; ``y=-1:1`` -> {"y": (-1.0, 1.0)}."""
    out = {}
    for item in items or []:
        name, sep, interval = item.partition("=")
        low, colon, high = interval.partition(":")
        try:
            if not (sep and colon and name):
                raise ValueError
            out[name] = (float(low) if low else None, float(high) if high else None)
        except ValueError:
            raise UsageError(
                f"--domain {item!r}: expected NAME=LOW:HIGH with either end optional, e.g. x=0: or y=-1:1"
            ) from None
    return out


def cmd_check(args) -> int:
    settle_heap()  # the command's own process

    try:
        fn = import_object(args.target)
    except ValueError as e:
        raise UsageError(str(e)) from None
    dtypes = _split(args.dtypes) or ["float64", "float32"]
    unknown = [d for d in dtypes if d not in DTYPES or not DTYPES[d].is_floating_point and not DTYPES[d].is_complex]
    if unknown:
        raise UsageError(f"--dtypes: unknown or non-floating dtype(s) {', '.join(unknown)}")
    checks = _split(args.checks)
    sizes = None
    if args.sizes is not None:
        low, sep, high = args.sizes.partition(":")
        try:
            sizes = (int(low), int(high))
            if not sep:
                raise ValueError
        except ValueError:
            raise UsageError(f"--sizes {args.sizes!r}: expected MIN:MAX, e.g. 1:4") from None
    try:
        target = user_target(
            fn, args.spec, dtypes=[DTYPES[d] for d in dtypes], domain=_domain(args.domain), sizes=sizes
        )
        for name in checks or ():
            get_check(name)
    except (SpecError, UnknownCheck, TypeError, ValueError) as e:
        raise UsageError(f"{args.target}: {e}") from None
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError("--max-examples must be at least 1")
    if args.variants < 1:
        raise UsageError("--variants must be at least 1")
    if args.budget is not None and not args.budget > 0:
        raise UsageError("--budget must be positive (inf: no limit)")
    try:
        structured = api.hard_values(target.domain) if args.structured is None else tuple(args.structured)
        target = replace(target, structured=structured)
    except ValueError as e:  # an unknown point: Target names the valid ones
        raise UsageError(f"--structured: {e}") from None
    rtol, atol = _tolerance(args.rtol, "--rtol"), _tolerance(args.atol, "--atol")
    try:
        api.declared_tolerances(checks or list(CHECKS), rtol=rtol, atol=atol)
    except (UnknownCheck, ValueError) as e:
        raise UsageError(str(e)) from None
    with _stops_interrupt():
        report = api.check(
            target,
            checks=checks,
            max_examples=args.max_examples,
            budget=args.budget,
            seed=args.seed,
            corpus=_corpus_root(args),
            variants=args.variants,
            shrink_seconds=args.shrink_seconds,
            config=_config(),
            rtol=rtol,
            atol=atol,
        )
    print(report.summary(), end="")
    return 0 if report.ok else 1


def _tolerance(values: list[str] | None, option: str) -> float | dict[str, float] | None:
    """``--rtol 1e-6`` (every check) or ``--rtol grad=1e-6 forward=1e-5``."""
    if not values:
        return None
    try:
        if len(values) == 1 and "=" not in values[0]:
            return float(values[0])
        pairs = [v.split("=", 1) for v in values]
        if any(len(p) != 2 for p in pairs):
            raise ValueError
        return {name: float(number) for name, number in pairs}
    except ValueError:
        raise UsageError(f"{option} {' '.join(values)!r}: expected a number, or CHECK=NUMBER per check") from None


def _corpus_root(args) -> Path:
    """--corpus, else $FUZZDIFF_CORPUS, else ./corpus (the environment read only without --corpus)."""
    return Path(args.corpus) if args.corpus is not None else default_root(_config().corpus)


def _allowed_imports(args) -> list[str]:
    """--allow-import: module names, each also allowing its submodules."""
    names = args.allow_import or []
    bad = [n for n in names if not is_module_name(n)]
    if bad:
        raise UsageError(f"--allow-import {bad[0]!r}: expected a module name such as mypkg or mypkg.ops")
    return names


def cmd_repro(args) -> int:
    allowed = _allowed_imports(args)
    path = find_record(_corpus_root(args), args.record)
    record = repro.read(path)  # JSON only: nothing imported yet
    if args.script and not args.in_process and record.verdict.kind == "crash":
        return _script_in_child(path, args)
    for planned in repro.planned_imports(record, allowed):  # refused (exit 2) before anything is imported
        print(f"fuzzdiff: {planned}", file=sys.stderr)
    record, target = repro.load(record, trust_source=args.trust_source, allow_import=allowed)
    if args.script:
        try:
            print(
                standalone_script(
                    record.check, record.case, record.verdict, target=target, found_with=record.found_with
                ),
                end="",
            )
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
    return 1 if verdict.failed else 0


def cmd_report(args) -> int:
    allowed = _allowed_imports(args)
    record = repro.read(find_record(_corpus_root(args), args.record))  # JSON only: nothing imported yet
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


def _records(args):
    good, bad = [], []
    for path in iter_records(_corpus_root(args)):
        try:
            good.append(read_record(path))
        except CorpusError as e:
            bad.append(str(e))
    return good, bad


def cmd_corpus_list(args) -> int:
    records, bad = _records(args)
    table = Table(title=f"corpus {_corpus_root(args)}: {len(records)} records")
    for col in ("id", "status", "check", "target", "dtype", "verdict"):
        table.add_column(col)
    for r in records:
        message = r.verdict.message.splitlines()[0] if r.verdict.message else ""
        table.add_row(r.id, r.status, r.check, r.target, r.case.dtype, f"{r.verdict.kind}: {message[:80]}")
    console = Console(width=max(Console().width, 140))
    console.print(table)
    for e in bad:
        console.print(f"[red]unreadable[/red] {e}")
    return 2 if bad else 0


def cmd_corpus_show(args) -> int:
    record = read_record(find_record(_corpus_root(args), args.id))
    print(f"{record.path}")
    print(f"id:         {record.id}")
    print(f"status:     {record.status}")
    print(f"check:      {record.check}")
    print(f"target:     {record.target}")
    print(f"dtype:      {record.case.dtype} on {record.case.device}")
    print(f"verdict:    {record.verdict}")
    for key, value in sorted(record.verdict.errors.items()):
        if key != "traceback":
            print(f"            {key} = {value}")
    print("found with: " + ", ".join(f"{k} {v}" for k, v in (record.found_with or {}).items()))
    print("inputs:")
    for line in repro.describe(record.case):
        print(f"  {line}")
    if record.case.params:
        print(f"params:     {json.dumps(record.case.params, sort_keys=True)}")
    module = (record.definition or {}).get("module")
    if isinstance(module, dict):  # what replaying it builds, and imports
        call = {k: module.get(k) for k in ("class", "args", "kwargs")}
        print(f"module:     {json.dumps(call, sort_keys=True)}")
        print(f"imports:    {', '.join(references(module)) or 'torch only'}")
    print(f"replay:     fuzzdiff repro {record.path} [--script]")
    return 0


def cmd_corpus_stats(args) -> int:
    records, bad = _records(args)
    per_check: dict[str, Counter] = {}
    for r in records:
        per_check.setdefault(r.check, Counter())[r.status] += 1
        per_check[r.check]["targets:" + r.target] = 1
    table = Table(title=f"corpus {_corpus_root(args)}")
    table.add_column("check")
    for col in (*STATUSES, "records", "targets"):
        table.add_column(col, justify="right")
    for check, c in sorted(per_check.items()):
        table.add_row(
            check,
            *(str(c[s]) for s in STATUSES),
            str(sum(c[s] for s in STATUSES)),
            str(sum(1 for k in c if k.startswith("targets:"))),
        )
    table.add_row(
        "all",
        *(str(sum(c[s] for c in per_check.values())) for s in STATUSES),
        str(len(records)),
        str(len({r.target for r in records})),
    )
    console = Console(width=max(Console().width, 140))
    console.print(table)
    _print_root_causes(console, [r for r in records if r.status_on() == "open"])
    for e in bad:
        console.print(f"[red]unreadable[/red] {e}")
    return 2 if bad else 0


def _print_new_root_causes(campaign) -> None:
    """The campaign's new records grouped into root causes, a line each: one bug
    that many pairs or examples hit is one line, with its records."""
    paths = [r.failure.record_path for r in campaign.failures if r.failure is not None and r.failure.record_created]
    paths += [Path(p) for r in campaign.results for p in r.crash_records] + [Path(p) for p in campaign.recovered]
    records = []
    for path in dict.fromkeys(Path(p) for p in paths if p is not None):
        try:
            records.append(read_record(path))
        except CorpusError as e:
            print(f"unreadable new record: {e}", file=sys.stderr)
    if not records:
        return
    causes = root_causes(records, ())  # known signatures were matched as the campaign ran: these are new
    print(f"\nnew root causes: {len(causes)} ({len(records)} new records)")
    for c in causes:
        print(f"  {c.kind:<6} {c.name}  [{', '.join(r.id for r in c.records)}]")


def _print_root_causes(console: Console, records: list) -> None:
    """The open records' root causes (fuzzdiff.corpus_causes), the largest first."""
    known = [k for target in all_targets() for k in target.known] + [k for _, k in OPINFO_KNOWN]
    causes = root_causes(records, known)
    kinds = Counter(c.kind for c in causes)
    by_known = sum(1 for c in causes if c.known is not None)
    console.print(
        f"{len(causes)} root causes of {len(records)} open records ({by_known} by a known signature, "
        f"{len(causes) - by_known} by an automatic one): " + ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    )
    table = Table(show_header=True)
    for col in ("records", "kind", "root cause", "record ids"):
        table.add_column(col, justify="right" if col == "records" else "left")
    for c in causes:
        ids = ", ".join(r.id[:8] for r in c.records[:3]) + (" ..." if len(c.records) > 3 else "")
        table.add_row(str(len(c.records)), c.kind, ("known: " if c.known else "") + c.name, ids)
    console.print(table)


def cmd_corpus_promote(args) -> int:
    record = repro.read(find_record(_corpus_root(args), args.id))  # writing the test imports nothing
    folder = Path(args.to)
    folder.mkdir(parents=True, exist_ok=True)
    name, source = repro.regression_test(record, folder, xfail=args.xfail)
    path = folder / name
    if path.exists() and not args.force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    path.write_text(source)
    print(f"wrote {path}")
    if record.status == "open" and not args.xfail:
        print(
            "it fails until the bug is fixed; for an upstream bug you cannot fix, "
            "pass --xfail to make it a strict expected failure",
            file=sys.stderr,
        )
    return 0


def cmd_corpus_replay(args) -> int:
    """Each record replayed on this torch, a line each as it is done, then the counts."""
    records, bad = _records(args)
    if args.status:
        records = [r for r in records if r.status == args.status]
    allowed = _allowed_imports(args)
    print(f"replaying {len(records)} records of {_corpus_root(args)} on torch {torch.__version__}", flush=True)
    counts: Counter = Counter()
    for record in records:
        found = outcome(record, trust_source=args.trust_source, allow_import=allowed)
        counts[found.kind] += 1
        marked = mark_outcome(record, found) if args.mark else None
        detail = f"  ({found.detail})" if found.detail else ""
        note = f"  -> {marked}" if marked else ""
        print(f"{found.kind:<17} {record.check}/{record.target} {record.id}{detail[:200]}{note}", flush=True)
    print("; ".join(f"{n} {kind}" for kind, n in counts.most_common()) or "no records")
    for e in bad:
        print(f"unreadable: {e}", file=sys.stderr)
    return 2 if bad else 1 if any(counts[k] for k in NEWS) else 0


def cmd_corpus_merge(args) -> int:
    dest = _corpus_root(args)
    result = merge(args.sources, dest)
    print(f"merged into {dest}: {len(result.added)} new records, {len(result.present)} already present")
    for path, ours, theirs in result.status_differs:
        print(f"  {path}: status {ours!r} kept (a source says {theirs!r})")
    for message in result.unreadable:
        print(f"  skipped unreadable {message}", file=sys.stderr)
    return 2 if result.unreadable else 0
