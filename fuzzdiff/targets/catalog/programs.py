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

from hypothesis import strategies as st

from fuzzdiff.programs import run_program
from fuzzdiff.targets import FromShapes, Target, register
from strategies.programs import programs

FAMILY = "program"
ONLY_COMPILE = "a program that writes its inputs in place: only the compile check passes non-leaf copies"
# The catalog's other checks, by name; kept here rather than imported (the checks import targets).
OTHER_CHECKS = ("grad", "forward", "gradgrad", "layout", "alias", "mutation", "dtype", "vmap", "opcheck")


def _program(names: tuple[str, ...], kinds: tuple[str, ...]) -> FromShapes:
    def strategy(shapes):
        return programs([shapes[n] for n in names], kinds=kinds).map(lambda p: p.to_json())
    return FromShapes(strategy)


def _target(name: str, spec: str, kinds: tuple[str, ...], functional: bool) -> Target:
    names = tuple(part.split(":")[0].strip() for part in spec.split(","))
    return Target(name, run_program, spec, FAMILY, kwargs={"program": _program(names, kinds)},
                  functional=functional, min_side=1, max_side=4, max_rank=3,
                  skip={} if functional else {c: ONLY_COMPILE for c in OTHER_CHECKS})


register(
    _target("program", "a: n m, b: n m", ("view", "functional"), functional=True),
    _target("program_inplace", "a: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace2", "a: n m, b: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace3", "a: n m, b: n m, c: m", ("view", "inplace", "functional"),
            functional=False),
)
