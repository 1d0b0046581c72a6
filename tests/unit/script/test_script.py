"""Standalone repro scripts (fuzzdiff.script): torch-only, exact, and they reproduce.

- every catalog target x check emits a script that compiles, imports nothing
  of fuzzdiff, and rebuilds exactly the tensors Case.materialize builds;
- run in-process, a script says OK where the check passes and reports what the
  check failed on;
- run as programs with fuzzdiff, hypothesis and strategies unimportable, scripts
  of passing cases print OK (exit 0) and scripts of planted zoo bugs, found by
  fuzzing, print MISMATCH (exit 1) with the very numbers the check judged.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import math
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.checks.opcheck import custom_op
from fuzzdiff.confirm.compare import max_abs, mismatch
from fuzzdiff.case.directions import absdot, dot
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets.known import matching
from fuzzdiff.case.layout import Alias, Layout
from fuzzdiff.paths.numerical import directional_difference
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.script import ScriptError, scripted_checks, standalone_script
from fuzzdiff.script.helpers import COPIED, helper_source
from fuzzdiff.script.literals import storage_literal, tensor_literal
from fuzzdiff.script.source import target_code
from fuzzdiff.targets import NoGrad, all_targets, get_target
from fuzzdiff.targets.discrepancies import NESTED_JVP_FUNCTION
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values
from fuzzdiff.config import FuzzConfig
from tests.selftest.detection import fuzz_settings
from tests.selftest.zoo import ZOO, by_name

CATALOG = all_targets()
SCRIPTED = scripted_checks()
# Runs scripts as programs that cannot import fuzzdiff (nor its strategies or
# Hypothesis), one subprocess for many scripts: each result is the exit status
# and the output of one script.
RUNNER = textwrap.dedent("""
    import contextlib, io, json, runpy, sys
    for name in ("fuzzdiff", "strategies", "hypothesis"):
        sys.modules[name] = None
    results = []
    for path in sys.argv[1:]:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code
        except BaseException as e:
            out.write(f"raised {type(e).__name__}: {e}")
            code = "raised"
        results.append([code, out.getvalue()])
    print(json.dumps(results))
""")


def first_cases(check: str, target: Target, n: int = 1) -> list[Case]:
    """The first ``n`` CPU cases Hypothesis draws (derandomized: the same every
    run). Scripts are CPU-only; on a machine with a GPU cases also draw cuda."""
    out: list[Case] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate],
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(case_strategy(CHECKS[check], target, devices=("cpu",)))
    def draw(case):
        out.append(case)

    draw()
    return out[:n]


def namespace(source: str) -> dict:
    """The script's module namespace, without running main(). A module of its own
    in sys.modules: dynamo, tracing a torch.func transform, imports the module a
    traced function's globals belong to."""
    module = types.ModuleType(f"script_under_test_{len(sys.modules)}")
    sys.modules[module.__name__] = module
    exec(compile(source, "<script>", "exec"), module.__dict__)  # noqa: S102 - the code under test
    return module.__dict__


def run_main(source: str) -> tuple[int | str, str]:
    ns = namespace(source)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = ns["main"]()
        except Exception as e:  # noqa: BLE001 - a target that raises reproduces by raising
            return f"raised {type(e).__name__}", out.getvalue() + f"\nraised {type(e).__name__}: {e}"
    return code, out.getvalue()


def run_programs(sources: list[str], tmp_path: Path, env: dict | None = None) -> list:
    paths = []
    for k, src in enumerate(sources):
        p = tmp_path / f"repro_{k}.py"
        p.write_text(src)
        paths.append(str(p))
    r = subprocess.run([sys.executable, "-c", RUNNER, *paths], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, **(env or {})}, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_torch_only(source: str) -> None:
    """Imports of torch and the standard library only, but for a third-party package the
    code under test itself uses (tensorly targets), which the header then names."""
    needs = set()
    for line in source.splitlines():
        if line.startswith("Needs ") and line.endswith("besides torch: the code under test uses it."):
            needs = set(line.removeprefix("Needs ").split(" besides")[0].split(", "))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        # functorch ships inside the torch wheel (functorch.compile is aot_function's public home)
        assert roots <= {"torch", "functorch", "math", "sys", "re", "itertools", "dataclasses", "typing",
                         "warnings", "random", "__future__", *needs}, \
            ast.unparse(node)
    mentions = [line for line in source.splitlines() if "fuzzdiff" in line]
    assert len(mentions) == 1 and mentions[0].startswith("Found by fuzzdiff"), mentions


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (
        torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all()))


