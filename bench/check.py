"""Time to answer of ``fuzzdiff.check`` at its defaults, as a user's unit test calls it.

Two figures:

- a cheap elementwise function (``torch.sin`` behind a plain Python function):
  the wall time of ``fuzzdiff.check(fn, "x: *b n")`` over every check that
  applies, and over every check but ``compile``;
- the self-test zoo (tests/selftest/zoo.py): for each planted bug,
  ``fuzzdiff.check(bug, spec, checks=(its check,))`` until it reports the
  bug, shrunk; the median and the largest time, and whether each was found.
  With ``--twins`` also each correct twin, which must pass.

What localizing costs: each failure blamed on the code is localized to the
torch op, the code's own rule or the composition (fuzzdiff.search.localize);
the zoo's run prints the seconds that took per confirmed failure (median and
largest) and the levels found, and ``--localize`` runs only a few plain-torch
functions whose failures are PyTorch's ops, a user's rule and a composition.

What isolation costs (``--isolation``): every failure is rerun in a fresh
process before it is reported (fuzzdiff.search.fresh), which costs a Python start,
torch's import and the rerun, once per ``fuzzdiff.check`` call that fails,
and a rerun per further failure. The zoo's bugs are timed with
``isolate=True`` (the default) and ``isolate=False``, pair by pair.

    python bench/check.py                 # both
    python bench/check.py --no-zoo        # the cheap function only
    python bench/check.py --isolation     # the zoo, with and without the fresh rerun
    python bench/check.py --twins --as-functions   # the zoo as users' functions, at the hard values
    python bench/check.py --localize      # localizing, on plain-torch functions
    python bench/check.py --functions entries.py   # your functions: ENTRIES = [(fn, spec, options), ...]

Each run is in this process, after one untimed warm-up call (torch's and
Hypothesis's first-call costs are paid once per test session, too), in a
fresh working directory, so no example database tries earlier failures first.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import fuzzdiff
from fuzzdiff.checks import CHECKS
from fuzzdiff.search.localize import TIMES

ROOT = Path(__file__).resolve().parent.parent


def cheap(x):
    return torch.sin(x) * 2.0


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def localized(fn, *args, **kwargs):
    """``fn``'s report, and the seconds localizing took in it (None where nothing was localized)."""
    before = len(TIMES)  # a bounded deque: read before it could wrap
    report = fn(*args, **kwargs)
    spent = list(TIMES)[before:] if len(TIMES) > before else []
    return report, (sum(spent) if spent else None)


def levels_line(levels: list[str]) -> str:
    counts = {level: levels.count(level) for level in dict.fromkeys(levels)}
    return ", ".join(f"{level} {n}" for level, n in counts.items())


def localizing(seconds: list[float], levels: list[str], what: str) -> None:
    if not seconds:
        print(f"localizing: no failure of {what} was localized")
        return
    print(f"localizing, per confirmed failure of {what}: median {statistics.median(seconds):.2f} s, "
          f"largest {max(seconds):.2f} s over {len(seconds)} failures ({levels_line(levels)})")


def gamma_sample(a):
    torch.manual_seed(0)
    return torch.distributions.Gamma(a, torch.ones_like(a)).rsample()


def beta_sample(a, b):
    torch.manual_seed(0)
    return torch.distributions.Beta(a, b).rsample()


def halve_first(x):
    v = x * 1
    v[..., 0] /= 2
    return v


def every_other(x):
    out = torch.zeros_like(x)
    out[..., ::2] += x[..., ::2]
    return out


def precision_from_factor(l):
    return torch.cholesky_inverse(torch.tril(l, -1) + 2 * torch.eye(l.shape[-1], dtype=l.dtype)) * 3


class WrongSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.saved_tensors[0].cos() * 1.5


def with_wrong_rule(x):
    return WrongSin.apply(x * 2).exp()


def cut_graph(x):
    return x.detach() * x


