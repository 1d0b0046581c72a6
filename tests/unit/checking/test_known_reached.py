"""Torch's known discrepancy, reached through the user's code, is known, not a
failure: ``lambda x: torch.cumprod(x, -1)`` meets torch.cumprod's recorded nan at
an exact zero, and was reported as FAILED, "in your code" when the zero came from
a value grid rather than the zeros structure its signature named."""

import torch

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.targets.catalog.reductions import CUMPROD_JVP_AT_ZERO
from fuzzdiff.targets.known import VALUE_FEATURES


def running_product(x):
    return torch.cumprod(x, -1)


def test_a_known_torch_discrepancy_reached_through_user_code_is_known_with_its_signature():
    report = fuzzdiff.check(running_product, "x: n", checks=["forward2"], dtypes=[torch.float64],
                            max_examples=40, seed=0, progress=False)
    assert report.ok and not report.failures, report.summary()
    (known,) = report.known
    assert known.blame.whose == "pytorch" and known.blame.via == "known discrepancy"
    assert CUMPROD_JVP_AT_ZERO.describe() in known.blame.evidence
    row = report.row("forward2")
    assert row["known"] > 0 and row["failed"] == 0
    assert "KNOWN forward2 (likely a PyTorch bug, not your code)" in report.summary()


def test_an_exact_zero_is_a_feature_of_the_values_wherever_it_comes_from():
    zero = VALUE_FEATURES["value:zero"]
    on_grid = Case("fn", (Arg((4,), Values(seed=1, grid=2.0, low=-1.0, high=1.0)),), "float64")
    assert bool((on_grid.materialize(requires_grad=False).args[0] == 0).any())
    assert zero(on_grid)  # no zeros structure: the grid put a 0 there
    assert not zero(Case("fn", (Arg((4,), Values(seed=1, low=0.5, high=1.0)),), "float64"))


def cayley(x):
    """geotorch's Cayley map: its reverse-over-forward meets torch.linalg.solve's
    forward-mode formula, which the catalog's solve target (a wrapper that makes
    its matrix invertible) records."""
    s = x - x.mT
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return torch.linalg.solve(eye - s, eye + s)


def test_a_known_discrepancy_of_a_wrapped_catalog_function_is_known_through_user_code():
    from fuzzdiff.targets.catalog.linalg import NESTED_JVP_LINALG

    report = fuzzdiff.check(cayley, "x: n n", checks=["forward2"], dtypes=[torch.float64],
                            max_examples=30, seed=0, progress=False)
    assert not report.failures, report.summary()
    assert any(NESTED_JVP_LINALG.describe() in k.blame.evidence for k in report.known), report.summary()


def modulus_phase(re, im):
    """complextorch's layers end in torch.view_as_real: its backward at an
    empty batch with an expanded cotangent raises, torch's own signature."""
    z = torch.complex(re, im)
    return torch.view_as_real(z * z.abs())


def test_view_as_reals_empty_expanded_cotangent_is_known_through_user_code():
    from fuzzdiff.targets.catalog.shape_ops import VIEW_AS_REAL_EMPTY_EXPANDED

    report = fuzzdiff.check(modulus_phase, "re: b n, im: b n", checks=["grad"], dtypes=[torch.float64],
                            max_examples=150, seed=0, progress=False)
    assert not report.failures, report.summary()
    assert any(VIEW_AS_REAL_EMPTY_EXPANDED.describe() in k.blame.evidence for k in report.known), report.summary()


class _HalfPlane(torch.autograd.Function):
    """A rule of the user's own, right, beside torch's view_as_real (complextorch's gtrelu)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * (x > 0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


def masked_modulus(re, im):
    return torch.view_as_real(torch.complex(_HalfPlane.apply(re), im))


def test_torchs_known_raise_is_known_though_the_code_brings_a_rule_of_its_own():
    """The rule plays no part in view_as_real's raise; blamed on it before."""
    from fuzzdiff.targets.catalog.shape_ops import VIEW_AS_REAL_EMPTY_EXPANDED

    report = fuzzdiff.check(masked_modulus, "re: b n, im: b n", checks=["grad"], dtypes=[torch.float64],
                            max_examples=150, seed=0, progress=False)
    assert not report.failures, report.summary()
    assert any(VIEW_AS_REAL_EMPTY_EXPANDED.describe() in k.blame.evidence for k in report.known), report.summary()


def _sinkhorn_step(x):
    """As hyper-connections' Sinkhorn: exp, then an L1 normalization, in float32 whatever x is."""
    return torch.nn.functional.normalize(x.float().exp(), p=1, dim=-2).to(x.dtype)


def test_normalizes_known_in_place_jvp_is_known_through_user_code_in_any_dtype():
    """F.normalize(p=1)'s forward-mode formula modifies a saved sign in place
    (REVERSE_OVER_FORWARD_INPLACE). Through a user's call it was "your code":
    the catalog's normalize named no torch function, and localizing in
    float64 compared torch.FloatTensor with torch.DoubleTensor in the message."""
    report = fuzzdiff.check(_sinkhorn_step, "x: n m", checks=["forward2"], seed=0, max_examples=10)
    assert report.ok and report.row("forward2")["known"] > 0, report.summary()


def test_the_same_raise_in_another_dtype_is_the_same_error():
    from fuzzdiff.verdict import Verdict, error_shape

    said = "modified by an inplace operation: [torch.{}Tensor [1, 1]], which is output 0 of Sgn"
    low, high = (Verdict("fail", "raised RuntimeError: " + said.format(t), {"exception": "RuntimeError"})
                 for t in ("Float", "Double"))
    assert error_shape(low) == error_shape(high)
    assert error_shape(low) != error_shape(Verdict("fail", "raised RuntimeError: " + said.replace("Sgn", "Exp")))
