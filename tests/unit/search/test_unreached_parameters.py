"""A module that computes with its own parameters, not the drawn ones, is said to (ncps' LTC)."""

from __future__ import annotations

import torch

import fuzzdiff
from fuzzdiff.search.unreached_parameters import unreached_parameters
from fuzzdiff.targets.user import user_target


class PrivateWeights(torch.nn.Module):
    """Keeps its weight in a dict too, as ncps' LTC does: functional_call swaps
    the registered Parameter, and the forward reads the dict's."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self._params = {"w": self.w}

    def forward(self, x):
        return x * self._params["w"]


class Weights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self.unused = torch.nn.Parameter(torch.ones(2))  # never read: reached by neither

    def forward(self, x):
        return x * self.w


def test_a_module_that_reads_its_own_parameters_is_said_to():
    why = unreached_parameters(user_target(PrivateWeights(), "x: b 3"))
    assert why is not None and "p_w" in why and "functional_call" in why, why


def test_a_module_whose_drawn_parameters_reach_its_outputs_is_not():
    assert unreached_parameters(user_target(Weights(), "x: b 3")) is None


def test_the_report_says_so_beside_a_pass():
    """The grad check passes (zero gradients agree), and the report says why that says nothing."""
    report = fuzzdiff.check(PrivateWeights(), "x: b 3", checks=["grad"], max_examples=5, progress=False)
    assert report.ok
    assert "computes with its own parameters" in report.warning(), report.warning()
    assert "computes with its own parameters" in report.summary()
