"""fuzzdiff.search.localize: a confirmed failure localized to the torch op, the user's rule or the composition.

Each failure below is found by ``fuzzdiff.check`` at a user's plain function,
as a user would meet it; the blame then says where it is. The op-level
findings come with a few lines of torch that fail on their own, run here in
a process of their own.
"""

import subprocess
import sys
import time

import pytest
import torch

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.checking.report import _failure_text
from fuzzdiff.checks import get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.corpus import repro
from fuzzdiff.corpus.bug_report import bug_report
from fuzzdiff.guards.aten_trace import trace_call
from fuzzdiff.search.blame import PYTORCH, USER, Blame, located
from fuzzdiff.search import blame as blame_module
from fuzzdiff.search.aten_program import Unwritable, leading_to
from fuzzdiff.search.localize import localize
from fuzzdiff.search.outcome import FuzzFailure
from fuzzdiff.search.settling import settle
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

F64 = [torch.float64]


def quick(fn, spec, check, **options):
    """One check at float64, a few cases, in this process: its report's failures."""
    options = {
        "dtypes": F64,
        "seed": 0,
        "max_examples": 10,
        "isolate": False,
        "progress": False,
        "shrink_seconds": 2,
        **options,
    }
    report = fuzzdiff.check(fn, spec, checks=[check], **options)
    assert report.failures, report.summary()
    return report.failures


