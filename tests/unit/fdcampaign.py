"""The campaign tests' targets, as a module written to a temporary directory
and importable by the workers (they are given the parent's sys.path): cheap
correct ones, one with a planted wrong backward (and a reduction whose backward
is wrong only at a stride-0 input), one that calls os.abort() on
any input of two or more elements, which kills the worker running it, slow
ones, one that leaves its process unlike a fresh one, and one that checks the
environment it runs in.
"""

import contextlib
import textwrap

import pytest
from tests.unit.fdhelpers import WRONG_SQUARE

from fuzzdiff.config import FuzzConfig


def campaign(**settings) -> FuzzConfig:
    """A campaign's settings as ``fuzzdiff run`` makes them (one drawn case an
    example, at two variants; no example database), with ``settings`` set."""
    return FuzzConfig(**{"structures": 1, "variants": 2, **settings})

ZOO = WRONG_SQUARE + textwrap.dedent('''
    import os
    import time
    from hypothesis.configuration import storage_directory
    from fuzzdiff.targets.known import Known
    from fuzzdiff.targets.target import Target

    def slow(x):
        time.sleep(30)
        return x.sin()

    def sluggish(x):
        time.sleep(0.2)
        return x.sin()

    def aborting(x):
        if x.numel() >= 2:
            os.abort()
        return x.sin()

    def env_probe(x):
        # dies where the parent's newest variable reached the worker's environment (3), or
        # where Hypothesis's storage is not the one the command resolved (4)
        if "FUZZDIFF_TEST_MARK" in os.environ:
            os._exit(3)
        if storage_directory().path.name != "fd_zoo_storage":
            os._exit(4)
        return x.sin()

    LEAKED = []

    def leaky(x):
        # once per process, leaves inference mode on for good (its guard lives on), which
        # fuzzdiff.guards.torch_state cannot put back: only a fresh process is whole again
        if not LEAKED:
            LEAKED.append(torch.inference_mode())
            LEAKED[-1].__enter__()
        return x.sin()

    class ExpandedSum(torch.autograd.Function):
        """sum over the last dim, whose backward is planted wrong (twice the
        gradient) only where the input is stride 0 along that dim."""

        @staticmethod
        def forward(ctx, x):
            ctx.shape, ctx.expanded = x.shape, x.shape[-1] > 1 and x.stride(-1) == 0
            return x.sum(-1)

        @staticmethod
        def backward(ctx, g):
            grad = g.unsqueeze(-1).expand(ctx.shape)
            return 2 * grad if ctx.expanded else grad

    def _t(name, fn, attr, **kw):
        return Target(name, fn, "x: n", origin=f"fd_campaign_zoo:{attr}", max_side=3, **kw)

    SIN = _t("cheap_sin", torch.sin, "SIN")
    EXPANDED_SUM = Target("expanded_sum", ExpandedSum.apply, "x: m n", origin="fd_campaign_zoo:EXPANDED_SUM", max_side=3)
    EXP = _t("cheap_exp", torch.exp, "EXP")
    TANH = _t("cheap_tanh", torch.tanh, "TANH")
    BAD = _t("planted_square", WrongSquare.apply, "BAD")
    # a known discrepancy matches its own signature: the wrong value vs finite differences
    PLANTED = Known("grad", "planted, and known", "WrongSquare.backward is 3 g x",
                    message=r"^<J\\^T v, u> vs finite differences")
    KNOWN = _t("known_square", WrongSquare.apply, "KNOWN", known=(PLANTED,))
    ABORT = _t("aborting", aborting, "ABORT")
    SLOW = _t("slow", slow, "SLOW")
    SLUGGISH = _t("sluggish", sluggish, "SLUGGISH")
    LEAKY = _t("leaky", leaky, "LEAKY")
    ENV_PROBE = _t("env_probe", env_probe, "ENV_PROBE")
    KNOWN_BUT_HANGS = _t("known_but_hangs", slow, "KNOWN_BUT_HANGS", known=(PLANTED,))
''')


@contextlib.contextmanager
def installed(folder):
    """The zoo as the module ``fd_campaign_zoo``, importable here and by the workers."""
    (folder / "fd_campaign_zoo.py").write_text(ZOO)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))  # workers get the parent's sys.path
        import fd_campaign_zoo
        yield fd_campaign_zoo