def assert_same_inputs(case: Case, ns: dict) -> None:
    """The script's leaves and arguments are materialize()'s: values, strides,
    offsets, which tensor is which, and which share memory."""
    expected = case.materialize()
    leaves = ns["make_leaves"]()
    args = ns["make_args"](leaves)
    assert len(leaves) == len(expected.leaves) and len(args) == len(expected.args)
    for got, want in zip([*leaves, *args], [*expected.leaves, *expected.args]):
        assert got.shape == want.shape and got.stride() == want.stride()
        assert got.storage_offset() == want.storage_offset()
        assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()
        assert same_bits(got.detach(), want.detach())
        assert got.requires_grad == want.requires_grad and got.is_leaf == want.is_leaf
    for i, a in enumerate(args):
        for j, b in enumerate(args):
            ea, eb = expected.args[i], expected.args[j]
            assert (a is b) == (ea is eb)
            assert (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()) == \
                (ea.untyped_storage().data_ptr() == eb.untyped_storage().data_ptr())


# -- literals -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16,
                                   torch.complex128, torch.complex64, torch.int64, torch.bool])
def test_literals_round_trip_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(40, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-8, 8, (40,), generator=g)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-310, 2.0**-1074, 1e300])
    values = torch.cat([base, specials])
    if dtype.is_complex:
        t = torch.complex(values, values.flip(0)).to(dtype)
    elif dtype == torch.bool:
        t = values > 0
    elif not dtype.is_floating_point:
        t = (values.nan_to_num(0.0, 0.0, 0.0).clamp(-1e15, 1e15)).to(dtype)
    else:
        t = values.to(dtype)
    ns = {"torch": torch, "inf": math.inf, "nan": math.nan}
    built = eval(storage_literal(t), ns)  # noqa: S307
    assert built.dtype == t.dtype
    wide = torch.view_as_real(t) if t.is_complex() else t
    back = torch.view_as_real(built) if built.is_complex() else built
    if back.dtype.is_floating_point:  # bits, NaNs aside (their sign and payload are not kept)
        nan = wide.isnan()
        assert torch.equal(back.isnan(), nan)
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[back.element_size()]
        assert torch.equal(back[~nan].view(width), wide[~nan].view(width))
    assert same_bits(back, wide)
    assert all(s in storage_literal(t) for s in (["-0.0", "nan"] if dtype.is_floating_point else []))


def test_large_storages_are_hex_and_exact():
    t = torch.randn(5000, dtype=torch.float32)
    text = storage_literal(t)
    assert "float.fromhex" in text and len(text.splitlines()) < 5000 // 3
    assert same_bits(eval(text, {"torch": torch}), t)  # noqa: S307


def test_strided_probe_literals_keep_their_layout():
    t = torch.randn(3, 1, dtype=torch.float64).expand(3, 4)
    u = torch.randn(4, 3, dtype=torch.float32).mT
    # is_contiguous() holds for a stride-0 size-1 dim; a literal must keep that stride
    v = torch.arange(4.0).as_strided((2, 2, 1), (2, 1, 0))
    for x in (t, u, torch.randn(2, 2)[1:], v):
        y = eval(tensor_literal(x), {"torch": torch})  # noqa: S307
        assert y.stride() == x.stride() and y.storage_offset() == x.storage_offset()
        assert same_bits(y, x)


# -- every catalog target --------------------------------------------------------------

# Targets some check with a script applies to (program_inplace* run only the compile
# check); a torch.library custom op's registrations are not written out yet.
SCRIPTABLE = [t for t in CATALOG if any(CHECKS[c].why_not(t) is None for c in SCRIPTED)
              and not custom_op(t.fn)]


def test_a_custom_op_script_is_a_clear_error():
    target = get_target("custom_sin")
    with pytest.raises(ScriptError, match="custom_sin.*CustomOpDef"):
        standalone_script("grad", first_cases("grad", target)[0], target=target)


def test_nearly_every_catalog_target_is_scriptable():
    assert len(SCRIPTABLE) >= len(CATALOG) - 3


