"""A failure's root cause: one signature for one error, whatever wraps it."""

import re
from pathlib import Path

import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.root_cause import message_pattern, root_cause
from fuzzdiff.targets import Target
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict, error_shape, headline


def _fake_tensor_failure(inner: str, size: int) -> str:
    """Dynamo's message for an error raised in fake-tensor dispatch, as a check reports it."""
    return (
        "raised TorchRuntimeError: RuntimeError when making fake tensor call\n"
        "  Explanation: Dynamo failed to run FX node with fake tensors: call_function <function f at 0x7f>"
        f"(*(FakeTensor(..., size=(s{size}, {size})),)): got RuntimeError('{inner}\\nException raised from "
        "throw_cannot_call_with_symbolic at TensorImpl.cpp:340 (most recent call first):\\nframe #0: ...')\n"
        "  Hint: ..."
    )


SIZES = "Cannot call sizes() on tensor with symbolic sizes/strides"
ASSERT = 'isIntList() INTERNAL ASSERT FAILED at "ivalue_inl.h":1981, please report a bug to PyTorch.'


def test_the_headline_of_a_wrapped_error_names_the_wrapped_one():
    line = headline(_fake_tensor_failure(SIZES, 3))
    assert line == f"raised TorchRuntimeError: RuntimeError when making fake tensor call: RuntimeError: {SIZES}"
    backend = "raised BackendCompilerFailed: backend='inductor' raised:\nCppCompileError: C++ compile error\n\nCommand:"
    inner = "CppCompileError: C++ compile error"
    assert headline(backend) == f"raised BackendCompilerFailed: backend='inductor' raised: {inner}"
    assert headline("raised RuntimeError: shapes do not match\nmore") == "raised RuntimeError: shapes do not match"
    assert headline("") == ""


def test_two_errors_in_one_wrapper_are_two_root_causes_and_one_error_at_other_sizes_is_one():
    sizes, other = _fake_tensor_failure(SIZES, 3), _fake_tensor_failure(ASSERT, 3)
    assert message_pattern(sizes) != message_pattern(other)
    assert re.search(message_pattern(sizes), headline(_fake_tensor_failure(SIZES, 17)))
    assert not re.search(message_pattern(sizes), headline(other))
    assert error_shape(Verdict("fail", sizes)) != error_shape(Verdict("fail", other))
    assert error_shape(Verdict("fail", sizes)) == error_shape(Verdict("fail", _fake_tensor_failure(SIZES, 17)))


def test_a_reported_wrapped_error_is_matched_by_its_root_cause_and_another_is_not():
    target = Target("sin", torch.sin, "x: n")
    case = Case("sin", (Arg((3,), Values(seed=1)),))
    errors = {"exception": "TorchRuntimeError"}
    found = root_cause("compile", case, Verdict("fail", _fake_tensor_failure(SIZES, 3), errors), target)
    assert found.matches("compile", case, Verdict("fail", _fake_tensor_failure(SIZES, 5), errors))
    assert not found.matches("compile", case, Verdict("fail", _fake_tensor_failure(ASSERT, 3), errors))


def test_conventions_are_no_root_cause_and_are_grouped_apart(tmp_path):
    """A record of an expected signature, or of status expected, is no bug: corpus
    stats counts it among no root cause."""
    from fuzzdiff.record.files import mark, read_record, write_record
    from fuzzdiff.corpus.causes import conventions, root_causes
    from fuzzdiff.targets.known import Known

    wrong = Verdict("fail", "<J^T v, u> vs finite differences: analytic 1.0 vs reference 2.0")
    raised = Verdict("fail", "raised RuntimeError: view size is not compatible", {"exception": "RuntimeError"})
    paths = [write_record(tmp_path, "grad", Case(name, (Arg((3,), Values(seed=i)),)), verdict)[0]
             for i, (name, verdict) in enumerate([("exp", wrong), ("nextafter", wrong), ("sin", raised),
                                                  ("custom", wrong)])]
    mark(read_record(paths[3]), "expected", reason="documented: custom ops have no forward-mode rule")
    bug, convention, plain, marked = (read_record(p) for p in paths)
    assert marked.status == "expected" and marked.reason.startswith("documented")
    known = [Known("grad", "a bug", "repro", features=("stride0",), records=(bug.id,)),
             Known("grad", "a rule", "repro", features=("alias",), records=(convention.id,),
                   expected="chosen on purpose upstream")]
    causes = root_causes([bug, convention, plain, marked], known)
    assert sorted(r.id for c in causes for r in c.records) == sorted([bug.id, plain.id])
    assert [c.known for c in causes if c.known is not None] == [known[0]]
    apart = conventions([bug, convention, plain, marked], known)
    assert sorted(r.id for c in apart for r in c.records) == sorted([convention.id, marked.id])
    # without the expected field the same record is a bug again
    assert convention.id in {r.id for c in root_causes([convention], [Known(
        "grad", "a rule", "repro", features=("alias",), records=(convention.id,))]) for r in c.records}


def test_a_reason_belongs_to_an_expected_record(tmp_path):
    import json

    import pytest

    from fuzzdiff.record.files import mark, read_record, write_record
    from fuzzdiff.record.format import CorpusError

    path, _ = write_record(tmp_path, "grad", Case("exp", (Arg((3,), Values(seed=1)),)), Verdict("fail", "wrong"))
    mark(read_record(path), "expected", reason="documented")
    mark(read_record(path), "open")  # reopened: the reason goes with the status
    assert read_record(path).reason is None and "reason" not in json.loads(path.read_text())
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "reason": "documented"}))
    with pytest.raises(CorpusError, match="'reason' belongs to an 'expected' record"):
        read_record(path)
    path.write_text(json.dumps({**data, "status": "expected", "reason": 3}))
    with pytest.raises(CorpusError, match="'reason' must be a string"):
        read_record(path)


def test_corpus_stats_groups_a_record_under_a_signature_that_no_target_lists():
    """``fuzzdiff corpus stats`` knows every declared signature, not only the
    catalog's and the OpInfo table's (NESTED_JVP_FUNCTION is a user code's)."""
    from rich.console import Console

    from fuzzdiff.commands.corpus import _print_root_causes
    from fuzzdiff.record.files import iter_records, read_record
    from fuzzdiff.targets.discrepancies import NESTED_JVP_FUNCTION

    assert NESTED_JVP_FUNCTION.records
    records = [read_record(p) for p in iter_records(Path(__file__).parents[3] / "corpus")]
    listed = [r for r in records if r.id in NESTED_JVP_FUNCTION.records and r.status_on() == "open"]
    assert listed, "the signature's records are open on this torch"
    console = Console(record=True, width=400)
    _print_root_causes(console, listed)
    text = console.export_text()
    assert "by an automatic one" in text and "0 by an automatic one" in text, text
