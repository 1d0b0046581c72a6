"""torch.distributions: densities, CDFs, moments, KL divergences, transforms and samples.

Every target is one method of one distribution (``Normal.log_prob``), one
registered KL pair (``kl.Normal.Gamma``) or one method of one transform
(``ExpTransform.inv``), as a function of the distribution's parameters (and
the value it is asked at). The parameters are the fuzzed tensors:

- a parameter in an interval (positive, a probability) is drawn there, from
  its ``domain``; where its support depends on another one (Pareto's, a
  Uniform's) the ``sample`` intervals keep them apart;
- a parameter on a manifold fuzzdiff cannot draw directly (simplex,
  lower-Cholesky, positive definite, correlation Cholesky) is drawn
  unconstrained and mapped onto it by ``torch.distributions.transform_to``,
  as a model does; a value asked of such a distribution is mapped onto its
  support the same way, and a discrete value is drawn as a float and floored.

The functions are fuzzdiff's, taking what to build as plain keyword data
(``of={"name": "Normal", "parameters": ["loc", "scale"]}``), so that a case
is plain JSON and a script copies them. ``validate_args`` is drawn: torch's
default (None: validate) runs its argument checks, which read values into
Python and so stop vmap, torch.func and compile (unsupported there); False
leaves them out, so those transforms see the derivatives themselves. Values
are drawn inside the supports either way.

Samples (``rsample``) are ``random`` targets, seeded alike before every call,
and float64 only (torch.rand draws other numbers in float32 from one seed).
Those of location-scale and transformed families are smooth functions of
the parameters at fixed noise. Gamma-family samples (Gamma, Chi2, Beta,
Dirichlet, StudentT, FisherSnedecor, InverseGamma, Wishart) are drawn by
rejection and differentiated implicitly (fuzzdiff.targets.implicit): finite
differences at a fixed seed are not the derivative torch defines there
(``IMPLICIT_GRADIENT``, expected), and the implicit_rsample check tests the
one it does, where the sample has a CDF to hold fixed.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import strategies as st
from torch.distributions import constraints, kl_divergence, transform_to
from torch.distributions import transforms as transforms_

from fuzzdiff.case.spec import parse_spec
from fuzzdiff.targets import Index, NoGrad, Target, Tol, register
from fuzzdiff.targets.discrepancies import MACHINERY, NESTED_JVP_LINALG, REVERSE_OVER_FORWARD_INPLACE
from fuzzdiff.targets.implicit import Implicit
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.randomness import seeded_alike
from strategies.values import sampling_interval

FAMILY = "distributions"
VALIDATE = st.sampled_from([None, False])

# -- the functions the targets call ------------------------------------------------------------

# methods that take a value
VALUED = ("log_prob", "cdf", "icdf")
# discrete supports: a value drawn as a float in [0, n) is floored onto them
FLOORED = ("boolean", "nonnegative_integer")


def onto(constraint, x):
    """``x`` mapped onto ``constraint`` (a name in torch.distributions.constraints);
    None leaves it as drawn. "stick_breaking" maps R^k onto the (k+1)-simplex."""
    if constraint is None:
        return x
    if constraint in FLOORED:
        return x.floor()
    if constraint == "stick_breaking":
        return transforms_.StickBreakingTransform()(x)
    return transform_to(getattr(constraints, constraint))(x)


def distribution(of, tensors, validate_args=None):
    """``torch.distributions.<of["name"]>`` of ``tensors``, passed by the names in
    ``of["parameters"]``, each mapped ``onto`` its constraint where ``of["onto"]``
    names one, with ``of["fixed"]``'s constants."""
    mapped = of.get("onto", {})
    params = {name: onto(mapped.get(name), t) for name, t in zip(of["parameters"], tensors)}
    # None is torch's default, pinned: the process-wide default is not (the first
    # torch.compile turns validation off for the whole process, TorchPatcher.patch)
    checked = True if validate_args is None else validate_args
    return getattr(torch.distributions, of["name"])(**params, **of.get("fixed", {}), validate_args=checked)


def distribution_method(*tensors, of, method, validate_args=None):
    """``method`` of the distribution ``of`` builds from the leading tensors:
    at the tensor after them (mapped onto the support) for a method that takes
    a value, called for entropy and rsample, read for a property (mean)."""
    n = len(of["parameters"])
    dist = distribution(of, tensors[:n], validate_args)
    if method in VALUED:
        return getattr(dist, method)(onto(of.get("onto", {}).get("value"), tensors[n]))
    if method in ("entropy", "rsample"):
        return getattr(dist, method)()
    return getattr(dist, method)


def divergence(*tensors, p, q, validate_args=None):
    """``kl_divergence(p, q)``: p built from the leading tensors, q from the rest."""
    n = len(p["parameters"])
    return kl_divergence(distribution(p, tensors[:n], validate_args), distribution(q, tensors[n:], validate_args))


def transform(*tensors, of, method):
    """``method`` ("call", "inv" or "log_abs_det_jacobian") of the transform
    ``torch.distributions.transforms.<of["name"]>``, built from the leading
    tensors (or from the distribution ``of["distribution"]`` builds of them:
    CumulativeDistributionTransform), at the last tensor mapped ``onto`` its domain."""
    n = len(of["parameters"]) if "distribution" not in of else len(of["distribution"]["parameters"])
    params = tensors[:n]
    if "distribution" in of:
        params = (distribution(of["distribution"], params, False),)
    t = getattr(transforms_, of["name"])(*params)
    x = onto(of.get("onto", {}).get("x"), tensors[n])
    if method == "call":
        return t(x)
    if method == "inv":
        return t.inv(x)
    return t.log_abs_det_jacobian(x, t(x))


