"""fuzzdiff.check, fuzzdiff.assert_ok and `fuzzdiff check` on the user's own code."""

import subprocess
import sys

import pytest
import torch

import fuzzdiff
from fuzzdiff.api import ThinWarning
from fuzzdiff.checks import UnknownCheck
from fuzzdiff.cli import main
from fuzzdiff.record.files import read_record
from fuzzdiff.corpus.repro import replay
from fuzzdiff.case.spec import SpecError
from tests.unit.fdhelpers import WrongSquare

USER_MODULE = '''
import torch


class Cube(torch.autograd.Function):
    """x**3 whose backward reads x as if it were contiguous (a layout bug)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = x.as_strided(x.shape, torch.empty(x.shape).stride(), x.storage_offset())
        return 3 * g * x * x


def softplus(x):
    return torch.nn.functional.softplus(x)
'''


@pytest.fixture
def user_module(importable):
    return importable("user_ops", USER_MODULE)


def test_check_finds_a_bug_and_records_a_replayable_case(user_module, tmp_path):
    report = fuzzdiff.check(user_module.Cube.apply, "x: n m", checks=("grad",), max_examples=60,
                            seed=0, corpus=tmp_path / "corpus")
    assert not report.ok and report.row("grad")["failed"] >= 1
    # the wrong values; its backward also raises for a stride-0 input, reported apart (input-domain)
    failure = next(f for f in report.failures if f.check == "grad")
    assert failure.record_path.exists()
    assert failure.blame.whose == "user" and "Cube" in failure.blame.evidence
    assert f"fuzzdiff repro {failure.record_path}" in report.summary()
    record = read_record(failure.record_path)
    assert record.target == "user_ops:Cube.apply" and record.definition["spec"] == "x: n m"
    assert replay(record).failed
    # and from a fresh process, by the console command
    done = subprocess.run([sys.executable, "-m", "fuzzdiff", "repro", str(failure.record_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and "reproduced" in done.stdout, done.stdout + done.stderr


def test_a_correct_function_passes_every_check_that_applies(user_module):
    report = fuzzdiff.check(user_module.softplus, "x: *b n", max_examples=8, seed=0)
    assert report.ok, report.summary()
    assert set(report.tallies) == set(fuzzdiff.api.CHECKS)
    assert all(report.row(c)["examples"] > 0 for c in report.tallies)
    text = report.summary()
    assert "grad" in text and "unsupported" in text


def test_missing_forward_formula_is_unsupported_not_a_failure():
    class NoJvp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos()

    report = fuzzdiff.check(NoJvp.apply, "x: n", checks=("forward",), max_examples=5, seed=0)
    assert report.ok and report.tallies["forward"].only_unsupported
    assert "jvp" in report.summary()


def test_assert_ok_raises_with_the_repro(user_module, tmp_path):
    with pytest.raises(AssertionError, match="fuzzdiff repro"):
        fuzzdiff.assert_ok(user_module.Cube.apply, "x: n m", checks=["grad"], max_examples=60,
                           seed=0, corpus=tmp_path / "c")
    assert fuzzdiff.assert_ok(user_module.softplus, "x: n", checks=["grad"], max_examples=5).ok


def test_spec_from_jaxtyping_annotations():
    jaxtyping = pytest.importorskip("jaxtyping")
    Float = jaxtyping.Float

    def scaled(x: Float[torch.Tensor, "*b n"], w: Float[torch.Tensor, "n"], scale: float = 2.0):
        return x * w * scale

    report = fuzzdiff.check(scaled, checks=["grad"], max_examples=5, seed=0)
    assert report.target.spec == "x: *b n, w: n" and report.ok


def test_bad_arguments_are_precise_errors():
    with pytest.raises(SpecError, match=r"\^"):
        fuzzdiff.check(torch.sin, "x: n (m", max_examples=1)
    with pytest.raises(UnknownCheck, match="expected one of"):
        fuzzdiff.check(torch.sin, "x: n", checks=["gard"], max_examples=1)
    with pytest.raises(ValueError, match="domain names unknown"):
        fuzzdiff.check(torch.sin, "x: n", domain={"y": (0, None)}, max_examples=1)
    with pytest.raises(ValueError, match="max_examples"):
        fuzzdiff.check(torch.sin, "x: n", max_examples=0)
    with pytest.raises(ValueError, match="no jaxtyping annotations"):
        fuzzdiff.check(lambda x: x, max_examples=1)


def test_the_check_command_exit_statuses(user_module, tmp_path, capsys):
    assert main(["check", "user_ops:softplus", "--spec", "x: n", "--checks", "grad",
                 "--max-examples", "5", "--seed", "0"]) == 0
    assert main(["check", "user_ops:softplus", "--spec", "x: n", "--checks", "grad", "--budget", "2",
                 "--structured", "--seed", "0"]) == 0
    assert main(["check", "user_ops:Cube.apply", "--spec", "x: n m", "--checks", "grad", "layout",
                 "--max-examples", "60", "--seed", "0", "--corpus", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "FAILED grad" in out and "fuzzdiff repro" in out
    for bad in (["check", "user_ops:nope", "--spec", "x: n"],
                ["check", "user_ops:softplus", "--spec", "x: n (m"],
                ["check", "user_ops:softplus", "--spec", "x: n", "--domain", "x=zero:"],
                ["check", "user_ops:softplus", "--spec", "x: n", "--checks", "gard"],
                ["check", "user_ops:softplus", "--spec", "x: n", "--structured", "zeroes"],
                ["check", "user_ops:softplus", "--spec", "x: n", "--budget", "0"]):
        assert main(bad) == 2
        err = capsys.readouterr().err
        assert err.startswith("fuzzdiff: error:") and "Traceback" not in err


CUSTOM_OPS = '''
import torch
from torch import Tensor


@torch.library.custom_op("fuzzdiff_test::double", mutates_args=())
def double(x: Tensor) -> Tensor:
    return x * 2


@double.register_fake
def _(x):
    return x.new_empty(x.shape)  # the bug: contiguous, where the kernel keeps x's strides


@torch.library.custom_op("fuzzdiff_test::double_ok", mutates_args=())
def double_ok(x: Tensor) -> Tensor:
    return x * 2


@double_ok.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    pass


def _backward(ctx, g):
    return g * 2


double.register_autograd(_backward, setup_context=_setup)
double_ok.register_autograd(_backward, setup_context=_setup)
'''


def test_custom_op_fake_kernel_strides(importable):
    """opcheck at fuzzed layouts finds a fake kernel that guesses contiguous strides."""
    ops = importable("user_custom_ops", CUSTOM_OPS)
    # one variant: opcheck's verdict does not depend on values
    bad = fuzzdiff.check(ops.double, "x: n m", checks=["opcheck"], max_examples=40, seed=3, variants=1)
    assert not bad.ok and "Stride mismatch" in bad.failures[0].message
    assert bad.target.name == "user_custom_ops:double"
    good = fuzzdiff.check(ops.double_ok, "x: n m", checks=["opcheck", "grad"], max_examples=15, seed=0)
    assert good.ok, good.summary()
    assert fuzzdiff.check(torch.sin, "x: n", checks=["opcheck"], max_examples=1).tallies["opcheck"].only_unsupported


def test_a_correct_register_autograd_op_is_unsupported_in_forward_mode_not_failed(importable):
    """torch gives such an op zero tangents silently: that is torch's, reported with a warning."""
    ops = importable("user_custom_ops", CUSTOM_OPS)
    report = fuzzdiff.check(ops.double_ok, "x: n m", checks=["forward", "grad", "gradgrad", "vmap"],
                            max_examples=15, seed=0)
    assert report.ok, report.summary()
    forward = report.tallies["forward"]
    assert forward.counts["unsupported"] > 0 and forward.counts["fail"] == 0
    assert "fuzzdiff_test::double_ok" in forward.reasons["unsupported"]
    assert any("zero tangents silently" in text for text in report.warnings)


class _OwnNotImplemented(torch.autograd.Function):
    """A backward left unfinished for larger inputs: the function's own NotImplementedError."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.numel() > 2:
            raise NotImplementedError("the large case is left for later")
        return g * x.cos()


def _raises_in_eager(x):
    if x.dim() == 2 and x.shape[0] != x.shape[1]:
        raise ValueError("only square matrices, by mistake")
    return x.cos()


def test_a_not_implemented_error_of_the_function_itself_is_a_failure_not_unsupported():
    report = fuzzdiff.check(_OwnNotImplemented.apply, "x: n", checks=["grad"], max_examples=30, seed=0)
    (failure,) = report.failures
    assert failure.check == "input-domain" and failure.blame.whose == "user"
    assert "raises NotImplementedError" in failure.message and "the large case" in failure.message
    # torch's own "no formula" stays unsupported
    class NoJvp(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 3

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return 3 * g
    report = fuzzdiff.check(NoJvp.apply, "x: n", checks=["forward"], max_examples=5, seed=0)
    assert report.ok and report.tallies["forward"].only_unsupported


def test_an_exception_of_eager_under_the_compile_check_is_a_failure():
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.target import Target

    target = Target("raises_in_eager", _raises_in_eager, "x: n m")
    case = Case("raises_in_eager", (Arg((2, 3)),), params={"backend": "aot_eager"})
    verdict = run_check("compile", target, case)
    assert verdict.kind == "fail" and "ValueError: only square matrices" in verdict.message
    assert run_check("compile", target, Case("raises_in_eager", (Arg((3, 3)),),
                                             params={"backend": "aot_eager"})).kind == "pass"


def test_a_module_is_fuzzed_in_its_inputs_and_its_parameters():
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    report = fuzzdiff.check(module, "x: b 3", checks=["grad"], dtypes=[torch.float64],
                            max_examples=10, seed=0)
    assert report.target.spec == "x: b 3, p_0_weight: 2 3, p_0_bias: 2"
    assert report.ok, report.summary()

    class Broken(torch.nn.Module):
        """w - w.detach() is 0 in value but 1 in derivative: the weight's gradient is 1.5 x, not x."""

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w + (x * (self.w - self.w.detach())) * 0.5

    bad = fuzzdiff.check(Broken(), "x: 3", checks=["grad"], dtypes=[torch.float64], max_examples=20, seed=0)
    assert not bad.ok and bad.failures[0].check == "grad"
    # dropout in training mode: checked with every call seeded alike (tests/unit/search/test_randomness.py)
    assert fuzzdiff.check(torch.nn.Dropout(0.5), "x: n", checks=["grad"], max_examples=5).target.random


def test_a_module_gets_the_per_sample_check():
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    report = fuzzdiff.check(module, "x: b 3", checks=["per_sample"], max_examples=6, seed=0)
    assert report.ok and report.row("per_sample")["passed"] > 0, report.summary()
    # a spec without a batch dim to take samples along: per_sample cannot apply, the other checks still run
    for spec in ("x: 2 3", "x: *b 3"):
        unbatched = fuzzdiff.check(module, spec, checks=["grad", "per_sample"], max_examples=3, seed=0)
        assert unbatched.ok and unbatched.tallies["per_sample"].only_unsupported, unbatched.summary()
        assert "same named batch dim" in unbatched.tallies["per_sample"].reasons["unsupported"]
        assert unbatched.row("grad")["passed"] > 0


class _NeedsRank3(torch.nn.Module):
    """A module of (b, n, d) inputs that its own code refuses under vmap at an empty sample."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, z):
        if z.dim() != 3:
            raise ValueError(f"needs (b, n, d), got {tuple(z.shape)}")
        if torch._C._functorch.maybe_get_level(z) != -1 and z.numel() == 0:
            raise RuntimeError("this module does not run under vmap at an empty sample")
        return self.lin(z)


def test_a_per_sample_failure_is_judged_for_its_domain_on_a_batch_of_its_sample():
    """per_sample draws one sample (the spec's batch dim dropped). Whether its
    input lies in the function's domain is the module's plain call on a batch
    of that sample, in the sample's dtype: called on the sample itself, a
    module of (b, n, d) inputs "raised at this input, in its plain call"."""
    report = fuzzdiff.check(_NeedsRank3(), "z: b n 4", checks=["per_sample"], seed=0, max_examples=20)
    assert [f.check for f in report.failures] == ["per_sample"], report.summary()
    assert "does not run under vmap" in report.failures[0].message


def test_shrinking_stops_at_its_time_bound_and_the_report_says_so():
    bounded = fuzzdiff.check(WrongSquare.apply, "x: n m", checks=("grad",), seed=3, shrink_seconds=0)
    # unshrunk, one bug may show as two root causes (at other structured points)
    failure = bounded.failures[0]
    assert all(f.shrink_cut for f in bounded.failures) and "cut short" in bounded.summary()
    full = fuzzdiff.check(WrongSquare.apply, "x: n m", checks=("grad",), seed=3, shrink_seconds=None)
    assert not full.failures[0].shrink_cut and "cut short" not in full.summary()
    # shrunk in full: no bigger than what the bounded run reported
    assert sum(map(len, (a.shape for a in full.failures[0].case.args))) <= \
        sum(map(len, (a.shape for a in failure.case.args)))


def test_a_spec_that_does_not_fit_the_signature_is_a_usage_error(importable, capsys):
    def two(x, y):
        return x * y

    with pytest.raises(ValueError, match=r"names 1 tensor argument\(s\), but .*two\(x, y\) takes 2"):
        fuzzdiff.check(two, "x: n")
    with pytest.raises(ValueError, match="names 3 tensor"):
        fuzzdiff.check(two, "x: n, y: n, z: n")
    fuzzdiff.check(lambda x, scale=2.0: x * scale, "x: n", checks=("grad",), max_examples=2)  # a default may stay
    importable("user_two", "def two(x, y):\n    return x * y\n")
    assert main(["check", "user_two:two", "--spec", "x: n", "--checks", "grad"]) == 2
    assert "takes 2 positional" in capsys.readouterr().err


def test_a_function_undefined_at_size_zero_passes_with_bounded_sizes():
    def mean_of_rows(x):
        if x.shape[0] == 0:
            raise ValueError("no rows")
        return x.mean(0)

    unbounded = fuzzdiff.check(mean_of_rows, "x: n m", checks=("grad",), seed=1, max_examples=30)
    assert not unbounded.ok  # size 0 is drawn by default
    for options in ({"spec": "x: n>=1 m"}, {"spec": "x: n m", "sizes": (1, 4)}):
        report = fuzzdiff.check(mean_of_rows, checks=("grad", "forward", "layout"), seed=1, max_examples=30,
                                **options)
        assert report.ok, report.summary()
    with pytest.raises(ValueError, match="sizes must be"):
        fuzzdiff.check(mean_of_rows, "x: n m", sizes=(3, 1))


def test_a_crash_in_the_users_function_leaves_a_crash_record(tmp_path):
    """fuzzdiff.check(corpus=...) journals each example: the process dies, the record stays."""
    (tmp_path / "user_abort.py").write_text(
        "import os\n\ndef fn(x):\n    if x.numel() >= 2:\n        os.abort()\n    return x.sin()\n")
    code = ("import fuzzdiff, user_abort\n"
            "fuzzdiff.check(user_abort.fn, 'x: n', checks=('grad',), seed=1, corpus='corpus')\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode != 0
    from fuzzdiff.record.journal import recover
    (path,) = recover(tmp_path / "corpus")
    record = read_record(path)
    assert record.verdict.kind == "crash" and record.check == "grad"
    assert record.case.materialize(requires_grad=False).args[0].numel() >= 2


def test_a_function_that_raises_at_some_input_is_one_input_domain_finding(tmp_path):
    def picky(x):
        if x.numel() and float(x.detach().double().abs().max()) > 1.5:
            raise ValueError("too large")
        return x.sin()

    report = fuzzdiff.check(picky, "x: n", checks=("grad", "forward", "layout", "vmap"), seed=2,
                            corpus=tmp_path)
    (failure,) = report.failures
    assert failure.check == "input-domain" and "raises ValueError" in failure.message
    assert len(list(tmp_path.glob("*/*/*.json"))) == 1  # one record, not one per check
    assert all(report.tallies[c].counts["pass"] > 0 for c in ("grad", "forward", "layout", "vmap"))
    declared = fuzzdiff.check(picky, "x: n", checks=("grad", "forward"), seed=2, invalid=(ValueError,))
    assert declared.ok, declared.summary()


def test_layout_features_and_aliasing_can_be_switched_off_for_one_run():
    seen = []

    def spy(x, y):
        seen.append((x.is_contiguous(), y.is_contiguous(), x.untyped_storage().data_ptr() ==
                     y.untyped_storage().data_ptr() and x.numel() > 0))
        return x * y

    report = fuzzdiff.check(spy, "x: n m, y: n m", checks=("grad", "alias"), seed=4, max_examples=40,
                            layouts=(), alias=False)
    assert report.ok and report.tallies["alias"].only_unsupported
    assert seen and all(cx and cy and not shared for cx, cy, shared in seen)
    seen.clear()
    fuzzdiff.check(spy, "x: n m, y: n m", checks=("grad",), seed=4, max_examples=40)
    assert not all(cx and cy for cx, cy, _ in seen)  # by default, strided layouts are drawn
    with pytest.raises(ValueError, match="unknown layout feature"):
        fuzzdiff.check(spy, "x: n m, y: n m", layouts=("diagonal",))


def test_warnings_inside_the_runs_are_summarized_once_not_printed(capsys):
    import warnings

    def noisy(x):
        warnings.warn("a performance drop, every call", UserWarning)
        return x.sin()

    report = fuzzdiff.check(noisy, "x: n", checks=("grad", "forward"), seed=1, max_examples=10)
    assert report.ok
    captured = capsys.readouterr()
    assert "performance drop" not in captured.err + captured.out
    n = report.warnings["UserWarning: a performance drop, every call"]
    assert n > 20
    assert f"warning, {n} time(s) during the run: UserWarning: a performance drop" in report.summary()


def test_a_lambda_in_a_script_leaves_a_record_that_replays_in_a_fresh_process(tmp_path):
    """Neither a lambda nor __main__ imports back: the record stores the source
    (of the lambda and of the autograd.Function it calls), which runs only on
    --trust-source."""
    (tmp_path / "script.py").write_text(
        "import torch, fuzzdiff\n\n"
        "class Twice(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * x\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return 3 * g * x\n\n"
        "report = fuzzdiff.check(lambda x: Twice.apply(x) + 1, 'x: n', checks=('grad',), seed=1,\n"
        "                        corpus='corpus')\n"
        "assert not report.ok\n")
    env = {**__import__("os").environ}
    run = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    (path,) = tmp_path.glob("corpus/grad/*/*.json")
    record = read_record(path)
    assert "class Twice" in "\n".join(record.definition["source"]["definitions"])
    repro = [sys.executable, "-m", "fuzzdiff.cli", "repro", str(path)]
    refused = subprocess.run(repro, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 2 and "--trust-source" in refused.stderr
    trusted = subprocess.run(repro + ["--trust-source"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env=env)
    assert trusted.returncode == 1 and "reproduced" in trusted.stdout, trusted.stdout + trusted.stderr
    script = subprocess.run(repro + ["--trust-source", "--script"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env=env)
    assert script.returncode == 0 and "class Twice" in script.stdout, script.stderr[-2000:]
    (tmp_path / "repro.py").write_text(script.stdout)
    ran = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    assert "MISMATCH" in ran.stdout, ran.stdout + ran.stderr


def test_the_summary_counts_drawn_cases_and_their_runs():
    report = fuzzdiff.check(torch.sin, "x: n", checks=("grad",), seed=1, max_examples=10, variants=3)
    row = report.row("grad")
    assert 0 < row["cases"] <= 10 and row["examples"] == 3 * row["cases"] == row["passed"]
    header = next(line for line in report.summary().splitlines() if "judged" in line)
    assert "runs" in header and "rejected" in header and "unsupported" in header and "seconds" in header


ADAPTIVE = '''
import torch


def integrate(x):
    """exp(-x) by RK4 on y' = -x y over [0, 1], on a grid that the solution
    chooses (detached, as adaptive step control is): accurate to about 1e-5,
    and so are its gradients, which miss the grid's dependence on x."""
    y = torch.ones_like(x)
    p = 1.0 + 0.5 * torch.tanh(x.detach())
    n = 40
    t_prev = torch.zeros_like(x)
    for k in range(1, n + 1):
        t = (k / n) ** p
        h = t - t_prev
        k1 = -x * y
        k2 = -x * (y + h / 2 * k1)
        k3 = -x * (y + h / 2 * k2)
        k4 = -x * (y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t_prev = t
    return y
'''


def test_a_declared_tolerance_accepts_an_adaptive_solvers_accuracy(importable, tmp_path):
    solver = importable("adaptive_solver", ADAPTIVE)
    strict = fuzzdiff.check(solver.integrate, "x: n", checks=("grad",), seed=1, max_examples=30)
    (failure,) = strict.failures
    assert failure.check == "grad" and failure.blame.whose == "user"
    declared = fuzzdiff.check(solver.integrate, "x: n", checks=("grad",), seed=1, max_examples=30, rtol=1e-4,
                              corpus=tmp_path / "corpus")
    assert declared.ok, declared.summary()
    assert "tolerances declared: rtol=0.0001, atol=0 for every check" in declared.summary()
    # per check, and from the shell; a record replays under the tolerance it was found with
    assert fuzzdiff.check(solver.integrate, "x: n", checks=("grad",), seed=1, max_examples=30,
                          rtol={"grad": 1e-4}).ok
    assert main(["check", "adaptive_solver:integrate", "--spec", "x: n", "--checks", "grad", "--seed", "1",
                 "--max-examples", "30", "--rtol", "grad=1e-4"]) == 0
    with pytest.raises(UnknownCheck):
        fuzzdiff.check(solver.integrate, "x: n", rtol={"gradd": 1e-4})
    with pytest.raises(ValueError, match="rtol must be a number >= 0"):
        fuzzdiff.check(solver.integrate, "x: n", rtol=-1.0)


def test_the_summary_says_why_runs_were_inconclusive_and_counts_torchs_logs(capfd):
    import logging

    def kinked(x):
        logging.getLogger("torch._dynamo").warning("a message torch would print")
        return x.clamp(-0.5, 0.5)  # kinks at +-0.5, where drawn values often lie: inconclusive there

    report = fuzzdiff.check(kinked, "x: n", checks=("grad",), seed=3, max_examples=40, sizes=(1, 3))
    text = report.summary()
    assert report.ok
    assert "grad inconclusive:" in text and "vanishes at a neighbouring point" in text
    assert "torch logged" in text and "a message torch would print" in text
    assert "a message torch would print" not in capfd.readouterr().err


def test_a_nan_gradient_names_the_analytic_side_as_the_one_not_finite():
    class NanGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    report = fuzzdiff.check(NanGrad.apply, "x: n", checks=("grad",), seed=0, max_examples=10, isolate=False)
    (failure,) = report.failures
    assert "the analytic side is not finite" in failure.message


class _EmptyBackward(torch.autograd.Function):
    """x * 2 whose backward indexes its first element: it raises for an empty input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        g.reshape(-1)[0]  # IndexError for an empty batch
        return 2 * g


def test_a_backward_that_raises_on_an_empty_input_is_one_input_domain_finding_for_every_check():
    checks = ("grad", "gradgrad", "layout", "alias")
    report = fuzzdiff.check(_EmptyBackward.apply, "x: n", checks=checks, seed=0, max_examples=30)
    (failure,) = report.failures
    assert failure.check == "input-domain" and "in its backward" in failure.message
    assert "IndexError" in failure.message and failure.blame.whose == "user"
    assert all(report.tallies[c].counts["pass"] > 0 for c in checks)  # the checks go on without such inputs


class _BrokenBatchingRule(torch.autograd.Function):
    """x * 2, right in eager use; its own batching rule raises."""

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return 2 * g

    @staticmethod
    def vmap(info, in_dims, x):
        raise ValueError("this batching rule is not written yet")


def test_an_error_only_under_a_transform_is_that_checks_finding_not_the_input_domain():
    report = fuzzdiff.check(_BrokenBatchingRule.apply, "x: n", checks=("grad", "vmap"), seed=0, max_examples=10)
    (failure,) = report.failures
    assert failure.check == "vmap" and "this batching rule is not written yet" in failure.message
    assert failure.blame.whose == "user" and "_BrokenBatchingRule" in failure.blame.evidence
    assert report.tallies["grad"].counts["pass"] > 0


def _empty_refused(x):
    if x.numel() == 0:
        raise ValueError("empty")
    return x.sin()


def test_draws_outside_the_domain_are_rejected_not_failed_and_a_spec_bound_is_advised():
    report = fuzzdiff.check(_empty_refused, "x: n m", checks=("grad", "forward"), seed=0, max_examples=30)
    (failure,) = report.failures
    assert failure.check == "input-domain" and "invalid=(ValueError,)" in failure.message  # its own raise
    for name in ("grad", "forward"):
        row = report.row(name)
        assert row["failed"] == 0 and row["rejected"] > 0 and row["cases"] > 0, report.summary()
    text = report.summary()
    assert text.count("FAILED input-domain") == 1 and text.count("rejected since: ") == 1
    total = sum(report.row(name)["rejected"] for name in ("grad", "forward"))
    assert f"rejected since: {total} draw(s) across the checks" in text
    assert 'advice: the spec "x: n>=1 m>=1" draws none of them (every one had m or n at size 0)' in text
    # every draw outside the domain: no judged case, a thin check for that reason, not an unsupported one
    empty = fuzzdiff.check(_empty_refused, "x: n m", checks=("grad",), seed=0, max_examples=10, sizes=(0, 0))
    assert empty.row("grad")["cases"] == 0 and empty.row("grad")["failed"] == 0 and empty.row("grad")["rejected"]
    assert empty.thin["grad"].reason == "rejected", empty.summary()


def _fft(x):
    return torch.fft.rfft(x).abs()


def test_an_error_raised_inside_a_torch_op_gets_a_spec_bound_not_invalid():
    """invalid=(RuntimeError,) would hide every RuntimeError torch raises, its bugs too. An
    FFT of length 0 is outside its domain; an FFT of an empty batch is torch's bug
    (tests/unit/checking/test_empty_batch.py): neither gets invalid= as advice."""
    report = fuzzdiff.check(_fft, "x: n>=1 m", checks=("grad",), seed=0, max_examples=20)
    assert report.failures and all(f.check == "input-domain" for f in report.failures), report.summary()
    text = report.summary()
    assert "invalid=" not in text and "it is raised inside torch (torch.fft.rfft), at an input the spec allows" in text
    assert 'advice: the spec "x: n>=1 m>=1' in text and report.row("grad")["failed"] == 0


class _OneGradientForTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g * 2  # the bug: one gradient for two inputs, at every input


def _scaled(x):
    return _OneGradientForTwo.apply(x, 2.0)


def test_a_backward_that_breaks_autogradss_contract_is_a_failure_not_an_input_domain():
    """Rejecting such inputs (or advising invalid=) would hide the bug at every input."""
    report = fuzzdiff.check(_scaled, "x: n", checks=("grad",), seed=1, max_examples=10)
    assert [f.check for f in report.failures] == ["grad"], report.summary()
    assert "incorrect number of gradients" in report.failures[0].message
    assert report.row("grad")["rejected"] == 0


def test_assert_ok_passes_a_thin_check_and_warns_of_it():
    with pytest.warns(ThinWarning, match=r"thin: grad judged 3 cases .*max_examples=3"):
        fuzzdiff.assert_ok(torch.sin, "x: n", checks=("grad",), max_examples=3, seed=0)
