"""Known discrepancies are signatures: they explain their own failures and nothing else."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch
from hypothesis import settings

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import CHECKS, UnknownCheck, validate
from fuzzdiff.config import default_corpus
from fuzzdiff.record.files import iter_records, read_record
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets.known import NOT_NONE, Known, matching
from fuzzdiff.case.layout import Layout
from fuzzdiff.targets import all_targets, get_target
from fuzzdiff.targets.target import Only
from fuzzdiff.verdict import Verdict
from fuzzdiff.config import FuzzConfig

RAISED = Verdict("fail", "raised RuntimeError: view size is not compatible with input tensor's size "
                 "and stride", {"exception": "RuntimeError"})
WRONG = Verdict("fail", "<J^T v, u> vs finite differences: analytic 1.0 vs reference 2.0")
PLAIN = Case("t", (Arg((2, 3)), Arg((3,))))
EXPANDED = Case("t", (Arg((2, 3)), Arg((3,), layout=Layout(1, (0,)))))


def _known(**signature) -> Known:
    return Known("grad", "a torch bug", "a repro", **signature)


def test_an_exception_matches_by_type_and_message_and_only_under_its_checks():
    k = _known(raises="RuntimeError", message=r"view size is not compatible")
    assert k.matches("grad", PLAIN, RAISED)
    assert not k.matches("forward", PLAIN, RAISED)
    other_type = replace(RAISED, errors={"exception": "IndexError"})
    assert not k.matches("grad", PLAIN, other_type)
    other_message = Verdict("fail", "raised RuntimeError: shape '[1, 1]' is invalid", {"exception": "RuntimeError"})
    assert not k.matches("grad", PLAIN, other_message)
    assert not k.matches("grad", PLAIN, WRONG)  # a wrong value is not that exception


def test_a_discrepancy_fixed_in_a_release_matches_nothing_from_that_release_on():
    """So a fixed bug that comes back is a new failure, not a known one."""
    here = torch.__version__.split("+")[0]
    assert _known(raises="RuntimeError", message="view size", fixed_in="99.0").matches("grad", PLAIN, RAISED)
    assert not _known(raises="RuntimeError", message="view size", fixed_in=here).matches("grad", PLAIN, RAISED)
    assert not _known(raises="RuntimeError", message="view size", fixed_in="2.0.0").present
    with pytest.raises(ValueError, match="torch release"):
        _known(raises="RuntimeError", message="view size", fixed_in="next")


def test_only_confirmed_failures_are_known_never_a_crash_or_a_timeout():
    k = _known(raises="RuntimeError", message="view size")
    for kind in ("crash", "timeout", "inconclusive"):
        assert not k.matches("grad", PLAIN, replace(RAISED, kind=kind))


def test_a_wrong_value_matches_by_features_per_argument_and_alternatives():
    k = _known(features=("1:stride0|1:gapped",))
    assert k.matches("grad", EXPANDED, WRONG)
    assert not k.matches("grad", PLAIN, WRONG)  # the same wrong value on plain inputs is news
    assert not k.matches("grad", EXPANDED, RAISED)  # an exception is not that wrong value
    x_expanded = Case("t", (Arg((3,), layout=Layout(1, (0,))), Arg((3,))))
    assert not k.matches("grad", x_expanded, WRONG)  # the other argument's layout
    assert _known(features=("stride0",)).matches("grad", x_expanded, WRONG)


def test_params_conditions_follow_dotted_paths_with_values_alternatives_and_not_none():
    params = {"composition": "vmap_vmap", "levels": [{"in_dims": [0, 0]}, {"in_dims": [0, None]}]}
    case = replace(PLAIN, params=params)
    target_outer = _known(message="size", params={"composition": "vmap_vmap", "levels.1.in_dims.1": None,
                                                  "levels.1.in_dims.0": NOT_NONE})
    input_outer = _known(message="size", params={"levels.1.in_dims.0": None, "levels.1.in_dims.1": NOT_NONE})
    wrong = Verdict("fail", "size mismatch")
    assert target_outer.matches("grad", case, wrong)
    assert not input_outer.matches("grad", case, wrong)
    assert _known(message="size", params={"composition": ("vmap", "vmap_vmap")}).matches("grad", case, wrong)
    assert not _known(message="size", params={"levels.2.in_dims.0": None}).matches("grad", case, wrong)
    assert not _known(message="size", params={"backend": "inductor"}).matches("grad", case, wrong)


def test_a_signature_must_single_out_its_failures():
    with pytest.raises(ValueError, match="single it out"):
        _known()  # it would cover the whole pair again
    with pytest.raises(ValueError, match="needs a message pattern"):
        _known(raises="RuntimeError")
    with pytest.raises(ValueError, match="reason and evidence"):
        Known("grad", "", "repro", message="x")
    with pytest.raises(ValueError, match="known must be a tuple"):
        replace(get_target("sin"), known={"grad": "a reason"})


def test_a_known_crash_is_matched_on_its_inputs_and_never_as_a_failure():
    crash = Known("grad", "segfaults", "a repro", features=("1:stride0",), crash=True)
    assert crash.crashes("grad", EXPANDED) and not crash.crashes("grad", PLAIN)
    assert not crash.crashes("forward", EXPANDED)
    assert not crash.matches("grad", EXPANDED, WRONG)
    with pytest.raises(ValueError, match="matched on its inputs"):
        Known("grad", "segfaults", "a repro", raises="RuntimeError", message="x", crash=True)


def _every_known():
    from fuzzdiff.targets.opinfo.known import KNOWN
    seen = {}
    for t in all_targets():
        for k in t.known:
            seen.setdefault(id(k), (t.name, k))
    for pattern, k in KNOWN:
        seen.setdefault(id(k), (pattern, k))
    return list(seen.values())


RECORDS = {read_record(p).id: p for p in iter_records(default_corpus(os.environ))}


@pytest.mark.parametrize("where,known", _every_known(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_known_entry_matches_the_records_that_evidence_it(where, known):
    assert known.checks, where
    for record_id in known.records:
        assert record_id in RECORDS, f"{where}: record {record_id} is not in the corpus"
        record = read_record(RECORDS[record_id])
        # A signature is fixed when all its records are, in the same release; one of
        # several triggers fixed leaves it present for the others.
        assert known.fixed_in is None or record.fixed_in == known.fixed_in, (
            f"{where}: record {record_id} is fixed in {record.fixed_in}, its signature in {known.fixed_in}")
        if not known.present or record.status_on() == "fixed":
            continue  # fixed in this torch: its record passes here (tests/regressions)
        if known.expected:  # a convention: its records say so, and why
            assert (record.status, record.reason) == ("expected", known.expected), (
                f"{where}: record {record_id} of an expected signature is {record.status}, its reason "
                f"{record.reason!r}: mark it with fuzzdiff.record.files.mark(record, 'expected', reason=known.expected)")
        else:
            assert record.status_on() == "open", f"{where}: record {record_id} is {record.status}"
        if known.crash:
            assert record.verdict.kind == "crash" and known.crashes(record.check, record.case), where
            continue
        assert known.matches(record.check, record.case, record.verdict), (
            f"{where}: record {record_id} ({record.check}: {record.verdict.message[:200]}) does not "
            "match its known signature")


def test_an_expected_record_is_listed_by_no_bug_signature():
    """A record re-statused as intended behaviour stays so only while its signature says why."""
    bugs = {rid: where for where, known in _every_known() if known.bug for rid in known.records}
    listed_expected = [(rid, bugs[rid]) for rid, path in RECORDS.items()
                       if rid in bugs and read_record(path).status == "expected"]
    assert not listed_expected, f"expected records listed by a bug's signature: {listed_expected}"


def test_an_expected_discrepancy_still_matches_and_is_no_bug():
    """A convention keeps CI green where a check reports it; it is only filed apart."""
    bug = _known(raises="RuntimeError", message="view size")
    convention = replace(bug, expected="documented: torch.foo's docs say so")
    assert bug.bug and not convention.bug
    assert convention.matches("grad", PLAIN, RAISED) and matching([convention], "grad", PLAIN, RAISED) is convention
    assert "intended" in convention.describe() and "intended" not in bug.describe()
    with pytest.raises(ValueError, match="neither a crash nor fixed"):
        replace(convention, fixed_in="99.0")
    with pytest.raises(ValueError, match="neither a crash nor fixed"):
        Known("grad", "segfaults", "a repro", features=("1:stride0",), crash=True, expected="documented")


def test_the_reviewed_conventions_are_expected_and_the_bugs_beside_them_are_not():
    """Each was decided from torch's docs or an upstream decision (see its ``expected``)."""
    from fuzzdiff.targets.catalog.modules import (
        CONV_NONCONTIGUOUS_GRAD_OUTPUT,
        GROUP_NORM_NONCONTIGUOUS,
        INSTANCE_NORM_NONCONTIGUOUS_INPUT,
        LSTM_FLOAT32_NO_INPUT_GRAD,
    )
    from fuzzdiff.targets.discrepancies import DET_GRAD_TRANSPOSED_STRIDE0
    from fuzzdiff.targets.opinfo.known import known_for

    nextafter = next(k for k in known_for("opinfo/nextafter@0") if "5cbf153cd1380cb6" in k.records)
    eig = next(k for k in known_for("opinfo/linalg.eig@0") if "6290040c5e3c4b62" in k.records)
    for convention in (nextafter, LSTM_FLOAT32_NO_INPUT_GRAD):
        assert convention.expected and not convention.bug, convention.reason
    assert "pytorch/pytorch#148820" in nextafter.expected
    # a wrong value or a refusal that nothing documents stays a bug: eig's phase error is raised
    # on nan cotangents for a phase-invariant loss, the stride-0 det gradient differs in its sums
    for bug in (eig, DET_GRAD_TRANSPOSED_STRIDE0, GROUP_NORM_NONCONTIGUOUS, CONV_NONCONTIGUOUS_GRAD_OUTPUT,
                INSTANCE_NORM_NONCONTIGUOUS_INPUT):
        assert bug.bug, bug.reason


