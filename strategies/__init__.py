"""Hypothesis strategies for differentiable-tensor examples.

``tensors()`` and ``aliased()`` draw real tensors for your own @given tests;
the rest are the recipes fuzzdiff's checks draw cases from.

Small composable functions in Hypothesis's style: each validates its arguments
and raises InvalidArgument naming the bad one. They know shapes, layouts,
aliasing and values, and nothing about checks.
"""

from strategies.aliasing import aliasing
from strategies.cases import cases
from strategies.cotangents import probes
from strategies.dtypes import dtypes
from strategies.layouts import layouts, strided
from strategies.shapes import broadcastable_shapes, shapes, spec_shapes
from strategies.tensors import aliased, tensors
from strategies.values import sampling_interval, values

__all__ = [
    "aliasing",
    "cases",
    "probes",
    "dtypes",
    "layouts",
    "strided",
    "broadcastable_shapes",
    "shapes",
    "spec_shapes",
    "sampling_interval",
    "values",
    "tensors",
    "aliased",
]
