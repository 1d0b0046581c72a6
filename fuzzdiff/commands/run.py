"""``fuzzdiff run``: select the pairs, run the campaign with a live display, print and report what it found."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import random
import sys
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.live import Live

from fuzzdiff.campaign.cluster import ClusterError, connected, preflight, ray_pool
from fuzzdiff.campaign.heatmap import pair_rows, write_report
from fuzzdiff.campaign.loop import case_options, round_one_order, run_campaign
from fuzzdiff.campaign.plan import plan
from fuzzdiff.campaign.results import Campaign
from fuzzdiff.campaign.schedule import Shard
from fuzzdiff.campaign.worker import BatchSize
from fuzzdiff.checks import CHECKS
from fuzzdiff.commands.options import (
    UsageError,
    at_least_one,
    device_option,
    dtypes_option,
    positive,
    resolve_config,
    split,
)
from fuzzdiff.commands.run_display import LiveView, coverage_line, nodes_line, nodes_meta, run_table
from fuzzdiff.commands.signals import stops_interrupt
from fuzzdiff.corpus.causes import root_causes
from fuzzdiff.record.files import default_root, read_record
from fuzzdiff.record.format import CorpusError
from fuzzdiff.record.journal import recover
from fuzzdiff.search.blame import Blame
from fuzzdiff.search.layout_tour import TOUR
from fuzzdiff.targets import all_targets
from fuzzdiff.targets.moduleinfo.adapter import FAMILY as MODULEINFO
from fuzzdiff.targets.moduleinfo.adapter import PREFIX as MODULEINFO_PREFIX
from fuzzdiff.targets.moduleinfo.adapter import ModuleInfoError
from fuzzdiff.targets.moduleinfo.adapter import select as select_moduleinfo
from fuzzdiff.targets.opinfo.adapter import FAMILY as OPINFO
from fuzzdiff.targets.opinfo.adapter import OpInfoError
from fuzzdiff.targets.opinfo.adapter import select as select_opinfo

__all__ = ["cmd_run"]


def cmd_run(args) -> int:
    shard = _check_numbers(args)
    config = resolve_config(corpus=args.corpus, redis_url=args.db)
    corpus = default_root(config.corpus)
    config = replace(config, corpus=corpus)
    cluster = args.ray is not None
    if cluster:
        try:
            preflight(args.ray or None)  # before the targets are built (OpInfo's take seconds)
        except ClusterError as e:
            raise UsageError(str(e)) from None
    dtypes, device = dtypes_option(args.dtypes), device_option(args.device, cluster)
    jobs = args.jobs or os.cpu_count() or 1
    console = Console(stderr=True)
    pairs, notes = _pairs(args, console, dtypes, shard)
    for path in recover(corpus):  # cases that killed an earlier run
        console.print(f"[red]recovered[/red] a case that killed an earlier run: {path}")
    idle = [c for c in split(args.checks) or CHECKS if c not in {check.name for _, check in pairs}]
    if idle and pairs:
        console.print(
            "not run: "
            + "; ".join(f"{c} ({CHECKS[c].why_not(pairs[0][0]) or 'applies to no target selected'})" for c in idle)
        )
    for note in notes:
        console.print(note)
    families = Counter(t.family if t.family in (OPINFO, MODULEINFO) else "catalog" for t, _ in pairs)
    size = BatchSize(args.max_examples)
    seed = args.seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    config = replace(
        config,
        variants=args.variants,
        structures=1,  # one drawn case per example: a batch's examples are its cases
        seed=seed,
        jobs=args.jobs if cluster else jobs,
        budget=args.budget,
        rounds=args.rounds,
        batch_examples=args.max_examples,
        batch_seconds=args.batch_seconds,
        dtypes=None if dtypes is None else tuple(split(args.dtypes) or ()),
        device=device,
        database_url=config.redis_url or "",
    )
    budget_plan = plan(pairs, size, args.budget, jobs, tour=len(TOUR)) if args.budget and pairs else None
    console.print(
        f"fuzzdiff run: {len(pairs)} (target, check) pairs ("
        + ", ".join(f"{k} {v}" for k, v in families.items())
        + "), "
        + (
            f"batches of {size.examples} examples (fewer for fixed shapes and compile)"
            if budget_plan is None
            else f"batches of at most {budget_plan.examples} examples"
        )
        + f" x {config.variants} variants, "
        + (f"{jobs} worker(s)" if not cluster else f"Ray {args.ray or '(a local instance)'}")
        + f", seed {seed}"
        + (f", budget {args.budget:g}s" if args.budget else "")
        + (f", {args.rounds} round(s)" if args.rounds else "")
        + (f", shard {shard.index}/{shard.count}" if shard else "")
        + (f", dtypes {' '.join(split(args.dtypes) or ())}" if dtypes else "")
        + (f", device {device}" if device else "")
    )
    if budget_plan is not None:
        console.print(f"plan: {budget_plan.describe()}")
    campaign = _campaign(args, console, config, pairs, size, budget_plan)
    _print_campaign(console, campaign, cluster)
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
            "dtypes": split(args.dtypes),
            "device": device,
            "shard": args.shard,
            "ray": args.ray,
            "seconds": round(campaign.seconds, 1),
            "skipped_for_budget": campaign.skipped_for_budget,
            "narrowed_tours": campaign.narrowed_tours,
            "worker_peak_mb": {str(k): round(v, 1) for k, v in sorted(campaign.worker_peak_mb.items())},
        }
        if cluster:
            meta["nodes"] = nodes_meta(campaign)
        out = write_report(Path(args.report), pair_rows(campaign, pairs), meta=meta, title="fuzzdiff run")
        console.print(f"report: {out['html']}, {out['png']}, {out['results']}")
    return 1 if campaign.failures else 0


def _check_numbers(args) -> Shard | None:
    """The counts and seconds among the flags, each in its range; --shard parsed."""
    at_least_one(args.max_examples, "--max-examples")
    at_least_one(args.variants, "--variants")
    positive(args.budget, "--budget")
    at_least_one(args.jobs, "--jobs")
    at_least_one(args.rounds, "--rounds")
    positive(args.batch_seconds, "--batch-seconds")
    try:
        return None if args.shard is None else Shard.parse(args.shard)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _pairs(args, console: Console, dtypes, shard: Shard | None) -> tuple[list, list[str]]:
    """The pairs to run, in round 1's order: those of --targets and --checks
    that take a --dtypes dtype, of the --shard; and notes on what was left out."""
    notes: list[str] = []
    if not args.targets:
        console.print("fuzzdiff run: building the targets (torch's OpInfo database takes seconds)...")
    pairs = round_one_order(_select_pairs(args, notes))
    if dtypes is not None:
        pairs = [(t, c) for t, c in pairs if case_options(t, c, dtypes) is not None]
        if not pairs:
            raise UsageError(f"no selected (target, check) pair takes {', '.join(split(args.dtypes) or ())}")
    if shard is not None:
        pairs = shard.select(pairs, key=lambda p: f"{p[1].name}/{p[0].ref}")
    return pairs, notes


def _select_pairs(args, notes: list[str] | None = None):
    """The (target, check) pairs of ``--targets`` and ``--checks``. Without
    ``--targets``: the catalog and, when torch's OpInfo and ModuleInfo databases
    import, their targets (``notes`` gets why not)."""
    checks = split(args.checks) or list(CHECKS)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise UsageError(f"unknown check(s) {', '.join(unknown)}; expected {', '.join(CHECKS)}")
    given = split(args.targets)
    patterns = given or ["*"]
    targets = [
        t
        for t in all_targets()
        if any(fnmatch.fnmatchcase(t.name, p) or fnmatch.fnmatchcase(f"{t.family}/{t.name}", p) for p in patterns)
    ]
    opinfo = [p for p in patterns if p.startswith(OPINFO)] if given else [f"{OPINFO}/*"]
    modules = [p for p in patterns if p.startswith(MODULEINFO_PREFIX)] if given else [f"{MODULEINFO_PREFIX}*"]
    # built on demand: torch's op_db and module_db take a while to import
    for wanted, select, error, what in (
        (opinfo, select_opinfo, OpInfoError, "OpInfo"),
        (modules, select_moduleinfo, ModuleInfoError, "ModuleInfo"),
    ):
        if not wanted:
            continue
        try:
            with warnings.catch_warnings():
                # building torch's test samples warns about deprecated ops it samples on purpose
                warnings.simplefilter("ignore")
                targets += select(wanted)
        except error as e:
            if given:
                raise UsageError(str(e)) from None
            if notes is not None:
                notes.append(f"{what} targets left out: {e}")
    if not targets:
        raise UsageError(f"no target matches {', '.join(patterns)}; see 'fuzzdiff list'")
    return [(t, CHECKS[c]) for c in checks for t in targets if CHECKS[c].why_not(t) is None]


def _campaign(args, console, config, pairs, size, budget_plan=None) -> Campaign:
    """The campaign of ``fuzzdiff run``, on this machine's cores or on Ray, under
    its live display. Its workers run at ``config``, the command's settings.
    Interrupted, the campaign kills its busy workers and forgets their cases in flight."""
    cluster = args.ray is not None
    live = LiveView(console, cluster)
    with contextlib.ExitStack() as stack:
        if cluster:
            try:
                stack.enter_context(connected(args.ray or None, cpus=args.jobs or os.cpu_count() or 1))
            except ClusterError as e:
                raise UsageError(str(e)) from None
        stack.enter_context(stops_interrupt())
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
            return run_campaign(
                pairs,
                config,
                pool=ray_pool() if cluster else None,
                on_batch=live.on_batch,
                on_start=live.on_start,
                sizing=None if budget_plan is None else functools.partial(budget_plan.size, size),
            )
        except ClusterError as e:
            raise UsageError(str(e)) from None


def _print_campaign(console: Console, campaign: Campaign, cluster: bool) -> None:
    """Its table and coverage; workers replaced, batches run again, workers lost; then each known
    discrepancy hit, and each failure with whose it is, its case and its record."""
    Console(width=max(Console().width, 140)).print(run_table(campaign))
    console.print(
        f"coverage: {coverage_line(campaign)}; {campaign.examples} examples, "
        f"{campaign.examples / max(campaign.seconds, 1e-9):.0f} examples/s"
    )
    if cluster:
        console.print(nodes_line(campaign, campaign.seconds))
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
    if campaign.narrowed_tours:
        console.print(
            f"round 1 ran slower than planned: {campaign.narrowed_tours} first tours met fewer layout classes "
            "(the pairs took the classes in turn) so that every pair got its batch"
        )
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
