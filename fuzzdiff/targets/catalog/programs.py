"""Program targets: small straight-line torch programs drawn by Hypothesis.

The program is a keyword argument drawn for the input shapes
(strategies.programs), so it is part of the case: it shrinks with it, goes
into corpus records as JSON, and ``fuzzdiff repro --script`` prints it as
plain torch code. ``program`` has views and functional ops only, so every
check applies to it; the ``program_inplace*`` targets also write through
views into their inputs and into each other, which only the ``compile`` check
runs (the others differentiate with respect to leaves, which torch forbids
writing in place; ``compile`` passes non-leaf copies).
"""

from collections.abc import Mapping

from fuzzdiff.programs import run_program
from fuzzdiff.targets import FromShapes, Target, register
from strategies.programs import programs

FAMILY = "program"
ONLY_COMPILE = "a program that writes its inputs in place: only the compile check passes non-leaf copies"


class AllBut(Mapping):
    """A ``Target.skip`` that skips every check but one, with one reason
    (the checks import the targets, so their names are looked up lazily)."""

    def __init__(self, kept: str, reason: str):
        self.kept, self.reason = kept, reason

    def __getitem__(self, check: str) -> str:
        if check == self.kept:
            raise KeyError(check)
        return self.reason

    def __contains__(self, check) -> bool:
        return check != self.kept

    def __iter__(self):
        from fuzzdiff.checks import CHECKS
        return (c for c in CHECKS if c != self.kept)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _program(names: tuple[str, ...], kinds: tuple[str, ...]) -> FromShapes:
    def strategy(shapes):
        return programs([shapes[n] for n in names], kinds=kinds).map(lambda p: p.to_json())
    return FromShapes(strategy)


# Found by these targets (corpus/compile/program*/), each reproduced in plain torch.
OFFSET_VIEW = (
    "torch.compile (aot_eager, inductor; dynamic=True) returns an output view of a mutated input "
    "whose size is a SymInt at storage offset 0: def f(x, n): x.add_(0.5); return x.view(n) on "
    "x = torch.arange(6.).as_strided((1, 2), (2, 1), 2) gives [0., 1.] compiled, [2.5, 3.5] eager")
STRIDE0_SLICE_GRAD = (
    "inductor's gradient of a stride-0 leaf sliced at a SymInt start is the mean of the cotangent: "
    "a = torch.tensor([9., .75]).double().as_strided((4, 1), (0, 1), 1).requires_grad_(); "
    "grad of torch.compile(lambda a, s: (a[s::1],), backend='inductor', dynamic=True)(a, 0) with "
    "v = randn(4, 1) is v.mean() everywhere; eager and aot_eager give v")


MUTATED_INPUT_BACKWARD = (
    "torch.compile (aot_eager, inductor) and aot_function with the min-cut partitioner save a "
    "mutated input for the backward and then bump its version: def f(a, b): return (a.mul_(b),) "
    "on a = x.clone() (x, b float64 leaves) runs eager, but with backend='aot_eager' the "
    "backward raises 'one of the variables needed for gradient computation has been modified by "
    "an inplace operation' (inductor too, for a.view(1, 2, 2).mul_(b)); torch 2.13.0 CPU, like "
    "pytorch/pytorch#185497; corpus/compile/program_inplace3")


def _target(name: str, spec: str, kinds: tuple[str, ...], functional: bool) -> Target:
    names = tuple(part.split(":")[0].strip() for part in spec.split(","))
    return Target(name, run_program, spec, FAMILY, kwargs={"program": _program(names, kinds)},
                  functional=functional, min_side=1, max_side=4, max_rank=3,
                  skip={} if functional else AllBut("compile", ONLY_COMPILE),
                  known={"compile": STRIDE0_SLICE_GRAD if functional
                         else f"{OFFSET_VIEW}. And: {MUTATED_INPUT_BACKWARD}"})


register(
    _target("program", "a: n m, b: n m", ("view", "functional"), functional=True),
    _target("program_inplace", "a: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace2", "a: n m, b: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace3", "a: n m, b: n m, c: m", ("view", "inplace", "functional"),
            functional=False),
)