@pytest.mark.parametrize("target", SCRIPTABLE, ids=[t.name for t in SCRIPTABLE])
def test_every_catalog_target_emits_a_torch_only_script(target):
    for check in SCRIPTED:
        if CHECKS[check].why_not(target) is not None:
            continue
        case = first_cases(check, target)[0]
        source = standalone_script(check, case, target=target)
        assert_torch_only(source)
        ns = namespace(source)
        if "make_leaves" in ns:  # the vmap check's script embeds its examples instead
            assert_same_inputs(case, ns)


# A sample run in-process: the script's verdict is the check's first verdict.
SAMPLE = [(t, c) for k, t in enumerate(SCRIPTABLE) for j, c in enumerate(SCRIPTED)
          if (k + j) % 12 == 0 and CHECKS[c].why_not(t) is None]


@pytest.mark.parametrize("target,check", SAMPLE, ids=[f"{t.name}-{c}" for t, c in SAMPLE])
def test_script_agrees_with_the_check(target, check):
    for case in first_cases(check, target, n=3)[1:]:  # past the trivial first draw
        verdict = run_check(check, target, case)
        if verdict.kind not in ("pass", "fail"):
            continue
        code, out = run_main(standalone_script(check, case, verdict, target=target))
        if verdict.kind == "pass":
            assert code == 0 and out.splitlines()[-1].startswith("OK"), out
        else:
            assert code == 1 or str(code).startswith("raised"), out


def test_every_vmap_composition_agrees_with_the_check():
    """One case per composition (the plan drawn, then the composition set)."""
    from dataclasses import replace
    target = get_target("mul")
    base = next(c for c in first_cases("vmap", target, n=12)
                if all(a.shape for a in c.args) and len(c.params["levels"]) == 1)
    for composition in ("vmap", "vmap_vjp", "vjp_vmap", "vmap_jvp", "jvp_vmap", "vmap_grad",
                        "vmap_vmap"):
        levels = base.params["levels"] * (2 if composition == "vmap_vmap" else 1)
        layouts = base.params["batched_layouts"] if composition != "vmap_vmap" else [None] * len(base.args)
        case = replace(base, params={**base.params, "composition": composition, "levels": levels,
                                     "batched_layouts": layouts})
        verdict = run_check("vmap", target, case)
        assert verdict.kind == "pass", verdict
        code, out = run_main(standalone_script("vmap", case, verdict, target=target))
        assert code == 0 and out.splitlines()[-1].startswith("OK"), (composition, out)


def test_aliasing_and_views_are_rebuilt_exactly():
    """Same tensor twice, an overlapping view of a leaf storage, a stride-0 leaf,
    a fixed (non-differentiable) argument sharing a storage."""
    t = Target("unit_alias", lambda a, b, c, d: a * b + c.sum() + d, "a: n, b: n, c: n, d: n",
               kinds={"d": NoGrad()})
    case = Case(t.name, (
        Arg((3,), Values(seed=1, grid=0.25), Layout(7, (2,), 1), grad="view"),
        Arg((3,), alias=Alias(0, "view"), layout=Layout(7, (1,), 4)),
        Arg((3,), Values(seed=2, constant=(0,)), Layout(2, (0,), 1)),
        Arg((3,), Values(seed=3), Layout(5, (1,), 2), grad="none")), dtype="float32")
    source = standalone_script("grad", case, target=t)
    assert "target_fn = (lambda a, b, c, d: a * b + c.sum() + d)" in source
    assert "overlaps a in memory" in source and "stride 0 along dim 0" in source
    assert_same_inputs(case, namespace(source))
    same = Case(t.name, (case.args[0], Arg((3,), alias=Alias(0, "same")), *case.args[2:]))
    assert_same_inputs(same, namespace(standalone_script("alias", same, target=t)))


def test_unsupported_checks_and_uncopyable_targets_are_clear_errors():
    case = first_cases("grad", get_target("exp"))[0]
    with pytest.raises(ScriptError, match="no standalone script for check 'nope'"):
        standalone_script("nope", case)

    def make():
        scale = 2.0
        return lambda x: x * scale
    closure = Target("unit_closure", make(), "x: n")
    with pytest.raises(ScriptError, match="unit_closure.*neither copied.*nor imported"):
        standalone_script("grad", Case("unit_closure", (Arg((2,)),)), target=closure)

    class Call:  # a callable object of fuzzdiff's own (as OpInfo targets are): never imported
        def __call__(self, x):
            return x * 2
    Call.__module__ = "fuzzdiff.targets.opinfo.adapter"
    wrapped = Target("unit_call", Call(), "x: n")
    with pytest.raises(ScriptError, match="unit_call.*is a Call.*nor imported"):
        standalone_script("grad", Case("unit_call", (Arg((2,)),)), target=wrapped)