def runs_and_fails(script: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout + done.stderr
    return done


# -- the functions a user would check ----------------------------------------------------------


def gamma_sample(a):
    torch.manual_seed(0)  # the function seeds itself: a deterministic function of a
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
    factor = torch.tril(l, -1) + 2 * torch.eye(l.shape[-1], dtype=l.dtype)
    return torch.cholesky_inverse(factor) * 3


class WrongSin(torch.autograd.Function):
    """sin, with a backward 1.5 times too large."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * 1.5


def with_wrong_rule(x):
    return WrongSin.apply(x * 2).exp()


def cut_graph(x):
    return x.detach() * x  # the derivative through the detached factor is dropped


class Series(torch.Tensor):
    """A library's tensor type: every result re-wrapped as one."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out.as_subclass(cls) if isinstance(out, torch.Tensor) and not isinstance(out, cls) else out


class Double(torch.autograd.Function):
    """2 x, with its own (right) backward: the code brings a rule of its own."""

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def _horner(x, coeffs):
    return x * 0 + coeffs[0] if len(coeffs) == 1 else coeffs[0] + x * _horner(x, coeffs[1:])


def power_series(x):
    """400 terms by Horner's rule, recursively: eager runs it in 400 frames,
    Dynamo's inlining needs ten times as many and crashes in its own recursion."""
    z = Double.apply(x).as_subclass(Series) * 0.1
    return _horner(z, [1.0 / (k + 1) for k in range(400)]).as_subclass(torch.Tensor)


# -- an op that fails alone is PyTorch's -------------------------------------------------------


def _at(fn, spec, check, *shapes):
    """``fn`` as a user's target, a case of ``shapes`` (values in [0.5, 3]), and the check's verdict there."""
    target = Target(fn.__name__, fn, spec, family="user")
    probes = {k: {"seed": 0, "layout": "contiguous", "zeros": 0.0} for k in ("cotangent", "direction", "second")}
    args = tuple(Arg(s, Values(seed=i, low=0.5, high=3.0)) for i, s in enumerate(shapes))
    case = Case(fn.__name__, args, params=probes)
    return target, case, run_check(check, target, case)


def test_a_seeded_gamma_samples_derivative_is_pytorchs_standard_gamma_and_its_script_fails_alone():
    # torch differentiates the sample implicitly (its CDF held fixed), not the seeded sampler's path
    target, case, verdict = _at(gamma_sample, "a: n", "grad", (3,))
    assert verdict.kind == "fail"
    found = localize(get_check("grad"), target, case, verdict)
    assert (found.level, found.op, found.torchs) == ("op", "aten::_standard_gamma", True)
    assert found.at == "alone at float64[3] stride (1,)"
    assert "torch.ops.aten._standard_gamma.default" in found.script
    assert "AssertionError" in runs_and_fails(found.script).stderr


def test_beta_samples_second_derivative_is_refused_and_its_first_is_pytorchs_dirichlet_rule():
    # Beta.rsample runs through torch.distributions' own _Dirichlet Function,
    # whose backward is marked once_differentiable: the gradgrad check refuses
    # it (torch 2.13); the grad check's mismatch is in that rule
    _, _, second = _at(beta_sample, "a: n, b: n", "gradgrad", (2,), (2,))
    assert second.kind == "unsupported" and "once_differentiable" in second.message
    target, case, verdict = _at(beta_sample, "a: n, b: n", "grad", (2,), (2,))
    found = localize(get_check("grad"), target, case, verdict)
    assert (found.level, found.op, found.torchs) == ("rule", "torch.distributions.dirichlet._Dirichlet", True)
    whose = located(Blame(USER, "in your code"), found)
    assert (whose.whose, whose.via) == (PYTORCH, "rule alone")
    assert whose.where.startswith("PyTorch's rule torch.distributions.dirichlet._Dirichlet (rule, alone at")


@pytest.fixture
def unknown_to_fuzzdiff(monkeypatch):
    """torch's known discrepancies, as a torch op's bug not yet recorded meets
    them: not at all (torch.cholesky_inverse's, recorded, is known through
    user code; these tests are of an op's bug found there first)."""
    monkeypatch.setattr(blame_module, "_known_by_function", lambda: {})


def test_a_torch_ops_wrong_formula_inside_plain_code_is_pytorchs_op_not_yours(unknown_to_fuzzdiff):
    # torch.cholesky_inverse's forward-mode formula is wrong for any non-diagonal
    # factor (docs/pages/discrepancies.md, pytorch/pytorch#196682)
    (failure,) = quick(precision_from_factor, "l: n>=2 n", "forward")
    whose = failure.blame
    assert (whose.whose, whose.level, whose.op) == (PYTORCH, "op", "aten::cholesky_inverse")
    assert "in your code" not in _failure_text(failure)
    assert "whose: PyTorch's aten::cholesky_inverse (op, alone at float64[" in _failure_text(failure)
    runs_and_fails(whose.script)


# -- an exception, by the op that raised it ----------------------------------------------------


def test_in_place_division_of_a_slice_under_nested_forward_mode_is_pytorchs_div_():
    (failure,) = quick(halve_first, "x: n>=1", "forward2")
    assert "ZeroTensors are immutable" in failure.message
    whose = failure.blame
    assert (whose.whose, whose.level, whose.op) == (PYTORCH, "op", "aten::div_")
    assert "torch.ops.aten.div_.Tensor" in whose.script
    assert "ZeroTensors are immutable" in runs_and_fails(whose.script).stderr


def test_strided_accumulation_under_forward_mode_is_pytorchs_op():
    (failure,) = quick(every_other, "x: n>=1", "forward")
    assert "single memory location" in failure.message
    whose = failure.blame
    # the augmented assignment writes its result back into the slice: aten::copy_ of the slice into itself
    assert (whose.whose, whose.level, whose.op) == (PYTORCH, "op", "aten::copy_")
    assert "no code of yours" in whose.evidence
    assert "single memory location" in runs_and_fails(whose.script).stderr
    every_other(torch.randn(1, dtype=torch.float64, requires_grad=True)).sum().backward()  # plain eager runs


# -- a rule that fails alone is its author's; otherwise the composition ---------------------------


def test_a_wrong_backward_inside_plain_code_is_the_users_rule():
    (failure,) = quick(with_wrong_rule, "x: n", "grad")
    whose = failure.blame
    assert (whose.whose, whose.level, whose.op, whose.via) == (USER, "rule", "WrongSin", "rule alone")
    assert "your rule WrongSin (rule, alone at float64[" in _failure_text(failure)


def test_where_every_op_and_rule_passes_alone_the_composition_fails():
    # x.detach() * x: the mul is right at the inputs it gets; the detach the code chose cuts half the derivative
    (failure,) = quick(cut_graph, "x: n", "grad")
    whose = failure.blame
    assert (whose.whose, whose.level, whose.op) == (USER, "composition", None)
    assert whose.evidence.startswith("every op (1) and rule (0) of the call passes the grad check alone")
    # where the code detaches, named: the pattern of a straight-through estimator
    assert "the code detaches a value on its way to the outputs, at " in whose.evidence
    assert "in cut_graph" in whose.evidence, whose.evidence


# -- the blame's level, everywhere it is shown -----------------------------------------------------


def test_the_blames_level_is_an_addition_to_the_records_whose():
    old = {"whose": "user", "evidence": "raised in f.py:1 in f", "via": "user"}
    assert Blame.from_json(old) == Blame(USER, "raised in f.py:1 in f")
    assert Blame(USER, "why").to_json() == {"whose": "user", "evidence": "why", "via": "user"}
    new = Blame(PYTORCH, "why", "op alone", "op", "aten::div_", "alone at float64[3] stride (1,)", "import torch\n")
    assert Blame.from_json(new.to_json()) == new
    assert new.where == "PyTorch's aten::div_ (op, alone at float64[3] stride (1,))"
    assert Blame.from_json({**old, "level": "nonsense", "op": 3}) == Blame(USER, "raised in f.py:1 in f")


def test_a_records_repro_and_report_use_the_ops_own_script(tmp_path, unknown_to_fuzzdiff):
    (failure,) = quick(precision_from_factor, "l: n>=2 n", "forward", corpus=tmp_path)
    record, target = repro.load(failure.record_path)
    assert repro.whose(record, target).op == "aten::cholesky_inverse"
    script = repro.minimal_script(record, target)
    assert script == failure.blame.script and "torch.ops.aten.cholesky_inverse.default" in script
    report = bug_report(record, target, run=False)
    assert "`aten::cholesky_inverse`" in report and "torch.ops.aten.cholesky_inverse.default" in report


# -- the trace, and the time it is given --------------------------------------------------------


def test_the_trace_records_each_op_with_its_inputs_layout_aliasing_and_values():
    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).requires_grad_()

    def f(x):
        y = x.t() * 2
        return y.add_(1)

    trace, _ = trace_call(f, [x])
    names = [op.name for op in trace.ops]
    assert names == ["aten::t", "aten::mul", "aten::add_"]
    t, mul, add = trace.ops
    assert (mul.inputs[0].shape, mul.inputs[0].stride) == ((3, 2), (1, 3))
    assert mul.inputs[0].storage == t.inputs[0].storage and mul.inputs[0].source == (0, 0)  # a view of x
    assert t.inputs[0].argument == 0 and all(i.derived for i in mul.inputs)
    assert add.written == (0,) and add.outputs[0].requires_grad
    assert add.values[add.inputs[0].storage].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # before the write
    assert mul.inputs[0].describe() == "float64[3, 2] stride (1, 3)"


