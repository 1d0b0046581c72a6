"""Examples to detection: how many fuzzed cases each planted bug survives.

Run ``python -m tests.selftest.detection`` from the repository root. For each
bug in the zoo it fuzzes the bug's designated check exactly as the self-test
does (``derandomize=True``, so the numbers are reproducible), counts the check
runs up to and including the first one whose verdict is a confirmed failure,
then lets Hypothesis shrink it and summarizes the shrunk case.

fuzz() runs every case Hypothesis draws at several value-and-probe variants
(``variants``, $FUZZDIFF_VARIANTS): "runs" counts check runs (verdicts),
"examples" the Hypothesis examples (drawn structures) they came from. Both
use VARIANTS (8, as the "dev" profile) unless ``--variants`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, Phase, settings

from fuzzdiff.case.case import Case
from fuzzdiff.checks import get_check
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.case.layout import Layout
from fuzzdiff.search.runner import run_check
from fuzzdiff.config import FuzzConfig
from tests.selftest.zoo import ZOO, Planted

__all__ = ["Detection", "detect", "fuzz_settings", "describe", "main", "VARIANTS", "STRUCTURES"]

# Value-and-probe variants per drawn structure, pinned (not taken from the pytest
# profile or $FUZZDIFF_VARIANTS) so the self-test and this table agree; 8 is
# what the "dev" profile uses.
VARIANTS = 8
# One drawn structure per Hypothesis example, pinned likewise: "examples" here
# are drawn structures (fuzz() draws up to STRUCTURES per example by default).
STRUCTURES = 1


def fuzz_settings(max_examples: int, *, shrink: bool = True) -> settings:
    # No Phase.explain: after shrinking it re-runs the failing check hundreds of
    # times to annotate the report, which here costs ~20x the shrinking itself.
    phases = (Phase.explicit, Phase.reuse, Phase.generate)
    if shrink:
        phases += (Phase.target, Phase.shrink)
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    phases=phases, suppress_health_check=list(HealthCheck), print_blob=False)


@dataclass
class Detection:
    planted: Planted
    runs: int | None          # check runs up to the first failing verdict (None: not found)
    variants: int             # check runs per Hypothesis example
    seconds: float            # wall time to the first failing verdict
    first: Case | None        # the first failing case, before shrinking
    shrunk: Case | None       # the shrunk case FuzzFailure reported
    message: str = ""

    @property
    def examples(self) -> int | None:
        """Hypothesis examples drawn up to the first failing verdict."""
        return None if self.runs is None else (self.runs - 1) // self.variants + 1


def detect(p: Planted, max_examples: int = 200, *, shrink: bool = True,
           variants: int | None = None) -> Detection:
    """Fuzz ``p``'s designated check on the bug and count runs to detection."""
    check = get_check(p.check)
    variants = VARIANTS if variants is None else variants
    seen: dict = {"n": 0, "first": None, "t": None}
    start = time.perf_counter()

    def counting(target, case):
        # The real check, with exceptions already turned into verdicts (and
        # replayed) by run_check, so that each example is counted once.
        seen["n"] += 1
        verdict = run_check(check, target, case)
        if verdict.failed and seen["first"] is None:
            seen["first"], seen["t"], seen["count"] = case, time.perf_counter() - start, seen["n"]
        return verdict

    counted = replace(check, run=counting)
    try:
        fuzz(counted, p.bug, FuzzConfig(variants=variants, structures=STRUCTURES),
             settings=fuzz_settings(max_examples, shrink=shrink))
    except FuzzFailure as e:
        return Detection(p, seen.get("count"), variants, seen["t"], seen["first"], e.case,
                         e.verdict.message)
    except Exception as e:  # a check raising outside run_check: report, do not hide
        return Detection(p, seen.get("count"), variants, time.perf_counter() - start,
                         seen["first"], None, f"{type(e).__name__}: {e}")
    return Detection(p, None, variants, time.perf_counter() - start, None, None, "not found")


def describe(case: Case | None) -> str:
    """A one-line summary of a case: dtype, shapes, layouts, aliasing, specials, probes."""
    if case is None:
        return "-"
    parts = [case.dtype]
    for i, a in enumerate(case.args):
        bits = [f"{list(a.shape)}"]
        lay = a.layout
        if lay is not None and not lay.is_contiguous(a.shape):
            bits.append(f"strides={list(lay.strides)}")
            if lay.offset:
                bits.append(f"offset={lay.offset}")
        elif lay is not None and lay.offset:
            bits.append(f"offset={lay.offset}")
        if a.alias is not None:
            bits.append(f"alias={a.alias.kind}:{a.alias.of}")
        if a.grad != "leaf":
            bits.append(f"grad={a.grad}")
        if a.values.specials:
            bits.append("specials=" + ",".join(n for _, n in a.values.specials))
        if a.values.grid is None:
            bits.append("grid=None")
        parts.append(f"arg{i} " + " ".join(bits))
    cot = case.params.get("cotangent")
    if isinstance(cot, dict) and (cot.get("layout") != "contiguous" or cot.get("zeros")):
        parts.append(f"cotangent {cot.get('layout')} zeros={cot.get('zeros')}")
    for level in case.params.get("levels") or ():  # the vmap check's batching plan
        parts.append(f"{case.params['composition']} B={level['batch']} "
                     f"in_dims={level['in_dims']} out_dims={level['out_dims']}")
    for i, (a, d) in enumerate(zip(case.args, case.params.get("layouts") or ())):
        lay = Layout(d["storage_size"], tuple(d["strides"]), d["offset"])
        if not lay.is_contiguous(a.shape):
            parts.append(f"other layout arg{i} strides={list(lay.strides)}"
                         + (f" offset={lay.offset}" if lay.offset else ""))
    return "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="only these zoo entries")
    ap.add_argument("--max-examples", type=int, default=200,
                    help="Hypothesis examples per bug (default 200, as in the self-test)")
    ap.add_argument("--variants", type=int, default=None,
                    help=f"check runs per example (default {VARIANTS}, as in the self-test)")
    ap.add_argument("--no-shrink", action="store_true", help="stop at the first failure")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    rows = []
    for p in ZOO:
        if args.names and p.name not in args.names:
            continue
        d = detect(p, args.max_examples, shrink=not args.no_shrink, variants=args.variants)
        found = d.runs is not None
        row = (p.name, p.trigger, p.check, str(d.examples) if found else "not found",
               str(d.runs) if found else "-", f"{d.seconds:.2f}" if found else f"({d.seconds:.1f})",
               describe(d.shrunk))
        rows.append(row)
        if not args.markdown:
            print(f"{row[0]:26} {row[1]:14} {row[2]:9} {row[3]:>9} {row[4]:>5} {row[5]:>6}s  {row[6]}",
                  flush=True)
    if args.markdown:
        print(f"| bug | trigger | check | examples to detection | check runs ({d.variants} per "
              "example) | seconds | shrunk case |")
        print("|---|---|---|---:|---:|---:|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    return 0 if all(r[3] != "not found" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
