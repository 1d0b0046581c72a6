"""Throughput of the ``grad`` check against a bare torch loop doing the same work.

fuzzdiff side: ``fuzzdiff.fuzzing.fuzz("grad", op)`` with a fixed number of
examples per op (Hypothesis derandomized, no database), over a fixed mix of
catalog ops. Every example is a drawn Case (shapes, layout, aliasing, values,
probes), materialized and pushed through ``fuzzdiff.runner.run_check``.

bare side: the same ops, shapes drawn with ``torch.randint`` and values with
``torch.rand``, and per example the torch calls the grad check makes on a
contiguous unaliased case, neither more nor fewer: the forward pass,
``torch.autograd.grad`` with a random non-unit cotangent, the direction cast to
the input dtype, ``<J^T v, u>`` and its scale in one pass, the float64
finite-difference forward evaluations at ``x``, ``x +- eps u`` and ``x +- 2 eps u``
(one ``torch.add`` each), and the dot products with the cotangent widened once.
No Hypothesis, no Case, no layouts or junk memory, no copy of the inputs for the
reference, no confirmation logic.

The ratio fuzzdiff/bare is the framework's efficiency; the target is >= 0.5.

    python bench/throughput.py                      # 200 examples per op and side
    python bench/throughput.py --examples 500
    python bench/throughput.py --seconds 60         # repeat rounds for about a minute
    python bench/throughput.py --max-side 64        # larger tensors: torch dominates more
    python bench/throughput.py --profile out.prof   # cProfile the fuzzdiff side
    python bench/throughput.py --clock process      # CPU time: steadier on a shared machine
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter

import torch
from hypothesis import HealthCheck, settings

from hypothesis import given, strategies as st

from fuzzdiff.checks import get_check
from fuzzdiff.fuzzing import environ_config, example_structures, fuzz, settle_heap
from fuzzdiff.runner import case_strategy, run_check
from fuzzdiff.spec import parse_spec
from fuzzdiff.targets import UnknownTarget, get_target
from strategies.values import sampling_interval

# Preferred mix, in order; the first ``--ops`` that exist in the catalog and the
# bare loop can drive (all-tensor positional args, no strategy-valued kwargs) are used.
PREFERRED = ("exp", "log", "sqrt", "abs", "sin", "tanh", "sigmoid", "mul", "add",
             "matmul", "sum", "softmax", "cos", "atan")
EPS = 1e-6
F64 = torch.float64
SEED = 0


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
    return settings(max_examples=n, database=None, derandomize=True, deadline=None,
                    print_blob=False, suppress_health_check=list(HealthCheck))


def fuzzdiff_op(target, n: int, kinds: Counter, max_side: int | None = None) -> int:
    tally = fuzz("grad", target, settings=hyp_settings(n), max_side=max_side)
    kinds.update(tally.counts)
    return tally.examples


# -- bare side -------------------------------------------------------------------------

class BareShapes:
    """Shapes for a spec drawn with torch.randint: shared names, fixed ints, ``#``, groups."""

    def __init__(self, target, max_variadic: int = 2, max_side: int | None = None):
        self.args = parse_spec(target.spec)
        self.lo, self.hi = target.min_side, target.max_side if max_side is None else max_side
        self.max_variadic = max_variadic

    def _side(self, g) -> int:
        return int(torch.randint(self.lo, self.hi + 1, (), generator=g))

    def draw(self, g) -> list[tuple[int, ...]]:
        sizes, groups, out = {}, {}, []
        for arg in self.args:
            shape: list[int] = []
            for d in arg.dims:
                if d.kind == "fixed":
                    shape.append(d.size)
                elif d.variadic:
                    key = d.name if d.kind == "name" else object()
                    if key not in groups:
                        k = int(torch.randint(0, self.max_variadic + 1, (), generator=g))
                        groups[key] = tuple(self._side(g) for _ in range(k))
                    grp = groups[key]
                    if d.broadcast:
                        grp = tuple(s if torch.rand((), generator=g) < 0.5 else 1 for s in grp)
                    shape.extend(grp)
                elif d.kind == "anon":
                    shape.append(self._side(g))
                else:
                    if d.name not in sizes:
                        sizes[d.name] = self._side(g)
                    s = sizes[d.name]
                    if d.broadcast and torch.rand((), generator=g) < 0.5:
                        s = 1
                    shape.append(s)
            out.append(tuple(shape))
        return out


def _floating(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]


def _dot(a, b) -> float:
    """<a, b> on tensors already in float64, as fuzzdiff.directions.dot computes it."""
    return sum(float(torch.sum(x * y)) for x, y in zip(a, b) if x.numel())