class _TenPercentOff(torch.autograd.Function):
    """The identity whose backward is 10% off: a planted wrong derivative."""

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return 1.1 * g

    @staticmethod
    def jvp(ctx, t):
        return 1.1 * t


def _planted(name: str):
    target = get_target(name)

    def fn(*args, **kwargs):
        out = target.fn(*args, **kwargs)
        return _TenPercentOff.apply(out) if isinstance(out, torch.Tensor) else out
    return replace(target, fn=fn)


@pytest.mark.parametrize("name,check", [("batch_norm", "grad"), ("tl_kronecker", "grad"),
                                        ("matrix_exp_batched", "forward"), ("conv2d", "grad"),
                                        ("clamp_tensor_broadcast", "grad")])
def test_a_different_planted_bug_in_a_known_pair_goes_red(name, check):
    target = _planted(name)
    assert check in target.known_checks()
    with pytest.raises(FuzzFailure) as found:
        fuzz(check, target, FuzzConfig(seed=1, variants=1, structures=1),
             settings=settings(max_examples=40, database=None))
    assert matching(target.known, check, found.value.case, found.value.verdict) is None


# -- check names a target mentions are validated against the registry -------------------

def test_every_catalog_target_names_only_registered_checks():
    for target in all_targets():
        assert validate(target) is target


