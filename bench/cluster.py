"""A campaign on Ray (``fuzzdiff run --ray``) against the local one: the driver's cost, and examples/s.

(a) The driver's own rate: batches per second that ``run_campaign`` with the
Ray pool dispatches and collects when the workers do nothing (``--noop-workers``
actors that take no core, each returning an empty batch result at once). The
whole loop is measured: the scheduler, one actor call per batch, collecting,
absorbing each result. A campaign of N nodes of C cores runs about N*C/s
batches per second of one-second batches, so this rate bounds the cluster
size before the driver becomes the bottleneck.

(b) End to end: the same pairs (the grad check on the catalog ops that
bench/throughput.py uses), seed and budget, run on this machine's cores
(the forkserver pool) and on a local Ray instance of as many CPUs; the ratio
of their examples/s is Ray's efficiency (the target is >= 0.8).

    python bench/cluster.py                         # 2 workers, 2 x 30 s per mode
    python bench/cluster.py --budget 60 --repeats 3 --per-call 1 2 4 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import PREFERRED, choose_ops  # noqa: E402 - the same op mix as the local throughput bench

from fuzzdiff.campaign.loop import run_campaign  # noqa: E402
from fuzzdiff.checks import get_check  # noqa: E402
from fuzzdiff.campaign.cluster import connected, ray_pool  # noqa: E402
from fuzzdiff.targets import all_targets  # noqa: E402
from fuzzdiff.config import FuzzConfig  # noqa: E402

# as `fuzzdiff run` runs a batch: 48 examples of one drawn case, each at two variants
CAMPAIGN = FuzzConfig(structures=1, variants=2, batch_examples=48)


def driver_rate(workers: int, rounds: int, pairs: int, per_call: int) -> tuple[int, float, float]:
    """(batches, seconds, the driver process's CPU seconds) of a campaign of no-op batches."""
    grad = get_check("grad")
    targets = [t for t in all_targets() if grad.why_not(t) is None][:pairs]
    cpu = time.process_time()
    campaign = run_campaign([(t, grad) for t in targets], replace(CAMPAIGN, jobs=workers, rounds=rounds, seed=0),
                            pool=ray_pool(noop=True, per_call=per_call))
    return campaign.batches, campaign.seconds, time.process_time() - cpu


def throughput(pairs, jobs: int, budget: float, seed: int, pool) -> tuple[int, float, float, float]:
    """(examples, seconds, examples/s, seconds outside the budget: the workers' start and stop) of one campaign."""
    wall = time.monotonic()
    campaign = run_campaign(pairs, replace(CAMPAIGN, jobs=jobs, budget=budget, seed=seed, grace=budget), pool=pool)
    wall = time.monotonic() - wall
    return campaign.examples, campaign.seconds, campaign.examples / campaign.seconds, wall - campaign.seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--jobs", type=int, default=2, help="workers in each mode, and the Ray instance's CPUs (default: 2)")
    p.add_argument("--budget", type=float, default=30.0, metavar="S", help="seconds per mode (default: 30)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ops", type=int, default=6, metavar="K", help="catalog ops in the mix (default: 6)")
    p.add_argument("--noop-workers", type=int, default=8, metavar="N", help="no-op actors for (a) (default: 8)")
    p.add_argument("--noop-pairs", type=int, default=500, metavar="N", help="pairs for (a) (default: 500)")
    p.add_argument("--rounds-noop", type=int, default=30, metavar="R", help="rounds for (a) (default: 30)")
    p.add_argument("--per-call", type=int, nargs="+", default=[1, 4], metavar="B",
                   help="batches per actor call in (a), each measured (default: 1 4)")
    p.add_argument("--repeats", type=int, default=2, metavar="N",
                   help="local and Ray campaigns of (b), alternating (default: 2 of each)")
    p.add_argument("--skip", choices=("driver", "throughput"), help="leave one measurement out")
    args = p.parse_args(argv)

    targets, _ = choose_ops(PREFERRED, args.ops)
    pairs = [(t, get_check("grad")) for t in targets]
    print(f"cpus {os.cpu_count()}, jobs {args.jobs}, ops {' '.join(t.name for t in targets)}", flush=True)
    with connected(None, cpus=args.jobs):
        if args.skip != "driver":
            for per_call in args.per_call:
                batches, seconds, cpu = driver_rate(args.noop_workers, args.rounds_noop, args.noop_pairs, per_call)
                print(f"driver, {per_call} batch(es) per call: {batches} no-op batches on {args.noop_workers} "
                      f"actors in {seconds:.2f}s = {batches / seconds:.0f} batches/s; the driver's CPU: "
                      f"{1e3 * cpu / batches:.2f} ms per batch = {batches / cpu:.0f} batches per CPU second",
                      flush=True)
            time.sleep(2)  # the no-op actors' exit
        if args.skip != "throughput":
            # Interleaved, local first: a shared machine's load drifts over minutes, and
            # both modes should see the same drift. The idle Ray instance stays up throughout.
            sums = {"local": [0, 0.0], "ray": [0, 0.0]}
            for _ in range(args.repeats):
                for mode, pool in (("local", None), ("ray", ray_pool())):
                    examples, seconds, rate, overhead = throughput(pairs, args.jobs, args.budget, args.seed, pool)
                    sums[mode][0] += examples
                    sums[mode][1] += seconds
                    print(f"{mode:5}: {examples} examples in {seconds:.1f}s = {rate:.0f} examples/s "
                          f"(+ {overhead:.1f}s starting and stopping the workers)", flush=True)
            local, ray = (sums[m][0] / sums[m][1] for m in ("local", "ray"))
            print(f"all: local {local:.0f}, ray {ray:.0f} examples/s; ray / local: {ray / local:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
