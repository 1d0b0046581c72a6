"""A failure's root cause: one signature for one error, whatever wraps it."""

import re

import torch

from fuzzdiff.case import Arg, Case, Values
from fuzzdiff.root_cause import message_pattern, root_cause
from fuzzdiff.targets import Target
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