def cdf_at(z, *tensors, of, method, validate_args=None):
    """The CDF of a ``distribution_method`` target's distribution at ``z`` (Implicit.cdf)."""
    return distribution(of, tensors, False).cdf(z)


def density_at(z, *tensors, of, method, validate_args=None):
    """The density of a ``distribution_method`` target's distribution at ``z`` (Implicit.density)."""
    return distribution(of, tensors, False).log_prob(z).exp()


# -- what is known -----------------------------------------------------------------------------

IMPLICIT_CITATION = (
    "torch differentiates a Gamma-family sample implicitly, holding its CDF fixed: "
    "dz/dθ = -(∂F/∂θ)(z; θ) / p(z; θ) (aten/src/ATen/native/Distributions.h, "
    "standard_gamma_grad_one: 'Computes the reparameterized gradient -(d/dalpha cdf(x;alpha)) / "
    "pdf(x;alpha)'; Dirichlet and Beta through _dirichlet_grad), the implicit reparameterization "
    "gradients of Figurnov, Mohamed and Mnih, NeurIPS 2018 (arXiv:1805.08498) and Jankowiak and "
    "Obermeyer, ICML 2018 (arXiv:1806.01851); torch's distributions documentation lists these as "
    "has_rsample=True. The rejection sampler's code path is not what is differentiated, so "
    "finite differences of the sample at a fixed seed differ from the gradient by design"
)

IMPLICIT_GRADIENT = Known(
    # every identity against finite differences: torch has no forward-mode or double backward
    # formula for these samplers (unsupported), and one it adds would meet the same mismatch
    ("grad", "forward", "gradgrad", "forward2"),
    "finite differences of a sample drawn by torch._standard_gamma or torch._sample_dirichlet "
    "(Gamma, Chi2, Beta, Dirichlet, StudentT, FisherSnedecor, InverseGamma, Wishart rsample), "
    "at a fixed seed, follow the rejection sampler's code path, not the implicit gradient torch "
    "defines (torch 2.13.0; the implicit_rsample check tests that one)",
    "torch.manual_seed(0); a = torch.tensor([2.0], dtype=torch.float64, requires_grad=True); "
    "z = torch._standard_gamma(a) -> 4.5526; g, = torch.autograd.grad(z, a) -> 1.59308; with the "
    "seed reset before each call, (_standard_gamma(a + 1e-6) - _standard_gamma(a - 1e-6)) / 2e-6 "
    "-> 1.56533; -(d/da gammainc(a, z)) / p(z; a) by central differences -> 1.59323 (g, within "
    "torch's approximation)",
    message=r"vs finite differences",
    expected=IMPLICIT_CITATION,
    records=("53052bca26a835f7",),
)

# -- the declarations --------------------------------------------------------------------------

METHODS = ("log_prob", "cdf", "icdf", "entropy", "mean", "variance", "rsample")
B = "*b"
K = "*b k>=1"  # a simplex has at least one vertex
N = "*b n>=1"  # a multivariate normal at least one dimension


