"""Throughput of fuzzdiff's derivative checks against bare torch loops doing the same work.

For each check of ``--checks`` (grad, forward2, gradgrad, vmap, compile):

fuzzdiff side: ``fuzzdiff.search.fuzzing.fuzz(check, op)`` with a fixed number of
examples per op (Hypothesis derandomized, no database), over a fixed mix of
catalog ops. Every example is a drawn Case (shapes, layout, aliasing, values,
probes, the check's own draws), materialized and pushed through
``fuzzdiff.search.runner.run_check``. The compile check draws its backend from
aot_eager alone (``FuzzConfig.compile_backends``), the backend its bare loop
compiles with.

bare side: the same ops, shapes drawn with ``torch.randint`` and values with
``torch.rand``, and per example the torch calls the check makes on a
contiguous unaliased case, neither more nor fewer; each ``bare_<check>``
function of bench/bare_loops.py says which. For grad: the forward pass, ``torch.autograd.grad`` with a
random non-unit cotangent, the direction cast to the input dtype,
``<J^T v, u>`` and its scale in one pass, the float64 finite-difference forward
evaluations at ``x``, ``x +- eps u`` and ``x +- 2 eps u`` (one ``torch.add``
each), and the dot products with the cotangent widened once. No Hypothesis, no
Case, no layouts or junk memory, no copy of the inputs for the reference, no
confirmation logic.

The ratio fuzzdiff/bare is the framework's efficiency. grad is the headline
figure, with a target of >= 0.5 and a breakdown of where the fuzzdiff side's
time goes; the other checks' ratios are informational, and where a check
draws more kinds of work than its bare loop makes (vmap's compositions,
compile's transforms), lower for that too. An example of theirs costs 4 to 12
grad examples, so they run fewer (``--examples-costly``).

    python bench/throughput.py                      # grad: 200 examples per op and side; the others 10
    python bench/throughput.py --checks grad        # the grad check alone
    python bench/throughput.py --checks forward2 vmap --examples-costly 50
    python bench/throughput.py --examples 500
    python bench/throughput.py --seconds 60         # each check: repeat rounds for about a minute
    python bench/throughput.py --max-side 64        # larger tensors: torch dominates more
    python bench/throughput.py --profile out.prof   # cProfile the first check's fuzzdiff side
    python bench/throughput.py --clock process      # CPU time: steadier on a shared machine
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import torch
from bare_loops import BARE, COMPILE_BACKEND, BareOp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzdiff.api import environ_config
from fuzzdiff.checks import get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.search.fuzzing import example_structures, fuzz, settle_heap
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import UnknownTarget, get_target

# Preferred mix, in order; the first ``--ops`` that exist in the catalog and the
# bare loop can drive (all-tensor positional args, no strategy-valued kwargs) are used.
PREFERRED = (
    "exp",
    "log",
    "sqrt",
    "abs",
    "sin",
    "tanh",
    "sigmoid",
    "mul",
    "add",
    "matmul",
    "sum",
    "softmax",
    "cos",
    "atan",
)
SEED = 0
TARGET = 0.5  # the grad ratio's; the other checks' ratios are informational


# -- choosing the ops ------------------------------------------------------------------


def bare_supported(target) -> str | None:
    """None when the bare loop can run ``target`` exactly as the grad check does."""
    if target.kinds:
        return "has index/mask/no-grad arguments"
    if target.kwargs:
        return "has keyword arguments"
    if not target.functional:
        return "mutates its inputs"
    if getattr(target, "random", False):
        return "is random"
    if target.min_side > target.max_side:
        return "has no valid sizes"
    return None


def choose_ops(names, count: int):
    chosen, skipped = [], []
    for name in names:
        if len(chosen) == count:
            break
        try:
            target = get_target(name)
        except (UnknownTarget, ValueError):
            skipped.append((name, "not in the catalog"))
            continue
        why = bare_supported(target)
        if why:
            skipped.append((name, why))
            continue
        chosen.append(target)
    return chosen, skipped


# -- fuzzdiff side ----------------------------------------------------------------------


def hyp_settings(n: int) -> settings:
    return settings(
        max_examples=n,
        database=None,
        derandomize=True,
        deadline=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )


def fuzz_config(check: str) -> FuzzConfig:
    """The settings under $FUZZDIFF_*, with the compile check's backends narrowed
    to the one its bare loop compiles with, for a like-for-like figure."""
    if check != "compile":
        return environ_config()
    return replace(environ_config(), compile_backends=(COMPILE_BACKEND,))


def fuzzdiff_op(
    check: str, target, n: int, kinds: Counter, max_side: int | None = None, config: FuzzConfig | None = None
) -> int:
    tally = fuzz(check, target, replace(config, case_options={"max_side": max_side}), settings=hyp_settings(n))
    kinds.update(tally.counts)
    return tally.examples


# -- diagnostics: where the fuzzdiff side's time goes -------------------------------


def diagnostics(targets, n: int, max_side: int | None, clock=time.perf_counter) -> dict[str, float]:
    """Rates (per second) of: drawing cases only, as fuzz() draws them
    (fuzzing.example_structures; per structure); run_check only, on
    every value variant of those pre-drawn cases (per run); and Hypothesis
    itself with one integer per example and an empty test (its floor, per
    example), with the structures per example drawn on average."""
    check = get_check("grad")
    variants = environ_config().variants
    drawn: list = []
    t0 = clock()
    examples = [0]

    def collect(target):
        @hyp_settings(n)
        @given(example_structures(case_strategy(check, target, max_side=max_side), environ_config().structures))
        def test(cases):
            examples[0] += 1
            drawn.extend((target, case) for case in cases)

        test()

    for target in targets:
        collect(target)
    t1 = clock()
    for target, case in drawn:
        for k in range(variants):
            run_check(check, target, case.reseeded(k))
    t2 = clock()
    count = [0]

    @hyp_settings(n * len(targets))
    @given(st.integers(0, 2**32 - 1))
    def floor(x):
        count[0] += 1

    floor()
    t3 = clock()
    return {
        "draw": len(drawn) / (t1 - t0),
        "run_check": len(drawn) * variants / (t2 - t1),
        "floor": count[0] / (t3 - t2),
        "variants": variants,
        "structures": len(drawn) / max(examples[0], 1),
    }


# -- driver ----------------------------------------------------------------------------

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def measure(
    check: str, targets, n: int, seconds: float, g, kinds: Counter, max_side: int | None = None, clock=time.perf_counter
):
    """Alternate the two sides op by op, so that a change in machine load
    between the two measurements does not bias the ratio; repeat whole rounds
    until both sides together have run ``seconds`` (one round at minimum).
    Per op the bare side runs as many examples as the fuzzdiff side did
    (``n`` drawn structures times the value variants), so both sides of a
    pair take about as long and see the same load."""
    bare = [BareOp(t, BARE[check], max_side) for t in targets]
    config = fuzz_config(check)
    f_done = b_done = rounds = 0
    f_time = b_time = 0.0
    while True:
        for target, b in zip(targets, bare):
            t0 = clock()
            done = fuzzdiff_op(check, target, n, kinds, max_side, config)
            t1 = clock()
            b_done += b.run(max(done, 1), g)
            t2 = clock()
            f_done += done
            f_time, b_time = f_time + (t1 - t0), b_time + (t2 - t1)
        rounds += 1
        if f_time + b_time >= seconds:
            return (f_done, f_time), (b_done, b_time), rounds


@dataclass
class Measured:
    """One check's figures: the ops it ran on (and those it skipped, with
    why), examples and seconds on each side, whole rounds, and the fuzzdiff
    side's verdicts."""

    check: str
    targets: list
    skipped: list[tuple[str, str]]
    f_done: int = 0
    f_time: float = 0.0
    b_done: int = 0
    b_time: float = 0.0
    rounds: int = 0
    kinds: Counter = field(default_factory=Counter)

    @property
    def f_rate(self) -> float:
        return self.f_done / self.f_time if self.f_time else math.nan

    @property
    def b_rate(self) -> float:
        return self.b_done / self.b_time if self.b_time else math.nan

    @property
    def ratio(self) -> float:
        return self.f_rate / self.b_rate