# -- as programs: passing cases print OK -----------------------------------------------

PROGRAMS = [("exp", "grad"), ("conv1d", "forward"), ("solve", "gradgrad"), ("permute", "layout"),
            ("add", "alias"), ("index_add", "mutation"), ("layer_norm", "dtype"),
            ("cross_entropy", "grad")]


def test_passing_cases_print_ok_as_programs(tmp_path):
    """Catalog cases, and a user target whose code cannot be copied (a tensor
    constant): it is imported from the user's module, with a note saying so."""
    sources = []
    for name, check in PROGRAMS:
        target = get_target(name)
        case = first_cases(check, target, n=2)[-1]
        assert run_check(check, target, case).kind == "pass"
        sources.append(standalone_script(check, case, target=target))
    (tmp_path / "usermod.py").write_text(
        "import torch\nSCALE = torch.tensor(3.0, dtype=torch.float64)\n\n"
        "def scaled(x):\n    return x * SCALE\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import usermod
        target = Target("usermod:scaled", usermod.scaled, "x: n")
        sources.append(standalone_script("grad", first_cases("grad", target, n=2)[-1], target=target))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("usermod", None)
    assert "from usermod import scaled" in sources[-1]
    assert "is user code, imported here" in sources[-1]
    results = run_programs(sources, tmp_path, env={"PYTHONPATH": str(tmp_path)})
    for what, (code, out) in zip([*PROGRAMS, "usermod:scaled"], results):
        assert code == 0 and out.splitlines()[-1].startswith("OK: "), (what, out)


# -- planted bugs: found by fuzzing, reproduced by the script ----------------------------

# One planted bug per check, in two groups so that xdist can run them side by side.
ZOO_GROUPS = [["atan_offset0", "silu_wrong_jvp", "xexp_detached", "sin_fwd_offset0"],
              ["exp_diff_storage_cache", "xtanh_scratch", "square_polarization", "rowsum_out_dims",
               "xexp_jvp_detached"]]


# The compile check's zoo bugs need a compiler in each subprocess (tens of seconds
# each): their scripts are not run here yet.
NOT_RUN_HERE = {"compile", "checkpoint"}  # checkpoint's random zoo bug: its own script test below


def test_zoo_groups_cover_every_scripted_check_the_zoo_has_bugs_for():
    assert {by_name(n).check for g in ZOO_GROUPS for n in g} == \
        {p.check for p in ZOO} & set(SCRIPTED) - NOT_RUN_HERE


def zoo_scripts(names):
    """(planted bug, FuzzFailure, script) for each bug, found by fuzzing."""
    out = []
    for name in names:
        p = by_name(name)
        with pytest.raises(FuzzFailure) as info:
            fuzz(p.check, p.bug, FuzzConfig(variants=8, structures=1), settings=fuzz_settings(200))
        e = info.value
        out.append((p, e, standalone_script(p.check, e.case, e.verdict, target=p.bug)))
    return out


@pytest.mark.parametrize("names", ZOO_GROUPS, ids=["group0", "group1"])
def test_planted_bugs_print_mismatch_and_exit_1(names, tmp_path):
    """Run together, with fuzzdiff unimportable; a grad bug also alone as `python -I repro.py`."""
    found = zoo_scripts(names)
    for _, _, source in found:
        assert_torch_only(source)
    results = run_programs([s for _, _, s in found], tmp_path)
    for (p, e, _), (code, out) in zip(found, results):
        last = out.splitlines()[-1]
        assert code == 1 and last.startswith("MISMATCH: "), (p.name, out)
        errors = e.verdict.errors
        if "analytic" in errors:  # a directional identity: the very numbers judged
            assert repr(errors["analytic"]) in out and repr(errors["reference"]) in out, \
                (p.name, errors, out)
        elif "abs_error" in errors:  # a tensor comparison: the same worst error
            assert f"abs error {errors['abs_error']:.3g}" in last, (p.name, errors, out)
        else:
            assert p.check == "mutation" and errors["stage"] in last

    grad = [source for p, _, source in found if p.check == "grad"]
    if not grad:
        return
    path = tmp_path / "repro.py"
    path.write_text(grad[0])
    r = subprocess.run([sys.executable, "-I", str(path)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("MISMATCH: <J^T v, u>"), r.stdout


# -- checkpoint: the check's own torch-only functions, copied --------------------------

def test_checkpoint_scripts_print_ok_for_a_right_target_and_mismatch_for_a_planted_one(tmp_path):
    """Both variants: the stochastic-depth zoo bug (its coin from Python's random,
    which checkpoint's recomputation does not restore) prints MISMATCH with the
    check's worst error; its twin and a catalog target print OK."""
    p = by_name("drop_path_python_random")
    runs = []
    for reentrant in (False, True):
        for target in (p.bug, p.twin):
            for seed in range(8):
                case = Case(target.ref, (Arg((3,), Values(seed=seed)),),
                            params={"reentrant": reentrant, "rng": {"seed": seed}, "cotangent": {"seed": seed}})
                verdict = run_check("checkpoint", target, case)
                if target is p.twin or verdict.kind == "fail":
                    runs.append((target, case, verdict))
                    break
    matmul = get_target("matmul")
    case = first_cases("checkpoint", matmul, n=2)[-1]
    runs.append((matmul, case, run_check("checkpoint", matmul, case)))
    assert [v.kind for _, _, v in runs] == ["fail", "pass", "fail", "pass", "pass"]
    sources = [standalone_script("checkpoint", c, v, target=t) for t, c, v in runs]
    for source in sources:
        assert_torch_only(source)
        assert "def outputs_and_grads(" in source and "from torch.utils.checkpoint import checkpoint" in source
    for (_, _, verdict), (code, out) in zip(runs, run_programs(sources, tmp_path)):
        last = out.splitlines()[-1]
        if verdict.kind == "fail":
            assert code == 1 and last.startswith("MISMATCH: grad of x"), out
            assert f"abs error {verdict.errors['abs_error']:.3g}" in last, (verdict, out)
        else:
            assert code == 0 and last.startswith("OK: "), out


def test_forward2_script_says_ok_for_a_right_jvp_and_mismatch_for_a_wrong_one(tmp_path):
    """A check that states its own script (Check.script): the planted jvp whose
    derivative is wrong prints MISMATCH with the judged numbers, its twin
    OK, as programs without fuzzdiff; both scripts run the check's own
    torch-only functions, copied by source."""
    (p, e, bug), = zoo_scripts(["xexp_jvp_detached"])
    case = replace(e.case, target=p.twin.name)
    # the twin's only mismatch is torch's own nested-jvp bug through a
    # Function (pytorch/pytorch#197867), named for it and known
    known = run_check("forward2", p.twin, case)
    assert matching(p.twin.known, "forward2", case, known) is NESTED_JVP_FUNCTION, known.message
    twin = standalone_script("forward2", case, target=p.twin)
    for source in (bug, twin):
        assert_torch_only(source)
        assert "def reverse_over_forward(f, leaves, u, u2, w):" in source
        assert "def forward_over_forward(f, leaves, u, u2, w):" in source
        assert "def second_difference(f, leaves, u, u2, w, eps):" in source
    (code, out), (twin_code, twin_out) = run_programs([bug, twin], tmp_path)
    assert code == 1 and out.splitlines()[-1].startswith("MISMATCH: <w, d2f[u, u']> reverse-over-forward"), out
    assert repr(e.verdict.errors["analytic"]) in out and repr(e.verdict.errors["reference"]) in out, out
    function_bug = "<w, d2f[u, u']> forward-over-forward through a custom autograd.Function"
    assert twin_code == 1 and twin_out.splitlines()[-1].startswith(f"MISMATCH: {function_bug}"), twin_out
    assert "reverse-over-forward" not in twin_out.splitlines()[-1], twin_out


# -- a script runs fuzzdiff's own computations, copied, not restated -------------------

def test_the_shared_helpers_are_fuzzdiffs_own_functions_copied():
    def body(tree: ast.Module, name: str) -> str:
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        return ast.dump(ast.Module(body=fn.body, type_ignores=[]))

    for fn in (vjp, dot, absdot, max_abs, mismatch, directional_difference):
        assert fn.__name__ in COPIED
        copied = ast.parse("\n\n".join(helper_source([fn.__name__])))
        assert body(copied, fn.__name__) == body(ast.parse(textwrap.dedent(inspect.getsource(fn))), fn.__name__)
    a, b = [torch.randn(3, 2, dtype=torch.float64)], [torch.randn(3, 2, dtype=torch.float32)]
    ns = {"torch": torch, "math": math}
    exec("\n\n".join(helper_source(["dot", "absdot", "mismatch"])), ns)  # noqa: S102 - fuzzdiff's own code
    assert ns["dot"](a, b) == dot(a, b) and ns["absdot"](a, b) == absdot(a, b)
    assert ns["mismatch"](a[0], b[0]) == mismatch(a[0], b[0])


# -- the compile check's transforms: the wrappers the check ran, copied -----------------

def test_compile_transform_scripts_print_ok_and_mismatch(tmp_path):
    """A script for every transform (mul, aot_function or aot_eager: a compile each)
    prints OK where the check passes; the zoo's Function whose backward a compiled
    torch.func.grad drops prints MISMATCH, with the error the check judged."""
    from dataclasses import replace

    from fuzzdiff.paths.compiled import TRANSFORMS, grad_transform

    def transform_case(target, transform, backend):
        base = next(c for c in first_cases("compile", target, n=40)
                    if "transform" in c.params and math.prod(c.args[0].shape) > 1)
        return replace(base, params={**base.params, "transform": transform, "backend": backend})

    mul, sources = get_target("mul"), []
    for k, transform in enumerate(t for t in TRANSFORMS if t != "none"):
        case = transform_case(mul, transform, ("aot_function", "aot_eager")[k % 2])
        verdict = run_check("compile", mul, case)
        assert verdict.kind == "pass", (transform, verdict)
        sources.append(standalone_script("compile", case, verdict, target=mul))
    p = by_name("sin_no_grad_fast_path")
    case = transform_case(p.bug, "grad", "aot_eager")
    verdict = run_check("compile", p.bug, case)
    assert verdict.failed, verdict
    sources.append(standalone_script("compile", case, verdict, target=p.bug))
    for source in sources:
        assert_torch_only(source)
    assert "def grad_transform(f, n, wrt):" in sources[0]  # copied, not restated
    copied = ast.parse(textwrap.dedent(inspect.getsource(grad_transform)))
    assert ast.dump(copied.body[0].body[-1]) in {ast.dump(n.body[-1]) for n in ast.parse(sources[0]).body
                                                 if isinstance(n, ast.FunctionDef) and n.name == "grad_transform"}
    results = run_programs(sources, tmp_path)
    for (code, out) in results[:-1]:
        assert code == 0 and out.splitlines()[-1].startswith("OK: "), out
    code, out = results[-1]
    assert code == 1 and out.splitlines()[-1].startswith("MISMATCH: "), out
    assert f"abs error {verdict.errors['abs_error']:.3g}" in out.splitlines()[-1], (verdict.errors, out)


def test_the_compile_script_passes_kwargs_and_a_programs_numbers_through_a_closure():
    """As fuzzdiff.paths.compiled passes them: dynamo traces a number it reaches
    through a closure as symbolic and a literal as a constant, which decides whether
    a bug shows (corpus records 1b22a5e38ab20261, 25c92fb2a59fac38). Other checks'
    scripts write them as literals; the function computes the same either way."""
    from fuzzdiff.case.programs import Program, run_program

    program = Program(1, (
        {"op": "slice", "x": 0, "dim": 1, "start": 1, "stop": 3, "step": 1},
        {"op": "transpose", "x": 1, "dim0": 0, "dim1": 1},
        {"op": "select", "x": 2, "dim": 0, "index": 1},
        {"op": "view", "x": 3, "shape": [1, 4]},
        {"op": "expand", "x": 4, "shape": [3, 4]},
        {"op": "call", "x": 5, "fn": "mul", "other": 5},
        {"op": "add_", "x": 0, "other": None, "scalar": 0.5},
        {"op": "clamp_", "x": 1, "min": -1.0, "max": 1.5},
    ))
    target = get_target("program_inplace")
    base = first_cases("compile", target)[0]
    params = {k: v for k, v in base.params.items() if k != "aliases"}
    case = replace(base, args=(Arg((4, 3), Values(seed=1)),), kwargs={"program": program.to_json()},
                   params={**params, "backend": "aot_eager", "transform": "none"})
    source = standalone_script("compile", case, target=target)
    [definition] = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "program"]
    held = [a.arg for a in definition.args.kwonlyargs]
    assert held == ["start_0", "stop_0", "step_0", "dim0_1", "dim1_1", "dim_2", "index_2", "shape_3", "shape_4",
                    "scalar_6", "min_7", "max_7"], ast.unparse(definition)
    assert not [n for n in ast.walk(definition) if isinstance(n, ast.Constant) and type(n.value) in (int, float)]
    assert "call = call_with({'start_0': 1, 'stop_0': 3, 'step_0': 1, " in source
    x = torch.randn(4, 3)
    for numbers_as_kwargs in (False, True):  # the same function, its numbers passed or written
        code = target_code(run_program, "program", case.kwargs, ["a"], numbers_as_kwargs=numbers_as_kwargs)
        ns: dict = {"torch": torch}
        exec("\n".join(code.definitions), ns)  # noqa: S102 - the code under test
        got, want = x.clone(), x.clone()
        outs, expected = ns["program"](got, **code.kwargs), run_program(want, program=case.kwargs["program"])
        assert len(outs) == len(expected) == 6 and all(torch.equal(o, e) for o, e in zip(outs, expected))
        assert torch.equal(got, want)
        assert bool(code.kwargs) == numbers_as_kwargs

    addcdiv = get_target("addcdiv")
    case = next(c for c in first_cases("compile", addcdiv, n=20) if c.kwargs)
    compiled_source, grad_source = (standalone_script(c, case, target=addcdiv) for c in ("compile", "grad"))
    assert "**kwargs)" in compiled_source and "call = call_with({'value': " in compiled_source
    assert "call_with" not in grad_source and "value=" in grad_source
    args = [torch.randn(3), torch.randn(3), torch.rand(3) + 1]
    assert torch.equal(namespace(compiled_source)["call"](*args), torch.addcdiv(*args, **case.kwargs))


def test_a_compile_grad_script_whose_eager_side_raised_runs_it_first():
    """grad's and vjp's cotangents are drawn like the outputs: where the eager side
    raised when the script was written there are none, and the script calls the
    function first: it raises its own error, or, where that runs, the script says
    that nothing else is compared (no error on the missing cotangents)."""
    target = Target("unit_flat_view", lambda x: x.view(-1) * 2, "x: n m")
    base = next(c for c in first_cases("compile", get_target("mul"), n=40) if "transform" in c.params)
    case = Case(target.name, (Arg((2, 3), Values(seed=1), Layout(6, (1, 2), 0)),), dtype="float64",
                params={**base.params, "transform": "grad", "backend": "aot_eager"})
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        target.fn(case.materialize(requires_grad=False).args[0])
    source = standalone_script("compile", case, target=target)
    assert "PROBES = [\n]" in source and "    if not PROBES:  # the function raised RuntimeError" in source
    code, out = run_main(source)
    assert code == "raised RuntimeError" and "view size is not compatible" in out, out
    # where the function runs (a torch that views it), the script says what it could not compare
    runs = source.replace("x.view(-1)", "x.reshape(-1)")
    assert runs != source
    code, out = run_main(runs)
    assert code == 0 and out.splitlines()[-1].startswith("OK: the function runs at the arguments"), out


def test_each_script_copies_its_own_checks_functions_even_of_one_name():
    """paths.expanded and the checkpoint check each have a ``floating``: a script
    gets its own check's, whichever script was written first in the process."""
    from fuzzdiff.checks import checkpoint
    from fuzzdiff.paths import expanded
    from fuzzdiff.script.helpers import copies

    def last_statement(fn):
        return ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body[-1])

    for first, second in ((expanded.by_loop, checkpoint.outputs_and_grads),
                          (checkpoint.outputs_and_grads, expanded.by_loop)):
        _, _, a = copies([first])
        _, _, b = copies([second])
        for fn, table in ((first, a), (second, b)):
            floating = sys.modules[fn.__module__].floating
            assert last_statement(floating) in table["floating"][0]
