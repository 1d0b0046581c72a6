"""fuzzdiff.search.blame: whose bug a failure is, PyTorch's or the code's, with the evidence."""

import torch

import fuzzdiff
from tests.unit.fdhelpers import WrongSquare

from fuzzdiff.search.blame import PYTORCH, USER, Evidence, blame, gather
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import get_check
from fuzzdiff.search.inspection import COMPILING, LAYOUT, RANDOM, inspect_call
from fuzzdiff.guards.raised import raised
from fuzzdiff.targets import get_target
from fuzzdiff.targets.standin import stand_in
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict

PROBES = {
    "cotangent": {"seed": 1, "layout": "contiguous", "zeros": 0.0},
    "direction": {"seed": 2, "layout": "contiguous", "zeros": 0.0},
}


def two_outputs(x, y):
    return (x * y).sum(-1), torch.cat([x, y], -1)


def _user(fn, spec):
    return Target(getattr(fn, "__qualname__", "fn"), fn, spec, family="user")


def _case(*shapes):
    return Case("fn", tuple(Arg(s, Values(seed=3 + i)) for i, s in enumerate(shapes)), "float64", params=PROBES)


MISMATCH = Verdict("fail", "<J^T v, u> vs finite differences: analytic 1 vs reference 2; confirmed", {"analytic": 1.0})


def test_a_catalog_target_is_torchs_own():
    whose = blame("grad", get_target("sin"), MISMATCH, Evidence())
    assert whose.whose == PYTORCH and "torch's own" in whose.evidence and whose.via == "torch's target"


def test_an_internal_assert_and_torchs_machinery_point_at_pytorch():
    target = _user(torch.sin, "x: n")
    internal = Verdict("fail", "raised RuntimeError: ...", {"exception": "RuntimeError", "internal_assert": True})
    assert blame("compile", target, internal, Evidence()).via == "internal assert"
    inside = Verdict("fail", "raised X", {"exception": "X", "torch_part": "AOTAutograd", "raised_in": "torch/a.py:1"})
    whose = blame("compile", target, inside, Evidence())
    assert whose.whose == PYTORCH and "AOTAutograd" in whose.evidence
    broken = Verdict("fail", "raised X", {"exception": "X", "torch_state": "dispatch keys left excluded: Python"})
    assert blame("grad", target, broken, Evidence()).via == "torch state"


def test_where_an_error_was_raised_is_read_from_its_root_cause():
    def user_code():
        raise ValueError("mine")

    try:
        try:
            user_code()
        except ValueError as e:
            raise RuntimeError("wrapped by a compiler") from e
    except RuntimeError as e:
        origin = raised(e)
    assert "in user_code" in origin.where and origin.part is None and not origin.internal
    try:
        torch.fx.symbolic_trace(lambda x: x if x.sum() > 0 else -x)
    except Exception as e:  # noqa: BLE001
        origin = raised(e)
    assert origin.part == "FX tracing", origin


def test_a_wrong_backward_of_the_users_own_is_theirs():
    target = _user(WrongSquare.apply, "x: n")
    case = _case((3,))
    assert inspect_call(target, case).rules == ("WrongSquare",)
    evidence = gather(get_check("grad"), target, case)
    assert evidence.stand_in_verdict.kind == "pass"
    whose = blame("grad", target, MISMATCH, evidence)
    assert whose.whose == USER and "WrongSquare" in whose.evidence and "passes" in whose.evidence


def test_a_failure_the_stand_in_shares_is_pytorchs_and_the_stand_in_is_its_repro():
    target = _user(two_outputs, "x: n m, y: n m")
    case = _case((2, 3), (2, 3))
    standin = stand_in(target, case)
    x, y = case.materialize(requires_grad=False).args
    outs = standin.target.fn(x, y)
    assert [o.shape for o in outs] == [o.shape for o in two_outputs(x, y)]
    namespace: dict = {}
    exec("\n".join([*standin.source["imports"], *standin.source["setup"], *standin.source["definitions"]]), namespace)
    again = namespace[standin.source["call"]](x, y)  # the stored code is the function: it replays elsewhere
    assert all(torch.equal(a, b) for a, b in zip(outs, again))
    same = Evidence(standin, MISMATCH)
    whose = blame("grad", target, MISMATCH, same)
    assert whose.whose == PYTORCH and whose.via == "stand-in" and "no code of yours" in whose.evidence
    differs = Evidence(standin, Verdict("pass"))
    assert blame("grad", target, MISMATCH, differs).whose == USER