POSITIVE = {"a": (0.5, 3.0), "b": (0.5, 3.0)}
# plain-torch functions whose failures are an op's, a rule's (torch's or the user's) and a composition's
PATTERNS = (
    (gamma_sample, "a: n>=1", "grad", {"domain": {"a": POSITIVE["a"]}}),
    (beta_sample, "a: n>=1, b: n>=1", "grad", {"domain": POSITIVE}),
    (halve_first, "x: n>=1", "forward2", {}),
    (every_other, "x: n>=1", "forward", {}),
    (precision_from_factor, "l: n>=2 n", "forward", {}),
    (with_wrong_rule, "x: n", "grad", {}),
    (cut_graph, "x: n", "grad", {}),
)


def patterns(seed: int | None) -> int:
    """Each plain-torch pattern at check's defaults: where its failure was localized, and what that cost."""
    seconds, levels = [], []
    for fn, spec, check, options in PATTERNS:
        (report, spent), total = timed(localized, fuzzdiff.check, fn, spec, checks=(check,), seed=seed,
                                       progress=False, dtypes=(torch.float64,), **options)
        whose = report.failures[0].blame if report.failures else None
        where = "no failure" if whose is None else (whose.where or f"not localized ({whose.evidence[-80:]})")
        print(f"  {total:6.1f} s  localizing {spent or 0:5.2f} s  {check:9s} {fn.__name__}: {where}")
        if spent is not None and whose is not None:
            seconds.append(spent)
            levels.append(whose.level or "not localized")
    localizing(seconds, levels, "the plain-torch patterns")
    return 0