def _absdot(a, b) -> float:
    """<|a|, |b|>, as fuzzdiff.directions.absdot computes it for reals."""
    return sum(float(torch.sum((x * y).abs())) for x, y in zip(a, b) if x.numel())


def _as(t, dtype):
    """``t`` in ``dtype``, without a call when it already is (as the check does)."""
    return t if t.dtype is dtype else t.to(dtype)


def bare_example(fn, shapes, intervals, dtype, g) -> float:
    """The grad check's torch calls for one example, on freshly drawn inputs:
    the same calls fuzzdiff.checks.grad makes on a contiguous, unaliased case,
    neither more nor fewer (one pass for <J^T v, u> and its scale, each probe
    one torch.normal call, a dtype conversion only where the dtype differs,
    perturbed points by one torch.add)."""
    xs = []
    for shape, (lo, hi) in zip(shapes, intervals):
        x = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)
        xs.append(_as(x, dtype).requires_grad_(True))
    # reverse: <J^T v, u>, with a random non-unit cotangent v and direction u
    outs = _floating(fn(*xs))
    vs = [_as(torch.normal(0.25, 1.5, o.shape, generator=g, dtype=torch.float64), o.dtype)
          for o in outs]
    pairs = [(o, v) for o, v in zip(outs, vs) if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], xs, [v for _, v in pairs], allow_unused=True)
    grads = [torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, xs)]
    us = [_as(torch.normal(0.25, 1.5, x.shape, generator=g, dtype=torch.float64), x.dtype)
          for x in xs]
    analytic = scale = 0.0
    for gr, u in zip(grads, us):
        if gr.numel():
            p = _as(gr, F64) * _as(u, F64)
            analytic += float(p.sum())
            scale += float(p.abs().sum())
    # finite differences in float64 at the same values
    x64 = [_as(x.detach(), F64) for x in xs]
    u64 = [_as(u, F64) for u in us]
    with torch.no_grad():
        outs64 = _floating(fn(*x64))

        def at(h):
            return _floating(fn(*[torch.add(x, u, alpha=h) for x, u in zip(x64, u64)]))

        d1 = [(p - m) / (2 * EPS) for p, m in zip(at(EPS), at(-EPS))]
        d2 = [(p - m) / (4 * EPS) for p, m in zip(at(2 * EPS), at(-2 * EPS))]
    v64 = [_as(v, F64) for v in vs]
    n1, n2 = _dot(v64, d1), _dot(v64, d2)
    noise = abs(n1 - n2) + 2.0**-52 / EPS * _absdot(v64, outs64)
    return analytic - n1 + 0.0 * (scale + noise)


class BareOp:
    """One op's bare loop: shapes, value intervals and dtypes resolved once."""

    def __init__(self, target, max_side: int | None = None):
        self.target, self.shaper = target, BareShapes(target, max_side=max_side)
        self.intervals = [target.sample.get(a.name)
                          or sampling_interval(target.domain.get(a.name, (None, None)))
                          for a in self.shaper.args]

    def run(self, n: int, g) -> int:
        dtypes = self.target.dtypes
        for _ in range(n):
            dtype = dtypes[int(torch.randint(0, len(dtypes), (), generator=g))]
            bare_example(self.target.fn, self.shaper.draw(g), self.intervals, dtype, g)
        return n


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
        @given(example_structures(case_strategy(check, target, max_side=max_side),
                                  environ_config().structures))
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
    return {"draw": len(drawn) / (t1 - t0), "run_check": len(drawn) * variants / (t2 - t1),
            "floor": count[0] / (t3 - t2), "variants": variants,
            "structures": len(drawn) / max(examples[0], 1)}