def test_two_of_torchs_ways_of_running_the_same_code_disagree_is_torchs_unless_the_code_brings_a_rule():
    target = _user(two_outputs, "x: n m, y: n m")
    mismatch = Verdict("fail", "inductor vs eager: output 0 differs", {})
    whose = blame("compile", target, mismatch, Evidence())
    assert whose.whose == PYTORCH and whose.via == "mechanism" and "compiler" in whose.evidence
    assert blame("compile", target, mismatch, Evidence(rules=("WrongSquare",))).whose == USER
    assert blame("grad", target, mismatch, Evidence()).whose == USER  # grad's other side is maths, not torch


def test_torchs_machinery_that_runs_the_codes_own_rule_does_not_clear_the_code():
    """An error raised where functorch runs an autograd.Function's own jvp under
    a transform may be the Function's (roma's jvp read ctx.saved_for_forward)."""
    target = _user(WrongSquare.apply, "x: n")
    there = Verdict("fail", "raised RuntimeError: Trying to set a forward gradient of another size",
                    {"exception": "RuntimeError", "torch_part": "functorch's support for autograd.Function",
                     "raised_in": "torch/_functorch/autograd_function.py:1 in jvp"})
    assert blame("vmap", target, there, Evidence(rules=("WrongSquare",))).whose == USER
    assert blame("vmap", target, there, Evidence()).whose == PYTORCH  # with no rule of its own, torch's


def channel_scale(x, s):  # the zoo's layout bug: a branch on the memory layout, reshaping as if NCHW
    n, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last):
        return (x.reshape(n * h * w, c) * s).reshape(n, c, h, w)
    return x * s.reshape(1, c, 1, 1)


def approximated_when_compiled(x):
    if torch.compiler.is_compiling():
        return x * 1.001
    return x


def coin_flip_residual(x):
    import random

    return x * (2.0 if random.random() >= 0.5 else 0.0)


def test_code_that_asks_how_it_is_run_owns_what_the_two_runs_differ_by():
    """Two of torch's ways of running the same code must agree, unless the code
    itself tells them apart: by its layout, by being compiled, by Python's random."""
    layout = _user(channel_scale, "x: n c h w, s: c")
    seen = inspect_call(layout, _case((1, 2, 2, 2), (2,)))
    assert ("Tensor.is_contiguous", LAYOUT) in seen.asks and not seen.rules
    mismatch = Verdict("fail", "the other layout vs this one: output 0 differs", {})
    whose = blame("layout", layout, mismatch, Evidence(asks=seen.asks))
    assert whose.whose == USER and "Tensor.is_contiguous" in whose.evidence
    compiled = _user(approximated_when_compiled, "x: n")
    asks = inspect_call(compiled, _case((3,))).asks
    assert (("torch.compiler.is_compiling()", COMPILING) in asks), asks
    assert blame("compile", compiled, mismatch, Evidence(asks=asks)).whose == USER
    coin = _user(coin_flip_residual, "x: n")
    asks = inspect_call(coin, _case((3,))).asks
    assert any(kind == RANDOM for _, kind in asks), asks
    assert blame("checkpoint", coin, mismatch, Evidence(asks=asks)).whose == USER
    # and code that asks nothing of its run: the mechanism's
    plain = _user(two_outputs, "x: n m, y: n m")
    assert inspect_call(plain, _case((2, 3), (2, 3))).asks == ()
    assert blame("layout", plain, mismatch, Evidence()).whose == PYTORCH


def test_a_failure_blamed_through_the_stand_in_records_the_stand_in_too(tmp_path):
    """The torch-only repro to file is the stand-in's record: its definition is
    the stand-in's own code, which replays (trusted) and scripts torch-only."""
    from fuzzdiff.search.blame import Blame
    from fuzzdiff.record.files import read_record
    from fuzzdiff.search.outcome import FuzzFailure
    from fuzzdiff.corpus.repro import replay
    from fuzzdiff.script import standalone_script
    from fuzzdiff.search.settling import stand_in_record

    target = _user(two_outputs, "x: n m, y: n m")
    case = _case((2, 3), (2, 3))
    evidence = gather(get_check("grad"), target, case)
    assert evidence.stand_in_verdict.kind == "pass"
    failure = FuzzFailure("grad", target.name, case, MISMATCH)
    failure.blame = Blame(PYTORCH, "the stand-in fails the same way", "stand-in")
    failure.evidence = evidence.to_json()
    path = stand_in_record(tmp_path, failure, target)
    record = read_record(path)
    assert record.target == "two_outputs.stand_in" and record.blame["via"] == "stand-in"
    assert "C0_0" in "".join(record.definition["source"]["setup"])
    assert replay(path, trust_source=True).kind == "pass"  # the stand-in is right here: what the record says it did
    script = standalone_script(record.check, record.case, record.verdict,
                               target=__import__("fuzzdiff.corpus.repro").corpus.repro.load(path, trust_source=True)[1])
    assert "import fuzzdiff" not in script and "def stand_in(x0, x1" in script
    failure.blame = Blame(USER, "yours", "user")
    assert stand_in_record(tmp_path, failure, target) is None  # only where the blame rests on it