def bench_check(check: str, targets, args, g, clock) -> Measured:
    """Warm up (imports, torch kernels, Hypothesis strategy caches, compiled
    graphs), then measure ``check`` on the ops it applies to (Check.why_not)."""
    m = Measured(check, [], [])
    for t in targets:
        why = get_check(check).why_not(t)
        if why:
            m.skipped.append((t.name, why))
        else:
            m.targets.append(t)
    if not m.targets:
        return m
    n, warmup = examples_for(check, args)
    if warmup:
        measure(check, m.targets, warmup, 0.0, g, Counter(), args.max_side, clock)
    (m.f_done, m.f_time), (m.b_done, m.b_time), m.rounds = measure(
        check, m.targets, n, args.seconds, g, m.kinds, args.max_side, clock
    )
    return m


def print_headline(m: Measured) -> None:
    """grad's figures, the headline: both sides in full, and the ratio against its target."""
    print(f"fuzzdiff verdicts: {dict(sorted(m.kinds.items()))}")
    print()
    w = 28
    print(f"{'side':<{w}} {'examples':>9} {'rounds':>7} {'seconds':>9} {'examples/s':>11}")
    print("-" * (w + 40))
    print(f"{'fuzzdiff (grad check)':<{w}} {m.f_done:>9} {m.rounds:>7} {m.f_time:>9.2f} {m.f_rate:>11.1f}")
    print(f"{'bare torch loop':<{w}} {m.b_done:>9} {m.rounds:>7} {m.b_time:>9.2f} {m.b_rate:>11.1f}")
    print("-" * (w + 40))
    verdict = "meets" if m.ratio >= TARGET else "BELOW"
    print(f"{'ratio fuzzdiff/bare':<{w}} {m.ratio:>39.3f}   ({verdict} the {TARGET} target)")


