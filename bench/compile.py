"""Throughput and compile cost of the ``compile`` check, per backend.

For aot_eager and for inductor: ``fuzzdiff.search.fuzzing.fuzz("compile", target)``
with the backend pinned (FuzzConfig.compile_backends), a fixed number of drawn
cases per target (derandomized, no database) and the fuzz default of value
variants, over a fixed set of catalog targets and program targets. Prints
examples/s and compiles per 100 examples (dynamo's ``unique_graphs`` counter).

The bare loop makes the same compiled calls on the same materialized inputs,
in the same order, with nothing of fuzzdiff around them (no Hypothesis, no
Case, no comparison or metadata), reusing the same compiled callables: the
ratio fuzzdiff / bare says what the check costs beyond torch's own work once
compiled. The first compile of a process (inductor: tens of seconds on a cold
cache) is paid before timing starts, and the bare loop runs once untimed
to compile what its draws need.

    python bench/compile.py                     # 6 drawn cases per target
    python bench/compile.py --cases 10 --backends aot_eager
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from hypothesis import HealthCheck, given, settings

from fuzzdiff.api import environ_config
from fuzzdiff.checks import get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.paths import compiled as path
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.targets import get_target

TARGETS = ("sin", "mul", "tanh", "softmax", "sum", "matmul", "program", "program_inplace2")
SEED = 0


def _settings(cases: int) -> settings:
    return settings(max_examples=cases, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


def fuzzdiff_side(targets, cases: int, config: FuzzConfig) -> tuple[int, float, int]:
    """(examples, seconds, compiles) of fuzz("compile") over the targets."""
    examples, compiles, start = 0, path.compiles(), time.perf_counter()
    for t in targets:
        try:
            examples += fuzz("compile", t, replace(config, seed=SEED), settings=_settings(cases)).examples
        except FuzzFailure as failure:  # a finding: counted, reported, and the bench goes on
            examples += failure.tally.examples
            print(f"  found: {str(failure).splitlines()[0][:200]}")
    return examples, time.perf_counter() - start, path.compiles() - compiles


def drawn_cases(targets, cases: int, config: FuzzConfig):
    """The cases fuzz() ran, with every value variant, drawn the same way."""
    check = get_check("compile")
    out = []
    for t in targets:
        @_settings(cases)
        @given(case_strategy(check, t))
        def collect(case):
            out.extend((t, case.reseeded(k)) for k in range(config.variants))
        collect()
    return out


def bare_side(cases) -> tuple[int, float]:
    """The same compiled calls (forward, and backward with a cotangent) without fuzzdiff."""
    prepared = []
    for t, case in cases:
        fn = path.compiled(t, case, case.params["backend"])
        prepared.append((fn, path.aliased_case(case), t.functional))

    def loop():
        for fn, case, functional in prepared:
            inputs = case.materialize()
            args = inputs.args if functional else inputs.rebuild([l.clone() for l in inputs.leaves])
            outs = [o for o in torch.utils._pytree.tree_leaves(fn(*args))
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            if outs:
                torch.autograd.grad(outs, inputs.leaves, [torch.ones_like(o) for o in outs],
                                    allow_unused=True)
    try:
        loop()  # compiles what these draws need: timed is the loop with everything compiled
    except Exception:  # noqa: BLE001 - a case eager or the backend rejects: the bare loop skips it
        prepared = [p for p in prepared if _runs(p)]
    start = time.perf_counter()
    loop()
    return len(prepared), time.perf_counter() - start


def _runs(prepared) -> bool:
    fn, case, functional = prepared
    try:
        inputs = case.materialize()
        with torch.no_grad():
            fn(*(inputs.args if functional else [a.clone() for a in inputs.args]))
        return True
    except Exception:  # noqa: BLE001
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=6, help="drawn cases per target")
    parser.add_argument("--backends", nargs="+", default=["aot_eager", "inductor"])
    args = parser.parse_args()
    targets = [get_target(n) for n in TARGETS]
    print(f"targets: {', '.join(TARGETS)}; {args.cases} drawn cases each, "
          f"{environ_config().variants} value variants per case; torch {torch.__version__}")
    print(f"{'backend':10} {'examples':>8} {'seconds':>8} {'examples/s':>10} "
          f"{'compiles':>8} {'per 100':>8} {'bare ex/s':>10} {'ratio':>6}")
    for backend in args.backends:
        config = replace(environ_config(), compile_backends=(backend,))
        warm = get_target("sin")  # the process's first compile, outside the timing
        fuzz("compile", warm, replace(config, seed=SEED), settings=_settings(1))
        n, seconds, compiles = fuzzdiff_side(targets, args.cases, config)
        bare_n, bare_seconds = bare_side(drawn_cases(targets, args.cases, config))
        rate, bare_rate = n / seconds, bare_n / bare_seconds
        print(f"{backend:10} {n:8d} {seconds:8.1f} {rate:10.1f} {compiles:8d} "
              f"{100 * compiles / max(n, 1):8.1f} {bare_rate:10.1f} {rate / bare_rate:6.2f}")


if __name__ == "__main__":
    main()