def test_a_known_discrepancy_of_a_torch_function_the_code_calls_is_torchs():
    def running_product(x):
        return torch.cumprod(x, -1)

    zero = Case("fn", (Arg((3,), Values(seed=3, structure=(("zeros", 1),))),), "float64", params=PROBES)
    nan = Verdict("fail", "<w, d2f[u, u']> reverse-over-forward vs finite differences: analytic nan vs reference "
                  "2.0 (abs error inf); confirmed", {"analytic": float("nan")})
    target = _user(running_product, "x: n")
    evidence = gather(get_check("forward2"), target, zero, nan)
    assert evidence.torch_known is not None and evidence.torch_known[0] == "cumprod"
    whose = blame("forward2", target, nan, evidence)
    assert whose.whose == PYTORCH and whose.via == "known discrepancy" and "cumprod" in whose.evidence
    # not at a point the signature does not cover, nor through a rule of the code's own
    plain = Case("fn", (Arg((3,), Values(seed=3)),), "float64", params=PROBES)
    assert gather(get_check("forward2"), target, plain, nan).torch_known is None
    own = _user(lambda x: WrongSquare.apply(torch.cumprod(x, -1)), "x: n")
    assert gather(get_check("forward2"), own, zero, nan).torch_known is None


def test_a_known_discrepancy_is_met_through_the_name_torch_documents_as_its_alias():
    """torch.slogdet is torch.linalg.slogdet ("Alias for :func:`torch.linalg.slogdet`");
    normflows' Invertible1x1Conv calls the old name and met the nested-jvp discrepancy."""
    from fuzzdiff.search.blame import _torch_aliases
    from fuzzdiff.targets.discrepancies import NESTED_JVP_LINALG

    assert ("slogdet", "linalg_slogdet") in _torch_aliases() and ("det", "linalg_det") in _torch_aliases()

    def log_volume(w):
        return torch.slogdet(w)[1]

    case = Case("fn", (Arg((3, 3), Values(seed=2)),), "float64", params=PROBES)
    zero = Verdict("fail", "<w, d2f[u, u']> reverse-over-forward vs finite differences: analytic 0.0 vs reference "
                   "-1.4 (abs error 1.4, allowed 1.4e-07); confirmed", {"analytic": 0.0})
    evidence = gather(get_check("forward2"), _user(log_volume, "w: 3 3"), case, zero)
    if not NESTED_JVP_LINALG.present:  # fixed in this torch: a failure like it is news
        assert evidence.torch_known is None
        return
    assert evidence.torch_known == ("slogdet", NESTED_JVP_LINALG.describe())


def test_an_opinfo_known_discrepancy_reached_through_user_code_is_known():
    """torch.linalg.eigh's known nan under reverse over forward is OpInfo's
    (opinfo/linalg.eigh@*), not a catalog target's: code that calls eigh
    (torchjd's AlignedMTL, a newcomer's trial) meets it as known, not FAILED."""

    def vectors(a):
        return torch.linalg.eigh(a + a.mT).eigenvectors

    report = fuzzdiff.check(vectors, "a: n n", checks=["forward2"], seed=1, progress=False, isolate=False)
    assert report.ok, report.failures
    assert [k.check for k in report.known] == ["forward2"] and "analytic nan" in report.known[0].message


def test_a_known_discrepancy_in_how_torch_runs_the_codes_own_rules_is_torchs():
    """Compiled code at dual inputs drops an autograd.Function's jvp (torch 2.13): a
    user's Function that meets it is not the user's bug, though its rule takes part."""
    from fuzzdiff.targets.discrepancies import FUNCTION_JVP_DROPPED_AT_DUALS as dropped

    target = _user(lambda x: WrongSquare.apply(x), "x: n")
    case = Case("fn", (Arg((3,)),), "float64", params={**PROBES, "backend": "aot_eager", "transform": "dual"})
    lost = Verdict("fail", "aot_eager, f at dual inputs vs eager: tangent 0: no tangent (eager: a tangent)")
    evidence = gather(get_check("compile"), target, case, lost)
    if not dropped.present:  # fixed in this torch: a failure like it is news, and the code's
        assert evidence.rules_known is None
        return
    assert evidence.rules and evidence.rules_known == dropped.describe()
    whose = blame("compile", target, lost, evidence)
    assert whose.whose == PYTORCH and whose.via == "known discrepancy" and "WrongSquare" in whose.evidence
    wrong = Verdict("fail", "aot_eager, f at dual inputs vs eager: tangent 0: abs error 1.0 (reference scale 1)")
    assert gather(get_check("compile"), target, case, wrong).rules_known is None


