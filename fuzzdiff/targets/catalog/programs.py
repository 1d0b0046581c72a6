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

from fuzzdiff.case.programs import run_program
from fuzzdiff.targets import FromShapes, Target, register
from fuzzdiff.targets.known import NOT_NONE, Known
from fuzzdiff.targets.target import Only
from strategies.programs import programs

FAMILY = "program"
ONLY_COMPILE = "a program that writes its inputs in place: only the compile check passes non-leaf copies"


def _program(names: tuple[str, ...], kinds: tuple[str, ...]) -> FromShapes:
    def strategy(shapes):
        return programs([shapes[n] for n in names], kinds=kinds).map(lambda p: p.to_json())

    return FromShapes(strategy)


# Found by these targets (corpus/compile/program*/), each reproduced in plain torch.
SYMBOLIC_VIEW_OUTPUT = Known(
    "compile",
    "torch.compile (aot_eager, inductor; dynamic=True) returns an output view of a mutated input "
    "made by a view op with SymInt arguments (a slice start, a view size) with the strides and "
    "offset of the traced graph's fresh output, and so wrong values: AOTAutograd's "
    "gen_alias_from_base skips ViewMeta replay for symbolic ViewMetas and as_strides the input "
    "with the graph output's layout (torch 2.13.0 CPU; dynamic=False is right)",
    "def f(a, start): v = a[start:]; a.add_(0.5); return v on a = torch.arange(6.).double()[::2], "
    "start=1, backend='aot_eager' or 'inductor', dynamic=True: compiled stride (1,) offset 1 values "
    "[1., 2.5], eager stride (2,) offset 2 values [2.5, 4.5]",
    message=r"^(aot_eager|inductor) vs eager: output \d+: strides and offset ",
    params={"backend": ("aot_eager", "inductor")},
    records=("25c92fb2a59fac38", "66cfa7d41d2fb405"),
)
SYNTHETIC_BASE_VIEW_OUTPUT = Known(
    "compile",
    "aot_function with inputs sharing one storage (a synthetic base), one of them mutated and a "
    "view of one returned, replays the output's ViewMeta sequence on the synthetic base instead "
    "of on the input and raises an internal AssertionError (torch 2.13.0 CPU; torch.compile is "
    "unaffected)",
    "def f(x0, x1): v = x0.select(0, 0); v.add_(0.5); return v, torch.sin(x0) with b = "
    "torch.arange(4.).double(); aot_function(f, fw_compiler=nop, bw_compiler=nop)(b.view(2, 2), "
    "b.view(2, 2)) -> AssertionError: incorrect out shape after application of ViewMeta sequence: "
    "() (actual) vs (2,) (expected)",
    raises="AssertionError",
    message=r"incorrect out shape after application of ViewMeta sequence",
    params={"backend": ("aot_function", "aot_function_min_cut"), "aliases": NOT_NONE},
    records=("4345079c470612a9",),
)
SYNTHETIC_BASE_VIEW_OFFSET = Known(
    "compile",
    "with two inputs that are views of one storage at a storage offset (a synthetic base), one of "
    "them written in place and a view of the other returned, AOTAutograd regenerates the output "
    "view from the synthetic base at offset 0, silently: wrong strides, offset and values "
    "(torch 2.13.0 CPU; aot_function with either partitioner, and torch.compile with aot_eager or "
    "inductor, dynamic True or False; inputs of their own storages work; the AssertionError "
    "signature above is the same mechanism on other programs)",
    "f = lambda a, c: (a.add_(0.5), c.select(0, 0))[1]; b = torch.tensor([9.0, 1.0], "
    "dtype=torch.float64); f(b[1:], b[1:]) -> 1.5 at offset 1; aot_function(f, nop, nop)(b[1:], "
    "b[1:]) on a fresh b -> 9.0 at offset 0 (b[0], before the write)",
    message=r"^aot_function(_min_cut)? vs eager: output \d+: strides and offset ",
    features=("offset",),
    params={"backend": ("aot_function", "aot_function_min_cut"), "aliases": NOT_NONE},
    records=("eb22b5104923ac40",),
)
SYNTHETIC_BASE_VIEW_INDEX = Known(
    "compile",
    "aot_function with two inputs that are views of one storage (a synthetic base), one written "
    "through a strided slice that is returned, replays the output's ViewMeta sequence on a base "
    "of the wrong rank and raises IndexError (torch 2.13.0 CPU; the AssertionError signature "
    "above is the same mechanism on other programs)",
    "def f(a, b, c): v = b[:, 0::2]; v.add_(0.5); return v, a[0::1]; x = torch.tensor([1.75], "
    "dtype=torch.float64, requires_grad=True).clone(); a = torch.tensor([[1.75]], "
    "dtype=torch.float64, requires_grad=True).clone(); aot_function(f, fw_compiler=nop, "
    "bw_compiler=nop)(a, x.view(1, 1), x.view(1)) -> IndexError: Dimension out of range "
    "(expected to be in range of [-1, 0], but got 1)",
    raises="IndexError",
    message=r"Dimension out of range",
    params={"backend": ("aot_function", "aot_function_min_cut"), "aliases": NOT_NONE},
    records=("f1b5da92c45c21d3",),
)
UNTRACKED_ALIAS_MUTATION = Known(
    "compile",
    "aot_function refuses a program that writes an input when another input shares its "
    "storage without being a differentiable view of it (a detached alias): AOTAutograd's "
    "merge_view_inputs asserts that it 'does not yet handle non-differentiable view input "
    "mutations', where eager runs (torch 2.13.0 CPU)",
    "def f(a, b, c): v = c.select(0, 0); v.add_(0.5); return (v,) with base = torch.tensor([1.75], "
    "dtype=torch.float64, requires_grad=True).clone(); aot_function(f, nop, nop)(base.view(1, 1), "
    "base.detach().view(1, 1), base.view(1)) -> AssertionError: aot_autograd() does not yet handle "
    "non-differentiable view input mutations",
    raises="AssertionError",
    message=r"does not yet handle non-differentiable view input mutations",
    params={"backend": ("aot_function", "aot_function_min_cut"), "aliases": NOT_NONE},
    records=("e857afff4622be0d",),
)
MUTATED_INPUT_BACKWARD = Known(
    "compile",
    "torch.compile (aot_eager, inductor) and aot_function with the min-cut partitioner save a "
    "mutated input for the backward and then bump its version, so the backward raises where "
    "eager's runs (torch 2.13.0 CPU, like pytorch/pytorch#185497)",
    "def f(a, b): return (a.mul_(b),) on a = x.clone() (x, b float64 leaves) runs eager, but "
    "with backend='aot_eager' the backward raises 'one of the variables needed for gradient "
    "computation has been modified by an inplace operation' (inductor too, for "
    "a.view(1, 2, 2).mul_(b))",
    message=r"vs eager: the backward raised: one of the variables needed for gradient "
    r"computation has been modified by an inplace operation",
    params={"backend": ("aot_eager", "inductor", "aot_function_min_cut")},
    records=("aa6f50987f2792c4",),
    fixed_in="2.15.0",
)


