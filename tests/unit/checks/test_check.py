"""A check is one declaration, its ``Check``: what it costs and its role in
torch's OpInfo tests are fields there, read by the budgets and by the OpInfo
targets, with nothing to add anywhere else."""

import pytest

from fuzzdiff.campaign.plan import SHARE, plan
from fuzzdiff.campaign.worker import BatchSize
from fuzzdiff.checking.budget import weight
from fuzzdiff.checks import CHECKS
from fuzzdiff.checks.check import Check, Cost
from fuzzdiff.targets import get_target
from fuzzdiff.targets.opinfo.tables import OUTSIDE
from fuzzdiff.targets.role import OpInfoRole
from fuzzdiff.verdict import Verdict


def _passes(target, case):
    return Verdict("pass", "")


GRAD = CHECKS["grad"].cost.example
NEW = Check(
    "unit_new_check",
    _passes,
    cost=Cost(batch=7.0, example=3 * GRAD),
    opinfo=OpInfoRole(flags=("supports_gradgrad",), tests=(("TestUnitNew", "test_unit_new"),)),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(CHECKS, NEW.name, NEW)
    return NEW


def test_the_budgets_read_a_new_checks_cost(registered):
    assert weight(NEW.name) == pytest.approx(3.0)  # 3 times grad's example: 3 times its share
    p = plan([(get_target("sin"), NEW)], BatchSize(examples=10), budget=1e6, jobs=1)
    assert p.full_budget == pytest.approx((7.0 + p.examples * 3 * GRAD) / SHARE)


def test_an_opinfo_target_declines_a_new_check_by_its_role():
    # hardsigmoid's OpInfo says supports_gradgrad=False; mul's says True
    assert NEW.why_not(get_target("opinfo/nn.functional.hardsigmoid@0")) == "OpInfo supports_gradgrad=False"
    assert NEW.why_not(get_target("opinfo/mul@0")) is None
    assert NEW.why_not(get_target("sin")) is None  # a role means nothing to a catalog target
    no_role = Check("unit_no_role", _passes)
    assert no_role.why_not(get_target("opinfo/mul@0")) == OUTSIDE
    assert no_role.why_not(get_target("sin")) is None
