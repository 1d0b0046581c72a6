"""A function that holds float64 tensors of its own is checked in float64,
and the report says why float32 was not drawn (a module cast with .double()
inside a user's function: nflows' and torch-harmonics' modules met it)."""

from __future__ import annotations

import torch

import fuzzdiff
from fuzzdiff.search.refused_dtypes import refused_dtypes
from fuzzdiff.targets.user import user_target

LINEAR = torch.nn.Linear(3, 2).double()


def projected(x):
    return torch.tanh(LINEAR(x))


def only_float32(x):
    if x.dtype != torch.float32:
        raise TypeError(f"expected float32, got {x.dtype}")
    return x.sin()


def never(x):
    raise ValueError("outside its domain everywhere")


def test_a_dtype_the_plain_call_refuses_where_another_runs_is_named_with_its_error():
    refused = refused_dtypes(user_target(projected, "x: b 3"))
    assert list(refused) == [torch.float32], refused
    assert "same dtype" in refused[torch.float32], refused


def test_whichever_dtype_it_refuses():
    assert list(refused_dtypes(user_target(only_float32, "x: n"))) == [torch.float64]


def test_a_function_that_runs_in_every_dtype_refuses_none():
    assert refused_dtypes(user_target(torch.sin, "x: n m")) == {}


def test_a_function_that_raises_in_every_dtype_says_nothing_of_dtypes():
    """Its inputs are outside its domain: the checks report that, at their own."""
    assert refused_dtypes(user_target(never, "x: n")) == {}


def test_the_check_draws_what_it_takes_and_says_so_instead_of_an_input_domain_failure():
    report = fuzzdiff.check(projected, "x: b 3", checks=["grad"], max_examples=5, seed=0, progress=False)
    assert report.ok, report.summary()
    assert report.target.dtypes == (torch.float64,)
    assert report.tallies["grad"].cases >= 5, report.summary()
    assert "float32 not drawn" in report.summary() and "float32 not drawn" in report.warning()
