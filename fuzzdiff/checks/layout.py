"""layout: the same values in another memory layout give the same results.

Outputs and gradients (with respect to each argument as passed) at the fuzzed
layout must match those at an independently drawn one — contiguous, permuted,
sliced, offset, expanded or channels_last. Differences at rounding level are
judged against a float64 run on the same values.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.case.features import relaid
from fuzzdiff.checks.check import Check, Cost, OpInfoRole
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.twins import judge_twins
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.cotangents import probes
from strategies.layouts import LAYOUT_FEATURES, layouts


def params(target: Target, case: Case):
    features = LAYOUT_FEATURES if target.functional else tuple(f for f in LAYOUT_FEATURES if f != "expanded")
    other = st.tuples(
        *(
            layouts(a.shape, features=features, expandable=a.values.constant).map(lambda l: l.__dict__.copy())
            for a in case.args
        )
    )
    return st.fixed_dictionaries({"cotangent": probes().map(lambda p: p.__dict__.copy()), "layouts": other.map(list)})


def run(target: Target, case: Case) -> Verdict:
    return judge_twins(
        "fuzzed layout vs another layout",
        target,
        case,
        lambda c, cast=None: evaluate(target, c, cast=cast, wrt="args"),
        lambda c, cast=None: evaluate(target, relaid(c), cast=cast, wrt="args"),
        check="layout",
    )


EVALUATE_ARGS = '''
def evaluate(make_leaves, make_args):
    """Outputs, and gradients with respect to each differentiable argument as passed."""
    args = make_args(make_leaves())
    outs = outputs(call(*args))
    grads = vjp(outs, [args[i] for i in WRT], V) if WRT else []
    names = [f"output {k}" for k in range(len(outs))] + [f"grad of {ARG_NAMES[i]}" for i in WRT]
    return names, [t.detach() for t in (*outs, *grads)]
'''.strip("\n")


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "the same values in two memory layouts give the same outputs and gradients",
        lines(
            "# 1. The arguments in the fuzzed layout.",
            "names, got = evaluate(make_leaves, make_args)",
            "# 2. The very same values in another layout.",
            "_, expected = evaluate(make_leaves_other, make_args_other)",
            "return finish([compare(names, got, expected)])",
        ),
        ("outputs", "compare", "finish"),
        ("V",),
        other_layout=True,
        extra=f"{ctx.wrt_constants()}\n\n\n{EVALUATE_ARGS}",
        copies=(vjp,),
    )


CHECK = Check(
    "layout",
    run,
    params=params,
    needs_grad=False,
    script=script,
    cost=Cost(0.021, 0.0036),
    opinfo=OpInfoRole(tests=(("TestCommon", "test_noncontiguous_samples"),)),
)
