"""Known PyTorch discrepancies of OpInfo targets: (target, check, reason, evidence).

An entry keeps CI green where torch itself is wrong: the fuzz test of that
(target, check) becomes an xfail when, and only when, it fails. Every entry
was verified by hand to be torch's discrepancy, not the adapter's, and its
evidence is a standalone torch snippet or the exact error.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

__all__ = ["Known", "KNOWN", "known_for"]


@dataclass(frozen=True)
class Known:
    target: str     # glob over target refs, e.g. "opinfo/nn.functional.conv2d@*"
    check: str
    reason: str
    evidence: str

    def __post_init__(self):
        if not (self.reason.strip() and self.evidence.strip()):
            raise ValueError(f"known entry {self.target} x {self.check} needs a reason and evidence")


_CHANNELS_LAST = (
    "vmap of a memory_format=torch.channels_last conversion of a rank-4 per-example tensor "
    "raises: the batched tensor is rank 5 (torch 2.13.0 CPU)",
    "torch.func.vmap(lambda x: x.to(memory_format=torch.channels_last))(torch.randn(2, 5, 5, 5, 5)) "
    "-> RuntimeError: required rank 4 tensor to use channels_last format; the loop "
    "[x.to(memory_format=torch.channels_last) for x in xs] works. The same for "
    "x.double(memory_format=...), .float, .half, .bfloat16, .cfloat, .cdouble, .chalf")

KNOWN: tuple[Known, ...] = (
    Known("opinfo/roll@*", "vmap",
          "vmap of the vjp of torch.roll on a 0-dim per-example input rolls the batch: each "
          "example gets another example's gradient (torch 2.13.0 CPU)",
          "from torch.func import vmap, vjp; xs, vs = torch.randn(3), torch.randn(3); "
          "per = lambda x, v: vjp(lambda t: torch.roll(t, 1), x)[1](v)[0]; "
          "vmap(per)(xs, vs) == vs.roll(-1), not vs (the loop [per(x, v) for x, v in zip(xs, vs)] "
          "gives vs; torch.roll of a 0-dim tensor is the identity)"),
    Known("opinfo/select_scatter@*", "vmap",
          "vjp of vmap(torch.select_scatter) with a 0-dim per-example src sums the whole "
          "cotangent row into src's gradient instead of the selected element (torch 2.13.0 CPU)",
          "from torch.func import vmap, vjp; f = lambda x, s: torch.select_scatter(x, s, 0, 2); "
          "x, s, ct = torch.randn(1, 5), torch.randn(1), torch.randn(1, 5); "
          "vjp(vmap(f), x, s)[1](ct)[1] == ct.sum(1), expected ct[:, 2] "
          "(vjp(f, x[0], s[0])[1](ct[0])[1] == ct[0, 2])"),
    Known("opinfo/view_copy@*", "forward",
          "forward-mode AD of torch.view_copy raises for an input whose layout a view cannot "
          "reshape, where the primal (a copy) and reverse mode work (torch 2.13.0 CPU)",
          "import torch.autograd.forward_ad as fwAD; x = torch.randn(5, 5, 5, dtype=torch.float64)"
          ".permute(0, 2, 1); torch.view_copy(x, (25, 5)) works; with fwAD.dual_level(): "
          "torch.view_copy(fwAD.make_dual(x, torch.randn_like(x)), (25, 5)) -> RuntimeError: view "
          "size is not compatible with input tensor's size and stride (at least one dimension "
          "spans across two contiguous subspaces). Use .reshape(...) instead."),
    Known("opinfo/logcumsumexp@*", "forward",
          "forward-mode AD of torch.logcumsumexp drops the tangents of the elements before a "
          "large one (1e4, in OpInfo's own sample): the JVP is wrong, reverse mode and finite "
          "differences agree (torch 2.13.0 CPU)",
          "from torch.func import jvp; x = torch.randn(5, dtype=torch.float64); x[2] = 1e4; "
          "u = torch.randn(5, dtype=torch.float64); jvp(lambda t: torch.logcumsumexp(t, 0), (x,), "
          "(u,))[1] -> tensor([0., 0., u2, u2, u2]); the first entry must be u[0] "
          "(logcumsumexp(x)[0] == x[0])"),
    Known("opinfo/nn.functional.mse_loss@*", "vmap",
          "nested vmap of F.mse_loss with the target unbatched at the inner level raises a size "
          "mismatch; the loop over both batches works (torch 2.13.0 CPU)",
          "F = torch.nn.functional; a, b = torch.randn(1, 2, 5, 5, 5), torch.randn(1, 5, 5, 5); "
          "torch.func.vmap(torch.func.vmap(F.mse_loss, in_dims=(0, None)))(a, b) -> RuntimeError: "
          "The size of tensor a (250) must match the size of tensor b (125) at non-singleton "
          "dimension 1"),
    *(Known("opinfo/kron@*", check, "torch.kron raises when exactly one of two 2-d operands is "
            "transposed (torch 2.13.0 CPU), in the forward itself",
            "torch.kron(torch.randn(2, 2), torch.randn(2, 2).t()) -> RuntimeError: view size is not "
            "compatible with input tensor's size and stride (at least one dimension spans across "
            "two contiguous subspaces). Use .reshape(...) instead.; with .contiguous() it works")
      for check in ("grad", "forward", "layout", "alias", "vmap", "compile")),
    *(Known(f"opinfo/{name}@*", "vmap",
            "vmap of torch.grid_sampler_2d (F.grid_sample) with the batch at dim 0 of the input "
            "and dim 1 of the grid puts the output's batch dim in the wrong place (torch 2.13.0 CPU)",
            "from torch.func import vmap; f = lambda a, g: torch.grid_sampler_2d(a, g, 0, 0, False); "
            "vmap(f, in_dims=(0, 1))(torch.randn(1, 2, 3, 5, 5), torch.rand(2, 1, 13, 10, 2) * 2 - 1)"
            ".shape == [2, 1, 3, 13, 10]; the loop over the batch gives [1, 2, 3, 13, 10]")
      for name in ("grid_sampler_2d", "nn.functional.grid_sample")),
    *(Known("opinfo/nn.functional.max_pool3d@*", check,
            "F.max_pool3d raises for an unbatched (C, D, H, W) input in a permuted layout that is "
            "neither contiguous nor channels_last, in the forward itself (torch 2.13.0 CPU)",
            "F.max_pool3d(torch.empty_strided((2, 6, 6, 5), (180, 1, 30, 6), dtype=torch.float64)"
            ".normal_(), 2, 1, 1) -> RuntimeError: Unsupported memory format. Supports only "
            "ChannelsLast3d, Contiguous; with .contiguous() it works")
      for check in ("grad", "forward", "layout", "alias", "vmap", "compile")),
    Known("opinfo/triangular_solve@*", "vmap",
          "forward-mode AD of vmap(torch.triangular_solve) with an unbatched empty (0 x 0) matrix "
          "raises, where the loop works (torch 2.13.0 CPU)",
          "from torch.func import vmap, jvp; f = lambda b, A: torch.triangular_solve(b, A).solution; "
          "b, A = torch.randn(1, 2, 2, 0, 0, dtype=torch.float64), torch.randn(2, 2, 0, 0, "
          "dtype=torch.float64); jvp(vmap(f, in_dims=(0, None)), (b, A), (torch.randn_like(b), "
          "torch.randn_like(A))) -> RuntimeError: Trying to set a forward gradient that has a "
          "different size than that of the original Tensor, this is not supported. Tensor is of "
          "size [1, 2, 2, 0, 0] while the given forward gradient is of size [2, 2, 0, 0]."),
    *(Known(f"opinfo/{name}@*", "vmap", *_CHANNELS_LAST)
      for name in ("to", "double", "float", "half", "bfloat16", "cfloat", "cdouble", "chalf")),
)


def known_for(ref: str) -> dict[str, str]:
    """Check name -> "reason. Evidence: ..." for the target ``ref``."""
    return {k.check: f"{k.reason}. Evidence: {k.evidence}" for k in KNOWN
            if fnmatch.fnmatchcase(ref, k.target)}