@dataclass(frozen=True)
class Family:
    """One parameterization of one torch distribution, as its targets need it.

    parameters: (torch's name, the spec's dims) in the order the spec lists them.
    value:      the dims of a value in the support; ``domain``/``sample``/``onto``
                and ``kinds`` hold its interval, constraint or kind under "value".
    label:      the target names' prefix, where a class has several parameterizations.
    methods:    those to fuzz, where defined (a NotImplementedError drops one).
    per_method: extra ``sample`` intervals for one method (a mean defined for df > 1).
    held:       per method, the parameters not differentiated (``NoGrad``): those
                torch defines no derivative in.
    rsample:    "explicit" (a smooth function at fixed noise), "implicit" (drawn
                by rejection and differentiated holding a CDF fixed) or None.
    """

    name: str
    parameters: tuple[tuple[str, str], ...]
    value: str = B
    domain: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    sample: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    onto: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, Any] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    methods: tuple[str, ...] = METHODS
    per_method: Mapping[str, Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    held: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rsample: str | None = "explicit"
    implicit: Implicit | None = None
    tolerances: Mapping[str, Tol] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return self.label or self.name

    @property
    def of(self) -> dict:
        """What ``distribution`` builds: plain data, stored in every case."""
        return self.asked("entropy")

    def asked(self, method: str) -> dict:
        """``of`` for ``method``: icdf is asked at a probability, not at a value
        of the support, so nothing maps it."""
        onto = {k: v for k, v in self.onto.items() if k != "value" or method != "icdf"}
        of: dict[str, Any] = {"name": self.name, "parameters": [p for p, _ in self.parameters]}
        if onto:
            of["onto"] = onto
        if self.fixed:
            of["fixed"] = dict(self.fixed)
        return of


POSITIVE = (0.0, None)
UNIT = (0.0, 1.0)


def positive(*names: str) -> dict[str, tuple[float | None, float | None]]:
    return dict.fromkeys(names, POSITIVE)


def scalar(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((n, B) for n in names)


LOC_SCALE = scalar("loc", "scale")
DISCRETE = {"value": NoGrad()}

# Their CDF is torch.special.gammainc(concentration, ...), which torch does not
# differentiate in its first argument ("the derivative for 'igamma: input' is not
# implemented"): the concentration is held, so the other derivatives are checked.
GAMMAINC_HELD = {"cdf": ("concentration",)}

# torch's own bound on its implicit gradients: test/distributions/test_distributions.py
# compares them with -(dF/dθ)/p by scipy and asserts a relative error below 5e-4 for Gamma
# (test_gamma_sample_grad) and below 1e-2 for Beta (test_beta_sample_grad)
GAMMA_GRADIENT = Tol(
    1e-10,
    5e-4,
    "torch's implicit Gamma gradient (standard_gamma_grad_one) is a series, saddle-point and rational "
    "approximation: torch's own test bounds its relative error by 5e-4",
)
GAMMA_GRADIENT_BEYOND_ITS_BOUND = Known(
    "implicit_rsample",
    "torch's implicit Gamma gradient (standard_gamma_grad_one's bivariate rational approximation) "
    "is off by more than the 5e-4 relative error torch's own test asserts, at small concentrations "
    "(torch 2.13.0 CPU; silent)",
    "a = torch.full((60,), 0.25, dtype=torch.float64); x = torch.logspace(-3, 1, 60, "
    "dtype=torch.float64); torch._standard_gamma_grad(a, x) at x = 8.555 is 6.000173, where "
    "-(dP(a, x)/da) / p(x; a) by mpmath is 5.995015 (relative error 8.6e-4)",
    message=r"dz/d.* of the sample \(autograd\) vs the implicit-function identity",
    records=("52fa97819580812d",),
)
BETA_GRADIENT = Tol(
    1e-10,
    1e-2,
    "torch's implicit Beta gradient (_dirichlet_grad) is an approximation: torch's own test bounds its "
    "relative error by 1e-2",
)

BETA_SECOND_DERIVATIVE = Known(
    "implicit_rsample",
    "the gradient of a Beta or Dirichlet sample (Beta(a, b).rsample(), Dirichlet(c).rsample()) is "
    "cut from the graph: torch.distributions.dirichlet._Dirichlet.backward is marked "
    "@once_differentiable, so with create_graph=True and a cotangent that does not require grad "
    "(a scalar loss's, torch.autograd.functional.hessian's) the gradient comes back without a "
    "grad_fn, and every second derivative reads 0 with no error (torch 2.13.0 CPU; a cotangent "
    "that requires grad makes the second backward raise instead; upstream: none found)",
    "torch.manual_seed(0); a = torch.tensor([2.0], dtype=torch.float64, requires_grad=True); "
    "b = torch.tensor([3.0], dtype=torch.float64); g, = torch.autograd.grad(Beta(a, b).rsample().sum(), a, "
    "create_graph=True) -> g.requires_grad is False; torch.autograd.functional.hessian(lambda a: "
    "(torch.manual_seed(0), Beta(a, b).rsample().sum())[1], a) -> [[0.]]; the implicit second "
    "derivative d/da of -(dF/da)(z; a, b)/p(z; a, b) along the CDF's level set is nonzero",
    message=r"second derivative.*cut from the graph",
    records=("4bf081f840ec864b",),
)

# the checks that call the target and report what it raises
RUNS = (
    "grad",
    "forward",
    "gradgrad",
    "forward2",
    "layout",
    "alias",
    "mutation",
    "dtype",
    "vmap",
    "compile",
    "compiled_autograd",
    "export",
    "checkpoint",
    "implicit_rsample",
)

EMPTY_BATCH_VALIDATION = Known(
    RUNS,
    "torch.distributions reshapes a tensor of an empty batch to (*batch, -1), which a tensor of 0 "
    "elements cannot infer, in two places: constraints._IndependentConstraint.check, so that a "
    "distribution whose parameter or support is an independent constraint (Dirichlet, Beta through "
    "it, MultivariateNormal, LowRankMultivariateNormal, Wishart, RelaxedOneHotCategorical) raises "
    "when validating an empty batch, and LKJCholesky even with validate_args=False (its inner Beta "
    "validates by default); and distributions.utils._sum_rightmost, so that "
    "TransformedDistribution.log_prob and Independent.log_prob raise at an empty batch without "
    "validation too (LogisticNormal, RelaxedOneHotCategorical) (torch 2.13.0; the first reported "
    "upstream as pytorch/pytorch#194548)",
    "torch.distributions.Dirichlet(torch.ones(0, 2)) -> RuntimeError: cannot reshape tensor of 0 "
    "elements into shape [0, -1] because the unspecified dimension size -1 can be any value and is "
    "ambiguous; LogisticNormal(torch.zeros(0, 1), torch.ones(0, 1), validate_args=False)"
    ".log_prob(torch.full((0, 2), 0.5)) -> the same error from _sum_rightmost; a batch of one works",
    raises="RuntimeError",
    message=r"cannot reshape tensor of 0 elements into shape \[.*-1\]",
    records=("d3c1ba2cfbd35896", "d6e50c093f118f18"),
)

WISHART_RSAMPLE_EMPTY = Known(
    RUNS,
    "Wishart.rsample raises at an empty batch: it reduces its singular-sample test over the batch "
    "dims with amax, which a tensor of 0 elements refuses (torch 2.13.0, with validate_args=False; "
    "upstream: none found; related: pytorch/pytorch#122021, on the same test, which is inverted: "
    "it flags every nonsingular first sample, warns 'Singular sample detected' and draws it again)",
    "Wishart(torch.full((0,), 3.0), scale_tril=torch.eye(2).expand(0, 2, 2), "
    "validate_args=False).rsample() -> IndexError: amax(): Expected reduction dim -1 to have "
    "non-zero size.; a batch of one works",
    raises="IndexError",
    message=r"amax\(\): Expected reduction dim .* to have non-zero size",
    records=("4b37254a6ae34a21",),
)

MULTIVARIATE_NORMAL_EMPTY_BATCH = Known(
    RUNS,
    "MultivariateNormal.log_prob and LowRankMultivariateNormal.log_prob raise ZeroDivisionError at "
    "an empty batch: _batch_mahalanobis divides the value's batch size by the scale's, 0 (torch "
    "2.13.0, with validate_args=False; under validation the empty batch raises earlier, "
    "EMPTY_BATCH_VALIDATION; upstream: none found)",
    "MultivariateNormal(torch.zeros(0, 2), scale_tril=torch.eye(2).expand(0, 2, 2), "
    "validate_args=False).log_prob(torch.zeros(0, 2)) -> ZeroDivisionError: integer division or "
    "modulo by zero (from sx // sL in _batch_mahalanobis); a batch of one works",
    raises="ZeroDivisionError",
    message=r"integer division or modulo by zero",
    records=("0e5ec48aa279a5b0",),
)

# torch.distributions.kl broadcasts the batch shapes of MultivariateNormal KL pairs with
# torch._C._infer_size (kl.py, _kl_multivariatenormal_multivariatenormal and
# _kl_lowrankmultivariatenormal_multivariatenormal), a binding that takes only a
# torch.Size of plain ints
_KL_INFER_SIZE = (
    "kl_divergence(MultivariateNormal, MultivariateNormal) and kl_divergence(LowRankMultivariateNormal, "
    "MultivariateNormal) broadcast their batch shapes with torch._C._infer_size, a binding that takes "
    "only a torch.Size of plain ints (torch 2.13.0 CPU; torch.broadcast_shapes in its place runs under "
    "both and agrees with eager; "
)
KL_INFER_SIZE_TRACED = Known(
    ("compile", "compiled_autograd", "export"),
    _KL_INFER_SIZE + "under dynamo (torch.compile, strict torch.export) the binding gets the sliced sizes "
    "as tuples, or, with a dynamic batch dim under strict export, a torch.Size of SymInts; reported: "
    "pytorch/pytorch#155800, fix proposed in pytorch/pytorch#185471; torch 2.15.0 runs both)",
    "L = torch.tensor([[1.5, 0.0], [0.3, 2.0]], dtype=torch.float64); f = lambda a, La, b, Lb: "
    "kl_divergence(MultivariateNormal(a, scale_tril=La), MultivariateNormal(b, scale_tril=Lb)); "
    "args = (torch.zeros(2, dtype=torch.float64), L, torch.ones(2, dtype=torch.float64), L * 1.1); "
    "f(*args) -> 0.2668; torch.compile(f, backend='aot_eager', fullgraph=True)(*args) -> "
    "TorchRuntimeError: ... call_function <built-in function _infer_size>(*((), ()), **{}): got "
    "RuntimeError('expected a torch.Size as argument 1')",
    raises="TorchRuntimeError",
    message=r"_infer_size>.*(expected a torch\.Size as argument 1|expected int at position 0, but got: SymInt)",
    records=("a75e624f40b5af47", "5baf8b9e3ce06794", "f6af724bbd254e8f"),
    fixed_in="2.15.0",
)
KL_INFER_SIZE_SYMINT = Known(
    "export",
    _KL_INFER_SIZE + "under non-strict torch.export with a dynamic batch dim the torch.Size holds a "
    "SymInt, which the binding refuses; upstream: none found for this path, related "
    "pytorch/pytorch#155800, whose proposed fix pytorch/pytorch#185471 mends dynamo's alone)",
    "L = torch.tensor([[1.5, 0.0], [0.3, 2.0]], dtype=torch.float64); loc = torch.tensor([1.75, "
    "-0.25], dtype=torch.float64); class M(torch.nn.Module): forward = lambda self, a, La, b, Lb: "
    "kl_divergence(MultivariateNormal(a, scale_tril=La), MultivariateNormal(b, scale_tril=Lb)); "
    "args = (loc.expand(2, 2), L.expand(2, 2, 2), loc.expand(2, 2) + 1, (L * 1.1).expand(2, 2, 2)); "
    "torch.export.export(M(), args, strict=False, dynamic_shapes=tuple({d: Dim.AUTO for d in "
    "range(a.dim())} for a in args)) -> RuntimeError: expected int at position 0, but got: SymInt; "
    "with static shapes it exports",
    raises="RuntimeError",
    message=r"expected int at position 0, but got: SymInt",
    params={"strict": False},
    records=("baf0848db02da2dc",),
)

BINOMIAL_ENTROPY_EMPTY = Known(
    RUNS,
    "Binomial.entropy raises at an empty batch: it reads int(self.total_count.max()), and max() of "
    "a tensor of 0 elements raises (torch 2.13.0, with or without validate_args; upstream: none found)",
    "torch.distributions.Binomial(5, logits=torch.zeros(0)).entropy() -> RuntimeError: max(): "
    "Expected reduction dim to be specified for input.numel() == 0; Binomial(5, "
    "logits=torch.zeros(1)).entropy() works",
    raises="RuntimeError",
    message=r"max\(\): Expected reduction dim to be specified for input\.numel\(\) == 0",
    records=("18c458f2a58cd862",),
)

GENERALIZED_PARETO_FLOAT64 = Known(
    RUNS,
    "GeneralizedPareto.log_prob and cdf raise for float64 parameters under the default float32 "
    "dtype: they call torch.isclose(self.concentration, torch.tensor(0.0)), whose scalar is "
    "float32 (torch 2.13.0; icdf and rsample use zeros_like and work; a float32 case meets it in "
    "every check's float64 reference; reported upstream as pytorch/pytorch#198185)",
    "d = torch.float64; GeneralizedPareto(torch.tensor(0.0, dtype=d), torch.tensor(1.0, dtype=d), "
    "torch.tensor(0.3, dtype=d)).log_prob(torch.tensor(0.5, dtype=d)) -> RuntimeError: Double did not "
    "match Float",
    raises="RuntimeError",
    message=r"Double did not match Float",
    records=("3f787478f4eb55a0",),
)

GUMBEL_CDF_UNDERFLOW = Known(
    RUNS,
    "Gumbel.cdf raises under torch's default validation at a value in its support (every real) "
    "where the CDF underflows to 0: TransformedDistribution.cdf maps the value back onto the base "
    "Uniform(tiny, 1 - eps) and validates it there, and exp(-exp(-(x - loc)/scale)) is 0.0, below "
    "tiny (torch 2.13.0; validate_args=False returns 0; related upstream: pytorch/pytorch#91698 "
    "fixed the validate_args=False case, pytorch/pytorch#193690 a CDF's support check)",
    "d = torch.float64; Gumbel(torch.tensor(1.75, dtype=d), torch.tensor(0.25, dtype=d))"
    ".cdf(torch.tensor(-1.75, dtype=d)) -> ValueError: Expected value argument (Tensor of shape ()) "
    "to be within the support (Interval(lower_bound=2.2250738585072014e-308, "
    "upper_bound=0.9999999999999998)) of the distribution Uniform(...), but found invalid values: 0.0",
    raises="ValueError",
    message=r"Expected value argument .* to be within the support .* of the distribution Uniform",
    params={"kwargs.validate_args": None},
    records=("70884dd1f2aed139",),
)

CONTINUOUS_BERNOULLI_FLOAT32 = Known(
    "dtype",
    "ContinuousBernoulli's float32 derivatives lose their digits near probs = 0.5: it switches to "
    "a Taylor expansion only inside _lims = (0.499, 0.501), and its closed forms outside cancel in "
    "float32 (d variance/d probs at probs = 0.55325 is -0.0071030 in float32, -0.0071826 in "
    "float64: 1.1% off, beyond what rounding the problem amplifies explains; d entropy/d probs at "
    "0.50229: -0.00348 vs -0.00305) (torch 2.13.0 CPU; upstream: none found; related: "
    "tensorflow/probability#1512 fixed a like instability, Paddle's ContinuousBernoulli uses a band "
    "of 0.02)",
    "p = torch.tensor(0.5532492399215698, requires_grad=True); g32, = torch.autograd.grad("
    "ContinuousBernoulli(p).variance, p) -> -0.0071030; the same in float64 -> -0.0071826, and "
    "central differences of the float64 variance -> -0.0071826",
    message=r"float32 vs float64 on the same values",
    dtypes=("float32",),
    records=("fad2dbf33d4e7537",),
)

DISTRIBUTIONS = (
    Family("Normal", LOC_SCALE, domain=positive("scale")),
    Family("LogNormal", LOC_SCALE, domain={**positive("scale", "value")}),
    Family("Laplace", LOC_SCALE, domain=positive("scale")),
    Family("Cauchy", LOC_SCALE, domain=positive("scale")),
    Family("Gumbel", LOC_SCALE, domain=positive("scale")),
    Family("HalfNormal", scalar("scale"), domain=positive("scale", "value")),
    Family("HalfCauchy", scalar("scale"), domain=positive("scale", "value")),
    Family("Exponential", scalar("rate"), domain=positive("rate", "value")),
    Family("Weibull", scalar("scale", "concentration"), domain=positive("scale", "concentration", "value")),
    # the support starts at scale: scale below 1, values above it
    Family(
        "Pareto",
        scalar("scale", "alpha"),
        domain=positive("scale", "alpha", "value"),
        sample={"scale": (0.1, 0.9), "value": (1.0, 3.0)},
        per_method={"mean": {"alpha": (1.1, 4.0)}, "variance": {"alpha": (2.1, 5.0)}},
    ),
    Family(
        "Uniform",
        scalar("low", "high"),
        sample={"low": (-2.0, -1.0), "high": (1.0, 2.0), "value": (-0.9, 0.9)},
        domain={"value": (-1.0, 1.0)},
    ),
    Family("VonMises", scalar("loc", "concentration"), domain=positive("concentration"), rsample=None),
    Family(
        "GeneralizedPareto",
        scalar("loc", "scale", "concentration"),
        domain=positive("scale", "value"),
        sample={"loc": (-1.0, -0.5), "concentration": (0.1, 0.9)},
    ),
    Family(
        "Kumaraswamy",
        scalar("concentration1", "concentration0"),
        domain={**positive("concentration1", "concentration0"), "value": UNIT},
    ),
    Family("ContinuousBernoulli", scalar("probs"), domain={"probs": UNIT, "value": UNIT}),
    Family(
        "RelaxedBernoulli",
        scalar("temperature", "probs"),
        domain={**positive("temperature"), "probs": UNIT, "value": UNIT},
    ),
    Family(
        "RelaxedOneHotCategorical",
        # one temperature, as documented: a batched one is not broadcast against the batch by log_prob
        (("temperature", ""), ("probs", K)),
        value=K,
        domain=positive("temperature"),
        onto={"probs": "simplex", "value": "simplex"},
    ),
    Family(
        "LogisticNormal",
        (("loc", K), ("scale", K)),
        value=K,
        domain=positive("scale"),
        onto={"value": "stick_breaking"},
    ),
    Family(
        "Gamma",
        scalar("concentration", "rate"),
        domain=positive("concentration", "rate", "value"),
        held=GAMMAINC_HELD,
        rsample="implicit",
        implicit=Implicit(density_at, cdf_at, samplers=("_standard_gamma",)),
        tolerances={"implicit_rsample": GAMMA_GRADIENT},
    ),
    Family(
        "Chi2",
        scalar("df"),
        domain=positive("df", "value"),
        held={"cdf": ("df",)},
        rsample="implicit",
        implicit=Implicit(density_at, cdf_at, samplers=("_standard_gamma",)),
        tolerances={"implicit_rsample": GAMMA_GRADIENT},
    ),
    Family(
        "Beta",
        scalar("concentration1", "concentration0"),
        domain={**positive("concentration1", "concentration0"), "value": UNIT},
        rsample="implicit",
        implicit=Implicit(density_at, None, 0.0, samplers=("_sample_dirichlet",)),
        tolerances={"implicit_rsample": BETA_GRADIENT},
    ),
    Family(
        "Dirichlet",
        (("concentration", K),),
        value=K,
        domain=positive("concentration"),
        onto={"value": "simplex"},
        rsample="implicit",
    ),
    Family(
        "StudentT",
        scalar("df", "loc", "scale"),
        domain=positive("df", "scale"),
        per_method={"mean": {"df": (1.1, 4.0)}, "variance": {"df": (2.1, 5.0)}},
        rsample="implicit",
    ),
    Family(
        "FisherSnedecor",
        scalar("df1", "df2"),
        domain=positive("df1", "df2", "value"),
        per_method={"mean": {"df2": (2.1, 5.0)}, "variance": {"df2": (4.1, 7.0)}},
        rsample="implicit",
    ),
    Family(
        "InverseGamma",
        scalar("concentration", "rate"),
        domain=positive("concentration", "rate", "value"),
        held=GAMMAINC_HELD,
        per_method={"mean": {"concentration": (1.1, 4.0)}, "variance": {"concentration": (2.1, 5.0)}},
        rsample="implicit",
    ),
    Family(
        "Bernoulli",
        scalar("probs"),
        domain={"probs": UNIT},
        sample={"value": (0.0, 1.9)},
        onto={"value": "boolean"},
        kinds=DISCRETE,
        rsample=None,
    ),
    Family(
        "Binomial",
        scalar("logits"),
        fixed={"total_count": 5},
        sample={"value": (0.0, 5.9)},
        onto={"value": "nonnegative_integer"},
        kinds=DISCRETE,
        rsample=None,
    ),
    Family(
        "Geometric",
        scalar("probs"),
        domain={"probs": UNIT},
        sample={"value": (0.0, 5.9)},
        onto={"value": "nonnegative_integer"},
        kinds=DISCRETE,
        rsample=None,
    ),
    Family(
        "NegativeBinomial",
        scalar("total_count", "logits"),
        domain=positive("total_count"),
        sample={"value": (0.0, 5.9)},
        onto={"value": "nonnegative_integer"},
        kinds=DISCRETE,
        rsample=None,
    ),
    Family(
        "Poisson",
        scalar("rate"),
        domain=positive("rate"),
        sample={"value": (0.0, 5.9)},
        onto={"value": "nonnegative_integer"},
        kinds=DISCRETE,
        rsample=None,
    ),
    Family(
        "Categorical",
        (("probs", K),),
        onto={"probs": "simplex"},
        kinds={"value": Index("k")},
        rsample=None,
    ),
    Family(
        "MultivariateNormal",
        (("loc", N), ("scale_tril", "*b n>=1 n>=1")),
        value=N,
        onto={"scale_tril": "lower_cholesky"},
    ),
    Family(
        "MultivariateNormal",
        (("loc", N), ("covariance_matrix", "*b n>=1 n>=1")),
        value=N,
        onto={"covariance_matrix": "positive_definite"},
        label="MultivariateNormal_covariance",
    ),
    Family(
        "LowRankMultivariateNormal",
        (("loc", N), ("cov_factor", "*b n>=1 r>=1"), ("cov_diag", N)),
        value=N,
        domain=positive("cov_diag"),
    ),
    Family(
        "Wishart",
        (("df", B), ("scale_tril", "*b 2 2")),
        value="*b 2 2",
        sample={"df": (1.5, 4.0)},
        onto={"scale_tril": "lower_cholesky", "value": "positive_definite"},
        rsample="implicit",
    ),
    Family(
        "LKJCholesky",
        (("concentration", B),),
        value="*b 3",
        domain=positive("concentration"),
        onto={"value": "corr_cholesky"},
        fixed={"dim": 3},
        rsample=None,
    ),
)

# Supports that need other intervals in a KL pair: a Uniform's (p's inside q's, inside
# (0, 1) for a Beta q, above a Pareto q's scale)
KL_SAMPLE = {"Uniform": {"low": (0.3, 0.4), "high": (0.6, 0.7)}}
KL_SAMPLE_Q = {"Uniform": {"low": (-1.0, 0.0), "high": (1.0, 2.0)}, "Pareto": {"scale": (0.1, 0.25)}}


@dataclass(frozen=True)
class Transform:
    """One torch transform: its tensor parameters, and where ``inv`` is asked."""

    name: str
    parameters: tuple[tuple[str, str], ...] = ()
    x: str = B
    domain: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    codomain: tuple[float | None, float | None] | None = None
    onto: str | None = None  # the codomain, for inv, where it is no interval
    distribution: Family | None = None
    inv_skip: Mapping[str, str] = field(default_factory=dict)  # check -> why it cannot judge inv

    @property
    def of(self) -> dict:
        of: dict[str, Any] = {"name": self.name, "parameters": [p for p, _ in self.parameters]}
        if self.distribution is not None:
            of["distribution"] = self.distribution.of
        return of


NORMAL = DISTRIBUTIONS[0]
TRANSFORMS = (
    Transform("ExpTransform", codomain=POSITIVE),
    Transform("SigmoidTransform", codomain=UNIT),
    Transform("TanhTransform", codomain=(-1.0, 1.0)),
    Transform("SoftplusTransform", codomain=POSITIVE),
    Transform("AffineTransform", LOC_SCALE, domain=positive("scale"), codomain=(None, None)),
    Transform("PowerTransform", scalar("exponent"), domain=positive("exponent", "x"), codomain=POSITIVE),
    Transform("SoftmaxTransform", x=K, onto="simplex"),
    Transform("StickBreakingTransform", x=K, onto="stick_breaking"),
    Transform("LowerCholeskyTransform", x="*b n n", onto="lower_cholesky"),
    Transform(
        "PositiveDefiniteTransform",
        x="*b n n",
        onto="positive_definite",
        inv_skip={
            "dtype": "inv is judged at x, but its input is M = transform_to(positive_definite)(x), whose "
            "Cholesky factor's diagonal is exp of x's: M's condition number reaches tens of thousands on the sampled "
            "interval, and the Cholesky factor's float32 error grows with it, where the round trip x -> M -> "
            "x is the identity; the dtype check measures conditioning at x, so it would take Cholesky's "
            "expected float32 error for the transform's (2.6e-4 relative at cond(M) of 19,000)"
        },
    ),
    Transform("CorrCholeskyTransform", x="*b 3", onto="corr_cholesky"),
    Transform(
        "CumulativeDistributionTransform",
        LOC_SCALE,
        domain=positive("scale"),
        codomain=UNIT,
        distribution=NORMAL,
    ),
)


# Each known discrepancy, by the targets it is declared on (fnmatch patterns of their names).
KNOWN = (
    *(
        (pattern, EMPTY_BATCH_VALIDATION)
        for pattern in (
            "Beta.*",
            "Dirichlet.*",
            "MultivariateNormal*",
            "LowRank*",
            "Wishart.*",
            "LKJCholesky.*",
            "LogisticNormal.*",
            "RelaxedOneHotCategorical.*",
            "kl.*Beta*",
            "kl.*Dirichlet*",
            "kl.*MultivariateNormal*",
        )
    ),
    *(
        (pattern, MULTIVARIATE_NORMAL_EMPTY_BATCH)
        for pattern in ("MultivariateNormal*", "LowRank*", "kl.*MultivariateNormal*")
    ),
    ("Wishart.rsample", WISHART_RSAMPLE_EMPTY),
    # torch.linalg.slogdet's jvp formula is not differentiable itself
    ("Wishart.log_prob", NESTED_JVP_LINALG),
    # the jvp of logsumexp writes its saved exp in place
    ("RelaxedOneHotCategorical.*", REVERSE_OVER_FORWARD_INPLACE),
    ("Binomial.entropy", BINOMIAL_ENTROPY_EMPTY),
    *(
        (pattern, known)
        for pattern in ("kl.MultivariateNormal.MultivariateNormal", "kl.LowRankMultivariateNormal.MultivariateNormal")
        for known in (KL_INFER_SIZE_TRACED, KL_INFER_SIZE_SYMINT)
    ),
    ("GeneralizedPareto.*", GENERALIZED_PARETO_FLOAT64),
    ("Gamma.rsample", GAMMA_GRADIENT_BEYOND_ITS_BOUND),
    ("Gumbel.cdf", GUMBEL_CDF_UNDERFLOW),
    ("ContinuousBernoulli.*", CONTINUOUS_BERNOULLI_FLOAT32),
    ("kl.ContinuousBernoulli.*", CONTINUOUS_BERNOULLI_FLOAT32),
    ("kl.*.ContinuousBernoulli", CONTINUOUS_BERNOULLI_FLOAT32),
    ("Beta.rsample", BETA_SECOND_DERIVATIVE),
    *(("*", known) for known in MACHINERY),
    *((f"{f.prefix}.rsample", IMPLICIT_GRADIENT) for f in DISTRIBUTIONS if f.rsample == "implicit"),
)


# -- building the targets ----------------------------------------------------------------------


def _spec(parameters: tuple[tuple[str, str], ...], prefix: str = "") -> list[str]:
    return [f"{prefix}{name}: {dims}" for name, dims in parameters]


def _method_target(family: Family, method: str) -> Target:
    valued = method in VALUED
    spec = _spec(family.parameters)
    keep = {p for p, _ in family.parameters}
    if valued:
        spec.append(f"value: {B if method == 'icdf' else family.value}")
        keep.add("value")
    domain = {k: v for k, v in family.domain.items() if k in keep}
    sample = {k: v for k, v in family.sample.items() if k in keep}
    kinds = {k: v for k, v in family.kinds.items() if k in keep}
    if method == "icdf":  # asked at a probability, not at a value of the support
        domain["value"], kinds = UNIT, {}
        sample.pop("value", None)
    sample.update(family.per_method.get(method, {}))
    kinds.update({name: NoGrad() for name in family.held.get(method, ())})
    target = Target(
        f"{family.prefix}.{method}",
        distribution_method,
        ", ".join(spec),
        FAMILY,
        domain=domain,
        sample=sample,
        kinds=kinds,
        kwargs={"of": family.asked(method), "method": method, "validate_args": VALIDATE},
        max_side=3,
        tolerances=family.tolerances if method == "rsample" else {},
        op=f"torch.distributions.{family.name}.{method}",
    )
    if method != "rsample":
        return target
    # float32 and float64 draw other numbers from one seed (torch.rand): a float32 sample
    # has no float64 reference at the same noise
    target = replace(seeded_alike(target), dtypes=(torch.float64,))
    if family.rsample == "implicit":
        target = replace(target, implicit=family.implicit)
    return target


def _kl_target(p: Family, q: Family) -> Target:
    sides = ((p, "p_", KL_SAMPLE), (q, "q_", KL_SAMPLE_Q))
    spec = [s for f, prefix, _ in sides for s in _spec(f.parameters, prefix)]
    domain: dict[str, tuple[float | None, float | None]] = {}
    sample: dict[str, tuple[float, float]] = {}
    for f, prefix, kl_sample in sides:
        names = {n for n, _ in f.parameters}
        domain.update({prefix + k: v for k, v in f.domain.items() if k in names})
        sample.update({prefix + k: v for k, v in f.sample.items() if k in names})
        sample.update({prefix + k: v for k, v in kl_sample.get(f.name, {}).items()})
    return Target(
        f"kl.{p.prefix}.{q.prefix}",
        divergence,
        ", ".join(spec),
        FAMILY,
        domain=domain,
        sample=sample,
        kwargs={"p": p.of, "q": q.of, "validate_args": VALIDATE},
        max_side=3,
        op=f"torch.distributions.kl_divergence({p.name}, {q.name})",
    )


def _transform_targets(t: Transform) -> list[Target]:
    out = []
    params = t.distribution.parameters if t.distribution is not None else t.parameters
    for method in ("call", "inv", "log_abs_det_jacobian"):
        spec = ", ".join([*_spec(params), f"x: {t.x}"])
        domain = {k: v for k, v in t.domain.items() if k != "x" or method != "inv"}
        of = t.of
        if method == "inv":
            if t.onto is not None:
                of["onto"] = {"x": t.onto}
            elif t.codomain is not None:
                domain["x"] = t.codomain
        out.append(
            Target(
                f"{t.name}.{method}",
                transform,
                spec,
                FAMILY,
                domain=domain,
                kwargs={"of": of, "method": method},
                max_side=3,
                skip=dict(t.inv_skip) if method == "inv" else {},
                op=f"torch.distributions.transforms.{t.name}" + ("" if method == "call" else f".{method}"),
            )
        )
    return out


# -- only what torch defines ------------------------------------------------------------------


def _example(target: Target) -> list[torch.Tensor]:
    """One small input of ``target``: every dim of size 2 (fixed sizes as given),
    every value in the middle of its sampling interval."""
    out = []
    for arg in parse_spec(target.spec):
        shape = [d.size if d.size is not None else 2 for d in arg.dims]
        if isinstance(target.kinds.get(arg.name), Index):
            out.append(torch.zeros(shape, dtype=torch.long))
            continue
        low, high = target.sample.get(arg.name) or sampling_interval(target.domain.get(arg.name, (None, None)))
        out.append(torch.full(shape, (low + high) / 2, dtype=torch.float64))
    return out


def defined(target: Target) -> bool:
    """Whether torch defines the target's method: a finite result at a plain
    input; NotImplementedError (no icdf, no entropy) or an infinite KL divergence
    (disjoint supports) drop it. Any other error is torch's to answer for: the
    checks report it (GeneralizedPareto.log_prob raises in float64)."""
    kwargs = {k: (False if k == "validate_args" else v) for k, v in target.kwargs.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Wishart's "Singular sample detected" at a constant input
            out = target.fn(*_example(target), **kwargs)
    except NotImplementedError:
        return False
    except Exception:  # noqa: BLE001 - torch's error at a valid input: a finding, kept
        return True
    return bool(torch.isfinite(out).all()) if isinstance(out, torch.Tensor) else True


def _targets() -> list[Target]:
    by_name = {f.name: f for f in DISTRIBUTIONS if not f.label}
    out = [_method_target(f, m) for f in DISTRIBUTIONS for m in f.methods if m != "rsample" or f.rsample is not None]
    # torch's own pairs: a library imported first registers its own classes, by the same names
    # (gpytorch's MultivariateNormal)
    pairs = sorted(
        {
            (p.__name__, q.__name__)
            for p, q in torch.distributions.kl._KL_REGISTRY
            if p.__module__.startswith("torch.distributions")
            and q.__module__.startswith("torch.distributions")
            and p.__name__ in by_name
            and q.__name__ in by_name
        }
    )
    out += [_kl_target(by_name[p], by_name[q]) for p, q in pairs]
    out += [t for tr in TRANSFORMS for t in _transform_targets(tr)]
    return [_with_known(t) for t in out if defined(t)]


def _with_known(target: Target) -> Target:
    found = tuple(k for pattern, k in KNOWN if fnmatch.fnmatchcase(target.name, pattern))
    return replace(target, known=found) if found else target


register(*_targets())