# -- driver ----------------------------------------------------------------------------

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def measure(targets, n: int, seconds: float, g, kinds: Counter, max_side: int | None = None,
            clock=time.perf_counter):
    """Alternate the two sides op by op, so that a change in machine load
    between the two measurements does not bias the ratio; repeat whole rounds
    until both sides together have run ``seconds`` (one round at minimum).
    Per op the bare side runs as many examples as the fuzzdiff side did
    (``n`` drawn structures times the value variants), so both sides of a
    pair take about as long and see the same load."""
    bare = [BareOp(t, max_side) for t in targets]
    f_done = b_done = rounds = 0
    f_time = b_time = 0.0
    while True:
        for target, b in zip(targets, bare):
            t0 = clock()
            done = fuzzdiff_op(target, n, kinds, max_side)
            t1 = clock()
            b_done += b.run(max(done, 1), g)
            t2 = clock()
            f_done += done
            f_time, b_time = f_time + (t1 - t0), b_time + (t2 - t1)
        rounds += 1
        if f_time + b_time >= seconds:
            return (f_done, f_time), (b_done, b_time), rounds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--examples", type=int, default=200, metavar="N",
                   help="examples per op per round, on each side (default: 200)")
    p.add_argument("--seconds", type=float, default=0.0, metavar="S",
                   help="repeat whole rounds (both sides, op by op, interleaved) until the "
                        "measurement has taken S seconds in all (default: 0, a single round)")
    p.add_argument("--ops", type=int, default=6, metavar="K",
                   help="number of catalog ops in the mix (default: 6)")
    p.add_argument("--targets", nargs="+", default=None, metavar="NAME",
                   help=f"explicit op names instead of the preferred list {PREFERRED}")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads for both sides (default: 1)")
    p.add_argument("--warmup", type=int, default=10, metavar="N",
                   help="untimed examples per op before measuring (default: 10)")
    p.add_argument("--max-side", type=int, default=None, metavar="K",
                   help="largest dim size on both sides (default: each target's own max_side); "
                        "larger tensors make torch's share of the work grow")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall: elapsed time (default); process: this process's CPU time, "
                        "steadier when other jobs share the cores")
    p.add_argument("--no-diagnostics", action="store_true",
                   help="skip the breakdown (draw only, run_check only, Hypothesis floor)")
    p.add_argument("--profile", metavar="FILE", default=None,
                   help="also cProfile one fuzzdiff round and write the stats to FILE")
    args = p.parse_args(argv)
    if args.examples < 1 or args.ops < 1 or args.seconds < 0:
        p.error("--examples and --ops must be positive, --seconds non-negative")

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
    kinds: Counter = Counter()
    # warm-up: imports, torch kernels, Hypothesis strategy caches
    clock = CLOCKS[args.clock]
    measure(targets, args.warmup, 0.0, g, Counter(), args.max_side, clock)
    (f_done, f_time), (b_done, b_time), rounds = measure(
        targets, args.examples, args.seconds, g, kinds, args.max_side, clock)
    f_rate, b_rate = f_done / f_time, b_done / b_time
    ratio = f_rate / b_rate

    print(f"ops: {', '.join(t.name for t in targets)}   torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), value variants {environ_config().variants}, "
          f"{args.clock} clock")
    print(f"fuzzdiff verdicts: {dict(sorted(kinds.items()))}")
    print()
    w = 28
    print(f"{'side':<{w}} {'examples':>9} {'rounds':>7} {'seconds':>9} {'examples/s':>11}")
    print("-" * (w + 40))
    print(f"{'fuzzdiff (grad check)':<{w}} {f_done:>9} {rounds:>7} {f_time:>9.2f} {f_rate:>11.1f}")
    print(f"{'bare torch loop':<{w}} {b_done:>9} {rounds:>7} {b_time:>9.2f} {b_rate:>11.1f}")
    print("-" * (w + 40))
    verdict = "meets" if ratio >= 0.5 else "BELOW"
    print(f"{'ratio fuzzdiff/bare':<{w}} {ratio:>39.3f}   ({verdict} the 0.5 target)")

    if not args.no_diagnostics:
        d = diagnostics(targets, args.examples, args.max_side, clock)
        k, m = d["variants"], d["structures"]
        us = lambda rate: 1e6 / rate  # noqa: E731
        print()
        print(f"where the fuzzdiff side's time goes (microseconds per example; {k} value "
              f"variants share one drawn case, {m:.2f} drawn cases share one Hypothesis example):")
        print(f"  {'bare torch loop':<58} {us(b_rate):>9.1f}")
        print(f"  {'fuzzdiff, all of it (as measured above)':<58} {us(f_rate):>9.1f}")
        print(f"  {'  run_check on pre-drawn variants':<58} {us(d['run_check']):>9.1f}")
        print(f"  {'  drawing a case (case_strategy), / variants':<58} {us(d['draw']) / k:>9.1f}")
        print(f"  {'    of which the Hypothesis floor (one integer), / runs':<58} "
              f"{us(d['floor']) / (k * m):>9.1f}")
        rest = us(f_rate) - us(d["run_check"]) - us(d["draw"]) / k
        print(f"  {'  the rest (variant loop, garbage collection, noise)':<58} {rest:>9.1f}")
        print(f"  {'best ratio if drawing were free (run_check/bare)':<58} "
              f"{d['run_check'] / b_rate:>9.3f}")

    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.runcall(lambda: [fuzzdiff_op(t, args.examples, Counter(), args.max_side) for t in targets])
        prof.dump_stats(args.profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0 if math.isfinite(ratio) else 1


if __name__ == "__main__":
    sys.exit(main())