def test_a_misspelt_check_name_in_a_target_is_refused():
    exp = get_target("exp")
    for bad in (replace(exp, skip={"gard": "typo"}),
                replace(exp, only=Only(("compiel",), "typo"))):
        with pytest.raises(UnknownCheck, match="gard|compiel"):
            validate(bad)
    with pytest.raises(UnknownCheck):
        fuzz("grad", replace(exp, skip={"gard": "typo"}), FuzzConfig(case_options={"max_examples": 1}))


def test_an_allow_list_is_the_reason_every_other_check_does_not_apply():
    inplace = get_target("program_inplace")
    assert CHECKS["compile"].why_not(inplace) is None
    assert {CHECKS[c].why_not(inplace) for c in CHECKS if c != "compile"} == {inplace.only.reason}


def test_the_eager_side_of_batch_norms_strided_weight_is_met_by_the_compiled_gradient_transform_too():
    """The compile check's ``grad`` transform (torch.func.grad of <v, f>, compiled
    whole) compares against the same eager kernel that reads past a stride-0
    weight: its message names the transform, and the signature still holds."""
    from fuzzdiff.targets.catalog.norms import BATCH_NORM_STRIDED_WEIGHT_EAGER as known

    record = read_record(RECORDS["16696c7ae864d554"])
    message = record.verdict.message.replace("inductor vs eager", "inductor, grad(<v, f>) vs eager")
    case = replace(record.case, params={**record.case.params, "transform": "grad"})
    assert known.matches("compile", case, replace(record.verdict, message=message))
    vjp = message.replace("grad(<v, f>)", "vjp(f)(v)")
    assert not known.matches("compile", case, replace(record.verdict, message=vjp))  # not seen: not claimed