def print_diagnostics(d: dict[str, float], f_rate: float, b_rate: float) -> None:
    """Where grad's fuzzdiff side spends its time, per example (diagnostics())."""
    k, m = d["variants"], d["structures"]
    us = lambda rate: 1e6 / rate  # noqa: E731
    print()
    print(
        f"where the fuzzdiff side's time goes (microseconds per example; {k} value "
        f"variants share one drawn case, {m:.2f} drawn cases share one Hypothesis example):"
    )
    print(f"  {'bare torch loop':<58} {us(b_rate):>9.1f}")
    print(f"  {'fuzzdiff, all of it (as measured above)':<58} {us(f_rate):>9.1f}")
    print(f"  {'  run_check on pre-drawn variants':<58} {us(d['run_check']):>9.1f}")
    print(f"  {'  drawing a case (case_strategy), / variants':<58} {us(d['draw']) / k:>9.1f}")
    print(f"  {'    of which the Hypothesis floor (one integer), / runs':<58} {us(d['floor']) / (k * m):>9.1f}")
    rest = us(f_rate) - us(d["run_check"]) - us(d["draw"]) / k
    print(f"  {'  the rest (variant loop, garbage collection, noise)':<58} {rest:>9.1f}")
    print(f"  {'best ratio if drawing were free (run_check/bare)':<58} {d['run_check'] / b_rate:>9.3f}")