# torch refuses an in-place write whose output overlaps an operand (an expanded
# view, or another input sharing its memory): an invalid program, not a finding
INTERNAL_OVERLAP = (
    (
        "RuntimeError",
        r"unsupported operation: (some elements of the input tensor and the "
        r"written-to tensor refer to a single memory location|more than one element of the "
        r"written-to tensor refers to a single memory location)",
    ),
)


# Functionalization's replay of a view chain under inductor, for programs that write
# in place through views of inputs with size-1 dims: the replayed view loses a dim.
_VIEW_REPLAY_REASON = (
    "inductor: a program that writes in place through views of (1, 1) inputs fails functionalization's "
    "replay of its view chain, which drops a size-1 dim (torch 2.13.0 CPU; seen by tests/fuzz/"
    "test_catalog.py's rotation 20261129; some of its cases compile in a fresh process, so it also "
    "depends on what the process compiled before)"
)
VIEWMETA_REPLAY = (
    Known(
        "compile",
        _VIEW_REPLAY_REASON,
        "program_inplace2 at two (1, 1) inputs, backend inductor -> AssertionError: incorrect out shape "
        "after application of ViewMeta sequence: (1,) (actual) vs (1, 1) (expected)",
        raises="AssertionError",
        message=r"incorrect out shape after application of ViewMeta sequence",
    ),
    Known(
        "compile",
        _VIEW_REPLAY_REASON,
        "program_inplace2 at two (1, 1) inputs, backend inductor -> IndexError: Dimension out of range "
        "(expected to be in range of [-1, 0], but got 1)",
        raises="IndexError",
        message=r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 1\)",
    ),
)


def _target(name: str, spec: str, kinds: tuple[str, ...], functional: bool) -> Target:
    names = tuple(part.split(":")[0].strip() for part in spec.split(","))
    return Target(
        name,
        run_program,
        spec,
        FAMILY,
        kwargs={"program": _program(names, kinds)},
        functional=functional,
        min_side=1,
        max_side=4,
        max_rank=3,
        only=None if functional else Only(("compile",), ONLY_COMPILE),
        known=()
        if functional
        else (
            SYMBOLIC_VIEW_OUTPUT,
            SYNTHETIC_BASE_VIEW_OUTPUT,
            SYNTHETIC_BASE_VIEW_OFFSET,
            SYNTHETIC_BASE_VIEW_INDEX,
            UNTRACKED_ALIAS_MUTATION,
            MUTATED_INPUT_BACKWARD,
            *VIEWMETA_REPLAY,
        ),
        invalid=() if functional else INTERNAL_OVERLAP,
    )


register(
    _target("program", "a: n m, b: n m", ("view", "functional"), functional=True),
    _target("program_inplace", "a: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace2", "a: n m, b: n m", ("view", "inplace", "functional"), functional=False),
    _target("program_inplace3", "a: n m, b: n m, c: m", ("view", "inplace", "functional"), functional=False),
)