def test_the_op_in_flight_is_marked_when_the_call_raises():
    def f(x):
        return torch.mm(x.sin(), x)

    with pytest.raises(RuntimeError) as raised:
        trace_call(f, [torch.ones(2, 3, dtype=torch.float64)])
    trace = raised.value.aten_trace
    assert trace.in_flight is not None and trace.in_flight.name == "aten::mm"
    assert [op.raised for op in trace.ops] == [False, True]


def test_localizing_without_time_says_so():
    target = Target("precision_from_factor", precision_from_factor, "l: n n", family="user")
    probes = {k: {"seed": 0, "layout": "contiguous", "zeros": 0.0} for k in ("cotangent", "direction")}
    case = Case("precision_from_factor", (Arg((3, 3), Values(seed=1)),), params=probes)
    verdict = run_check("forward", target, case)
    assert verdict.kind == "fail"
    found = localize(get_check("forward"), target, case, verdict, deadline=time.monotonic())
    assert found.level is None and found.evidence.startswith("not localized: no time")
    assert localize(get_check("forward"), target, case, verdict).op == "aten::cholesky_inverse"


def test_a_spectral_op_at_repeated_eigenvalues_is_not_accused_alone():
    """torch documents eigh's derivative as undefined at repeated eigenvalues: a rank-1
    product fed to eigh by the code (linear_operator's logdet) is the call's doing."""
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.case.values import Values
    from fuzzdiff.search.op_points import unjudged_at as _documented_singular

    def pinned(matrix):
        return Case("eigh alone", (Arg(tuple(matrix.shape), Values()),), "float64", data={0: matrix.reshape(-1)})

    rank_one = torch.outer(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])).double()
    assert "repeated eigen" in _documented_singular("aten::_linalg_eigh", pinned(rank_one))
    distinct = torch.diag(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert _documented_singular("aten::_linalg_eigh", pinned(distinct)) is None
    assert _documented_singular("aten::cumprod", pinned(rank_one)) is None
    with_nan = distinct.clone()
    with_nan[0, 1] = float("nan")  # gpytorch's kernel of an empty x1: a nan mean, then sub
    assert "nan or inf" in _documented_singular("aten::sub", pinned(with_nan))


def test_dynamos_own_recursion_is_pytorchs_even_where_the_code_brings_a_rule_of_its_own():
    config = FuzzConfig(compile_backends=("aot_eager",), compile_transforms=("none",))
    (failure,) = quick(power_series, "x: n", "compile", max_examples=3, config=config)
    assert "InternalTorchDynamoError" in failure.message
    assert failure.blame.whose == PYTORCH and failure.blame.via == "torch machinery"
    assert "Dynamo crashed inside itself" in failure.blame.evidence


# -- a failure of torch's own target names its op --------------------------------------------


def _settled(target, case, check, verdict):
    failure = FuzzFailure(check, target.name, case, verdict)
    assert settle(failure, get_check(check), target, None, None)
    return failure.blame


def test_a_torch_targets_failure_names_the_aten_op_that_fails_alone():
    # reverse over forward of eigh at a 1 x 1 matrix is nan where it is 0 (torch 2.13)
    target = Target("eigh", torch.linalg.eigh, "a: 1 1", family="linalg")  # a catalog target: torch's own
    probes = {k: {"seed": 0, "layout": "contiguous", "zeros": 0.0} for k in ("cotangent", "direction", "second")}
    case = Case("eigh", (Arg((1, 1), Values(seed=0, low=0.5, high=3.0)),), params=probes)
    verdict = run_check("forward2", target, case)
    assert verdict.failed, verdict
    found = _settled(target, case, "forward2", verdict)
    assert found.whose == PYTORCH and found.level == "op" and found.op.startswith("aten::_linalg_eigh"), found
    assert found.script is not None
    runs_and_fails(found.script)


def test_a_torch_targets_mechanism_failure_names_the_torch_function_it_is():
    target = Target("huber", torch.nn.functional.huber_loss, "a: n, b: n", family="losses")
    case = Case("huber", (Arg((3,), Values(seed=0)), Arg((3,), Values(seed=1))))
    verdict = Verdict("fail", "vmap of vjp vs a loop: planted", {})
    found = _settled(target, case, "vmap", verdict)
    assert (found.whose, found.level, found.op) == (PYTORCH, "op", "torch.nn.functional.huber_loss")
    assert "PyTorch's torch.nn.functional.huber_loss (op" in found.where


def _flipped_cumsum(x):
    return torch.cumsum(x.flip(0).t(), 0)


def test_a_torch_wrapper_targets_failure_names_the_aten_ops_its_call_runs():
    """A catalog target composing torch ops is no one torch function: its record names the ops (no views)."""
    target = Target("flipped_cumsum", _flipped_cumsum, "x: n m", family="reductions")
    case = Case("flipped_cumsum", (Arg((2, 3), Values(seed=0)),))
    found = _settled(target, case, "vmap", Verdict("fail", "vmap vs a loop: planted", {}))
    assert found.whose == PYTORCH and found.op == "aten::flip, aten::cumsum", found
    assert "aten::t" not in found.op and "the aten ops its call runs" in found.evidence


def test_a_call_that_runs_svd_at_repeated_singular_values_is_seen():
    """tntorch's TT-SVD of [[0.5, 1.5], [1.5, -0.5]] (singular value sqrt(2.5) twice):
    its derivative is undefined there, and a check's mismatch is unconfirmed."""
    from fuzzdiff.search.op_points import spectrum_met

    def roundtrip(m):
        u, s, vh = torch.linalg.svd(m, full_matrices=False)
        return (u * s) @ vh

    assert spectrum_met(lambda: roundtrip(torch.tensor([[0.5, 1.5], [1.5, -0.5]]))) == "aten::_linalg_svd"
    assert spectrum_met(lambda: roundtrip(torch.tensor([[0.5, 1.5], [1.0, -0.5]]))) is None


def test_an_op_without_tensor_inputs_is_no_piece_to_run_alone():
    """A factory (aten::empty, a constant's copy) among the ops at a raise has
    no input to run at: a campaign worker died of the empty spec it made."""
    from fuzzdiff.search.aten_program import Unwritable
    from fuzzdiff.search.localize import _target

    with pytest.raises(Unwritable, match="no tensor input"):
        _target("aten::empty alone", lambda: torch.empty(0), (), False)


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.mul(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_ops_inside_a_functions_forward_make_no_program_of_aten_ops():
    """Replayed in grad mode, the ops of a Function's forward would be
    differentiated in place of its backward (mambapy's parallel scan writes
    in place there): "no code of yours is needed" would be false."""
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    trace, _ = trace_call(lambda x: Doubled.apply(x).sin(), [x])
    sin = next(op.index for op in trace.ops if op.name == "aten::sin")
    with pytest.raises(Unwritable, match="grad mode off"):
        leading_to(trace, sin, 1)
    plain, _ = trace_call(lambda x: x.mul(2).sin(), [x])
    leading_to(plain, next(op.index for op in plain.ops if op.name == "aten::sin"), 1)  # written