def print_checks(results: list[Measured]) -> None:
    """One line per check, both sides' rates and their ratio; only grad's has a
    target, the others are informational. Then each check's verdicts and skips."""
    w = 20
    print(f"{'check':<{w}} {'examples':>9} {'fuzzdiff examples/s':>20} {'bare examples/s':>16} {'ratio':>7}")
    print("-" * (w + 56))
    for m in results:
        name = f"compile ({COMPILE_BACKEND})" if m.check == "compile" else m.check
        if not m.targets:
            print(f"{name:<{w}}   (applies to none of the ops)")
            continue
        note = f"   ({'meets' if m.ratio >= TARGET else 'BELOW'} the {TARGET} target)" if m.check == "grad" else ""
        print(f"{name:<{w}} {m.f_done:>9} {m.f_rate:>20.1f} {m.b_rate:>16.1f} {m.ratio:>7.3f}{note}")
    print("-" * (w + 56))
    for m in results:
        if m.targets:
            print(f"{m.check} verdicts: {dict(sorted(m.kinds.items()))}")
        for name, why in m.skipped:
            print(f"  ({m.check} skips {name}: {why})")


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--checks",
        nargs="+",
        choices=tuple(BARE),
        default=list(BARE),
        metavar="CHECK",
        help=f"the checks to measure, in this order (default: {' '.join(BARE)}); "
        "grad's is the headline figure, with a target",
    )
    p.add_argument(
        "--examples",
        type=int,
        default=200,
        metavar="N",
        help="grad examples per op per round, on each side (default: 200)",
    )
    p.add_argument(
        "--examples-costly",
        type=int,
        default=10,
        metavar="N",
        help="examples per op per round, on each side, of the other checks (default: 10)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="repeat whole rounds (both sides, op by op, interleaved) until each check's "
        "measurement has taken S seconds in all (default: 0, a single round)",
    )
    p.add_argument("--ops", type=int, default=6, metavar="K", help="number of catalog ops in the mix (default: 6)")
    p.add_argument(
        "--targets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"explicit op names instead of the preferred list {PREFERRED}",
    )
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for both sides (default: 1)")
    p.add_argument(
        "--warmup",
        type=int,
        default=10,
        metavar="N",
        help="untimed examples per op before measuring grad, and compile, whose warm-up compiles its graphs "
        "(default: 10)",
    )
    p.add_argument(
        "--warmup-costly",
        type=int,
        default=2,
        metavar="N",
        help="untimed examples per op before measuring forward2, gradgrad and vmap (default: 2)",
    )
    p.add_argument(
        "--max-side",
        type=int,
        default=None,
        metavar="K",
        help="largest dim size on both sides (default: each target's own max_side); "
        "larger tensors make torch's share of the work grow",
    )
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time (default); process: this process's CPU time, steadier when other jobs share the cores",
    )
    p.add_argument(
        "--no-diagnostics",
        action="store_true",
        help="skip grad's breakdown (draw only, run_check only, Hypothesis floor)",
    )
    p.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="also cProfile one fuzzdiff round of the first of --checks and write the stats to FILE",
    )
    args = p.parse_args(argv)
    if args.examples < 1 or args.examples_costly < 1 or args.ops < 1 or args.seconds < 0:
        p.error("--examples, --examples-costly and --ops must be positive, --seconds non-negative")
    if args.warmup < 0 or args.warmup_costly < 0:
        p.error("--warmup and --warmup-costly must be non-negative")
    args.checks = list(dict.fromkeys(args.checks))
    return args


def examples_for(check: str, args) -> tuple[int, int]:
    """Examples per op: measured per round, and untimed before. grad's own
    counts; fewer for the costlier checks, and a short warm-up for those
    that compile nothing (one that compiles warms up in full: its warm-up
    compiles the graphs that its measurement would otherwise time)."""
    if check == "grad":
        return args.examples, args.warmup
    return args.examples_costly, args.warmup if get_check(check).compiles else args.warmup_costly


def describe_checks(args) -> str:
    """The header's second line: each check's examples per op, and compile's backend."""
    described = []
    for check in args.checks:
        backend = f", backend {COMPILE_BACKEND}" if check == "compile" else ""
        n, warmup = examples_for(check, args)
        described.append(f"{check} ({n} examples per op after {warmup} untimed{backend})")
    return "checks: " + ", ".join(described)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    settle_heap()  # as fuzzdiff's own processes do (the command line, campaign workers)
    names = args.targets or PREFERRED
    targets, skipped = choose_ops(names, len(names) if args.targets else args.ops)
    for name, why in skipped:
        print(f"  (skipping {name}: {why})", file=sys.stderr)
    if not targets:
        print("no usable ops in the catalog", file=sys.stderr)
        return 2

    g = torch.Generator().manual_seed(SEED)
    clock = CLOCKS[args.clock]
    print(
        f"ops: {', '.join(t.name for t in targets)}   torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), value variants {environ_config().variants}, "
        f"{args.clock} clock"
    )
    print(describe_checks(args), flush=True)
    results = []
    for check in args.checks:
        m = bench_check(check, targets, args, g, clock)
        results.append(m)
        if check == "grad" and m.targets:
            print_headline(m)
            if not args.no_diagnostics:
                print_diagnostics(diagnostics(m.targets, args.examples, args.max_side, clock), m.f_rate, m.b_rate)
            print(flush=True)
    print_checks(results)

    if args.profile:
        import cProfile
        import pstats

        first = results[0]
        n, config = examples_for(first.check, args)[0], fuzz_config(first.check)
        prof = cProfile.Profile()
        prof.runcall(lambda: [fuzzdiff_op(first.check, t, n, Counter(), args.max_side, config) for t in first.targets])
        prof.dump_stats(args.profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0 if all(math.isfinite(m.ratio) for m in results if m.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