def test_a_users_function_meets_the_compiling_machinerys_known_bugs_as_torchs_own_targets_do():
    """Strict export copies an empty input with a large stride through dynamo's
    clone_input, whatever the code (einops' reduce met it): a user's function is
    told it is torch's known bug, not a new failure."""
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.discrepancies import STRICT_EXPORT_EMPTY_STRIDED
    from fuzzdiff.targets.user import user_target

    def scale(a, b):
        return a * b

    record = read_record(RECORDS["30fdb700be85c93a"])
    target = user_target(scale, "a: n 1 k, b: n m k")
    verdict = run_check("export", target, replace(record.case, target=target.name))
    assert verdict.failed, verdict
    assert matching(target.known, "export", record.case, verdict) is STRICT_EXPORT_EMPTY_STRIDED


def test_strict_export_of_a_function_that_closes_over_a_module_is_torchs_known_bug():
    """A user's function that closes over an nn.Module (einops' EinMix met it):
    strict export lifts the module's parameters under names the wrapper's state
    does not hold, pytorch/pytorch#150428; non-strict export is judged as usual."""
    from fuzzdiff.case.values import Values
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.discrepancies import STRICT_EXPORT_UNREGISTERED_PARAMETER
    from fuzzdiff.targets.user import user_target

    linear = torch.nn.Linear(4, 5).double()

    def project(x):
        return linear(x)

    target = user_target(project, "x: n 4", dtypes=(torch.float64,))
    params = {"cotangent": {"layout": "contiguous", "seed": 0, "zeros": 0.0}, "decomposed": False}
    case = Case(target.name, (Arg((2, 4), Values(seed=1)),), "float64", params={**params, "strict": True})
    _export_meets(target, case, STRICT_EXPORT_UNREGISTERED_PARAMETER)
    lenient = replace(case, params={**params, "strict": False})
    assert run_check("export", target, lenient).kind == "pass"


def _windows(x):
    """local-attention's bucketing (einops' rearrange('(w n) -> 1 w n')) and its mask's broadcast."""
    n = x.shape[0]
    torch._check(n % 2 == 0)
    s = x.view(n // 2, 2).view(1, n // 2, 2)
    return s * s[..., None]


def test_export_of_a_view_whose_symbolic_size_is_one_is_torchs_known_bug():
    """local-attention's LocalAttention at a sequence of 2: export's own
    dimension-constraint solver cannot print the guard its broadcast leaves."""
    from fuzzdiff.case.values import Values
    from fuzzdiff.targets.discrepancies import EXPORT_DIM_SOLVER_NEGATIVE_POWER
    from fuzzdiff.targets.user import user_target

    target = user_target(_windows, "x: n", dtypes=(torch.float64,))
    params = {"cotangent": {"layout": "contiguous", "seed": 0, "zeros": 0.0}, "decomposed": False, "strict": False}
    case = Case(target.name, (Arg((2,), Values(seed=1)),), "float64", params=params)
    _export_meets(target, case, EXPORT_DIM_SOLVER_NEGATIVE_POWER)


def _export_meets(target, case, known):
    """The export check fails at ``case`` as ``known`` says, where this torch has
    the bug; on a release that fixes it, the function exports and the check passes."""
    from fuzzdiff.search.runner import run_check

    verdict = run_check("export", target, case)
    if known.present:
        assert verdict.failed, verdict
        assert matching(target.known, "export", case, verdict) is known
    else:
        assert verdict.kind == "pass", verdict