def test_a_layout_view_refuses_by_contract_is_the_codes_where_its_own_line_calls_view():
    """auraloss's ``target.view(-1, n)`` at a sliced layout: view's documented
    refusal, the library's bug; the same refusal in torch's own Python is torch's."""
    target = _user(two_outputs, "x: n m, y: n m")
    message = ("raised RuntimeError: view size is not compatible with input tensor's size and stride (at least "
               "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
    at = lambda where: Verdict("fail", message, {"exception": "RuntimeError", "raised_in": where})  # noqa: E731
    for check in ("layout", "alias"):
        whose = blame(check, target, at("auraloss/freq.py:228 in forward"), Evidence())
        assert whose.whose == USER and "view" in whose.evidence and "auraloss/freq.py:228" in whose.evidence
        assert whose.level is not None  # named already: localizing would replay view at the case's own layout
        assert blame(check, target, at("torch/nn/functional.py:3005 in local_response_norm"), Evidence()).whose == PYTORCH
    assert blame("layout", target, Verdict("fail", "raised RuntimeError: Expected X.is_contiguous",
                                           {"exception": "RuntimeError", "raised_in": "a.py:1 in f"}),
                 Evidence()).whose == PYTORCH  # a refusal no contract documents: torch's layout handling


def test_a_raise_only_under_compiled_autograd_or_export_is_torchs_compiler():
    """torchquad's integrand under dynamo: OrderedDict.popitem(last=False) pops the
    last item, and the library's own line then raises a TypeError."""
    target = _user(two_outputs, "x: n m, y: n m")
    raised = Verdict("fail", "raised TypeError: amin() missing 1 required positional arguments: \"input\"",
                     {"exception": "TypeError", "raised_in": "autoray/autoray.py:2203 in translated_function"})
    for check in ("compiled_autograd", "export"):
        whose = blame(check, target, raised, Evidence())
        assert whose.whose == PYTORCH and whose.via == "mechanism", check
        assert blame(check, target, raised, Evidence(rules=("WrongSquare",))).whose == USER


def asks_torchscript(x):
    return x * (2 if torch.jit.is_tracing() or torch.jit.is_scripting() else 3)


def test_asking_torchscript_does_not_tell_compiled_from_eager():
    """torch.jit.is_tracing() is False under torch.compile and torch.export as in
    eager (torchquad asks it): no question that tells the compile checks' runs apart."""
    target = _user(asks_torchscript, "x: n")
    raised = Verdict("fail", "raised TypeError: amin() missing 1 required positional arguments",
                     {"exception": "TypeError", "raised_in": "autoray/autoray.py:2203 in translated_function"})
    evidence = gather(get_check("compiled_autograd"), target, Case(target.ref, (Arg((2,), Values(seed=0)),)))
    assert not evidence.asks, evidence.asks
    assert blame("compiled_autograd", target, raised, evidence).whose == PYTORCH


def _wrapping_every_error(x, y):
    """As einx's generated code: every exception wrapped in the library's own."""
    try:
        return (x @ y).sin() + 1
    except Exception as e:
        raise ValueError("the library's own wrapper") from e


def test_code_that_swallows_checkpoints_early_stop_owns_the_error():
    """checkpoint stops a recomputation by raising _StopRecomputationError
    through the code once it has the tensors it needs; code that wraps every
    exception breaks that. The root cause was torch's frame, so the failure
    was "raised inside torch's checkpoint": PyTorch's (a fifth newcomer trial, einx)."""
    import fuzzdiff

    report = fuzzdiff.check(_wrapping_every_error, "x: n m, y: m k", checks=["checkpoint"], seed=0, max_examples=20)
    (failure,) = report.failures
    assert failure.blame.whose == USER, failure.blame
    assert "_StopRecomputationError" in failure.blame.evidence and "test_blame.py" in failure.blame.evidence


def _normalized_logsumexp(x):
    return torch.logsumexp(torch.nn.functional.normalize(x, dim=-1), -1)


def test_a_known_raise_shared_by_several_functions_names_the_latest_called():
    """F.normalize (p=1) and torch.logsumexp share one known raise under reverse over
    forward; code that normalizes (p=2) and then takes a logsumexp meets logsumexp's
    ("output 0 of Exp"), and the evidence names it, not normalize."""
    report = fuzzdiff.check(_normalized_logsumexp, "x: n>=1 3", checks=["forward2"], dtypes=[torch.float64], seed=0,
                            max_examples=10, progress=False, isolate=False)
    assert report.ok and report.known, report.summary()
    assert "calls torch's logsumexp" in report.known[0].blame.evidence, report.known[0].blame.evidence