def functions(path: str, seed: int | None) -> int:
    """Each ``(fn, spec, options)`` of the ``ENTRIES`` list that the file at
    ``path`` defines (a trial's third-party functions, as a user checks
    them), at check's defaults: the time to answer, and what localizing cost
    per confirmed failure (a report's localizing time over its failures)."""
    folder = str(Path(path).resolve().parent)
    sys.path.insert(0, folder)  # the file's neighbours, and the fresh process's imports of its functions
    loaded = importlib.util.spec_from_file_location(Path(path).stem, path)
    if loaded is None or loaded.loader is None:
        raise SystemExit(f"--functions: cannot import {path}")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module
    loaded.loader.exec_module(module)
    seconds, levels, totals = [], [], []
    for fn, spec, options in module.ENTRIES:
        (report, spent), total = timed(localized, fuzzdiff.check, fn, spec, seed=seed, progress=False, **options)
        totals.append(total)
        failures = report.failures
        if spent is not None and failures:
            seconds += [spent / len(failures)] * len(failures)
            levels += [f.blame.level or "not localized" if f.blame else "no blame" for f in failures]
        print(f"  {total:6.1f} s (budget {report.budget or 'none'})  {len(failures)} failure(s)  "
              f"localizing {spent or 0:5.2f} s  {getattr(fn, '__name__', fn)}")
    print(f"time to answer: median {statistics.median(totals):.1f} s, largest {max(totals):.1f} s")
    localizing(seconds, levels, Path(path).name)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-zoo", action="store_true", help="only the cheap function")
    parser.add_argument("--twins", action="store_true", help="also check every correct twin")
    parser.add_argument("--seed", type=int, default=None, help="a fixed seed (default: random runs)")
    parser.add_argument("--isolation", action="store_true", help="time the zoo with and without the fresh rerun")
    parser.add_argument("--localize", action="store_true", help="only localizing, on plain-torch functions")
    parser.add_argument("--functions", metavar="FILE", help="only the ENTRIES = [(fn, spec, options)] FILE defines")
    parser.add_argument(
        "--as-functions",
        action="store_true",
        help="check each zoo bug (and twin) as a user's function: its function, spec, domain and kwargs at "
        "check's defaults (the hard values, the time budget), not its Target",
    )
    args = parser.parse_args(argv)
    if args.functions:
        args.functions = str(Path(args.functions).resolve())  # before the move to a fresh directory
    torch.set_num_threads(1)
    # A fresh directory: no example database from an earlier run tries its failures first.
    os.chdir(tempfile.mkdtemp(prefix="fuzzdiff-bench-check-"))

    fuzzdiff.check(cheap, "x: *b n", checks=("grad",), max_examples=5, progress=False)  # warm-up
    if args.localize:
        return patterns(args.seed)
    if args.functions:
        return functions(args.functions, args.seed)
    report, total = timed(fuzzdiff.check, cheap, "x: *b n", seed=args.seed, progress=False)
    eager = sum(s for name, s in report.seconds.items() if name != "compile")
    print(f"cheap elementwise function, defaults: {total:.1f} s over {len(report.tallies)} checks, "
          f"{eager:.1f} s without compile; ok={report.ok}")
    for name, seconds in report.seconds.items():
        print(f"  {name:11s} {seconds:6.2f} s  {report.row(name)['examples']} runs")
    if args.no_zoo:
        return 0

    # the zoo is the tests' package, run from a fresh working directory: the repository
    # root on sys.path imports it by the name its records store (tests.selftest.zoo:TARGETS.x),
    # here and in the fresh process that reruns a failure (given this sys.path)
    sys.path.insert(0, str(ROOT))
    from tests.selftest.zoo import ZOO

    if args.isolation:
        return isolation(ZOO, args.seed)
    def subject(target):
        if not args.as_functions:
            return (target,), {}
        options = {"domain": dict(target.domain), "kwargs": dict(target.kwargs), "dtypes": target.dtypes}
        return (target.fn, target.spec), options

    times, missed, twins_failed, twins_on_torch = [], [], [], []
    spent_localizing, levels = [], []
    for planted in ZOO:
        if CHECKS[planted.check].why_not(planted.bug) is not None:
            continue
        call, options = subject(planted.bug)
        (report, spent), seconds = timed(localized, fuzzdiff.check, *call, checks=(planted.check,), seed=args.seed,
                                         progress=False, **options)
        found = not report.ok
        times.append(seconds)
        if found and spent is not None:
            spent_localizing.append(spent)
            levels.append(report.failures[0].blame.level or "not localized")
        if not found:
            missed.append(planted.bug.name)
        print(f"  {'found' if found else 'MISSED':6s} {seconds:6.1f} s  {planted.check:10s} {planted.bug.name}")
        if args.twins:
            call, options = subject(planted.twin)
            twin, _ = timed(fuzzdiff.check, *call, checks=(planted.check,), seed=args.seed,
                            progress=False, **options)
            if not twin.ok:
                torchs = all(f.blame is not None and f.blame.whose == "pytorch" for f in twin.failures)
                (twins_on_torch if torchs else twins_failed).append(planted.twin.name)
    print(f"zoo: {len(times) - len(missed)}/{len(times)} bugs found; time to report, shrunk: "
          f"median {statistics.median(times):.1f} s, largest {max(times):.1f} s")
    if missed:
        print("missed: " + ", ".join(missed))
    localizing(spent_localizing, levels, "the zoo")
    if args.twins:
        print(f"twins failing: {len(twins_failed)}" + (f" ({', '.join(twins_failed)})" if twins_failed else ""))
        # a correct twin that meets a torch bug: reported, and blamed on PyTorch, as it should be
        print(f"twins failing on a PyTorch bug, blamed on it: {len(twins_on_torch)}"
              + (f" ({', '.join(twins_on_torch)})" if twins_on_torch else ""))
    return 0


def isolation(zoo, seed: int | None) -> int:
    """Each applicable zoo bug, checked with the fresh rerun and without it."""
    extra, fresh_times = [], []
    for planted in zoo:
        if CHECKS[planted.check].why_not(planted.bug) is not None:
            continue
        times = {}
        for isolate in (True, False):
            report, times[isolate] = timed(fuzzdiff.check, planted.bug, checks=(planted.check,), seed=seed,
                                           progress=False, isolate=isolate)
            if isolate:
                elsewhere = {f.elsewhere for f in report.failures}
        extra.append(times[True] - times[False])
        fresh_times.append(times[True])
        print(f"  {times[True]:6.1f} s isolated, {times[False]:6.1f} s not  {planted.check:10s} "
              f"{planted.bug.name}  ({'; '.join(sorted(elsewhere)) or 'no failure'})")
    print(f"isolation: {len(extra)} zoo bugs; time to report with the fresh rerun: median "
          f"{statistics.median(fresh_times):.1f} s; its extra cost per call: median {statistics.median(extra):.1f} s, "
          f"largest {max(extra):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
