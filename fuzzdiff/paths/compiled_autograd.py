"""Compiled autograd: the backward captured as a graph and compiled, and the eager one it must match.

``torch._dynamo.compiled_autograd`` traces the autograd graph at each
``backward``/``autograd.grad`` into an FX graph and hands it to a compiler:
custom Functions' backwards, hooks and saved tensors all go through that
trace. A side (``case.params``):

- ``backend``: what the captured backward graph is handed to: "ca_eager",
  nothing (the FX graph of the capture run as captured: what torch's own
  compiled autograd tests call it; a sixth of a dynamo trace's time), or
  ``torch.compile`` with "eager" (dynamo's trace of the captured graph) or
  "inductor" (code generation);
- ``forward``: "eager", or "aot_eager": the forward compiled by torch.compile,
  whose AOTAutograd backward compiled autograd then traces (the composition
  users get with ``torch._dynamo.config.compiled_autograd``);
- ``order``: 1 (gradients) or 2 (also the derivative of ``<J^T v, u>`` at the
  leaves, through a first backward taken with ``create_graph``; after an
  eager forward only: AOTAutograd refuses a double backward).

Compiled autograd caches its graphs by the autograd graph's structure, not by
the compiler, and across targets: a graph compiled by one backend, or for
another target's graph of the same structure, would be reused (tensorly's
fold passed in a fresh process and failed after other targets). ``enabled``
clears that cache unless it is asked for the same run again: a case's
variant at other values, which a user's second call is (its graphs hold, and
a recompile would cost a dynamo trace, most of the check's time).

``derivatives`` and ``backward_compiler`` are torch-only: the check's scripts
copy them by source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.config import COMPILED_AUTOGRAD_BACKENDS
from fuzzdiff.guards.fx_traceback import fx_traceback_kept
from fuzzdiff.paths.compiled import dynamo_settings, per_location
from fuzzdiff.paths.function import differentiable
from fuzzdiff.paths.reverse import vjp

__all__ = ["BACKENDS", "backward_compiler", "derivatives", "enabled", "forget"]

BACKENDS = COMPILED_AUTOGRAD_BACKENDS
_CACHED: list[object] = [None]  # the run that compiled autograd's cache holds the graphs of


def backward_compiler(backend: str) -> Callable[[torch.fx.GraphModule], Callable]:
    """The compiler compiled autograd hands each captured backward graph to."""

    def compiler(gm):
        # the graph's own forward: a GraphModule's __call__ would drop the
        # traceback that localizes a failure (and print it to stderr)
        return gm.forward if backend == "ca_eager" else torch.compile(gm, backend=backend)

    return compiler


@contextlib.contextmanager
def enabled(backend: str, run: object = None) -> Iterator[None]:
    """Every backward run inside compiled by compiled autograd with ``backend``,
    and nothing outside: the previous compiler (a user's, or none) is restored.
    ``run`` names what is run (hashable: the target, the case's structure,
    the backend, the side's draws): compiled autograd's cache is kept if it
    holds that run's graphs, and cleared otherwise (None: always)."""
    # startup time: torch._dynamo takes seconds to import, and only compiling checks need it
    from torch._dynamo import compiled_autograd

    with dynamo_settings():
        if run is None or _CACHED[0] != run:
            torch._C._dynamo.compiled_autograd.clear_cache()
        _CACHED[0] = run
        with fx_traceback_kept(), compiled_autograd._enable(backward_compiler(backend)):
            yield


def forget() -> None:
    """The next run compiles its graphs afresh, as in a new process."""
    _CACHED[0] = None


def derivatives(
    fn: Callable[..., object],
    leaves: Sequence[torch.Tensor],
    make_args: Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]],
    cotangents: Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]],
    tangents: Sequence[torch.Tensor] = (),
    order: int = 1,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """(floating outputs of ``fn(*make_args(leaves))``, ``J^T v`` at the leaves
    for ``v = cotangents(outputs)``, and at order 2 ``d<J^T v, u>/dx`` at the
    leaves for tangents ``u``), by ``torch.autograd.grad``: under whatever
    backward is enabled around the call. Each derivative is summed over its
    leaf's stride-0 dims (``per_location``): only that sum is determined, and
    a ``dynamic=True`` forward splits it evenly where eager does not."""
    outs = [t for t in tree_leaves(fn(*make_args(leaves))) if differentiable(t)]
    grads = vjp(outs, leaves, cotangents(outs), create_graph=order == 2)
    located = [per_location(g, leaf) for g, leaf in zip(grads, leaves)]
    if order == 1:
        return outs, located, []
    return outs, located, [per_location(s, leaf) for s, leaf in zip(vjp(grads, leaves, tangents), leaves)]
