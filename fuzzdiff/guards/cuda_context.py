"""A lost CUDA context, told apart from the case that lost it.

After some kernel faults ("misaligned address", "an illegal memory access")
every later CUDA call in the process raises the same error. The case that
lost the context is the finding: a crash, which this process can neither
replay nor shrink. A later case that only meets the lost context is not a
finding. On an H100, one max_pool2d case failed 1199 later tests of the
same pytest workers this way, without this module.
"""

from __future__ import annotations

import torch

from fuzzdiff.verdict import Verdict

__all__ = ["verdict_after", "usable"]

_lost: str | None = None  # the error that lost the context, once it is lost


def usable() -> bool:
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").add_(1).item() == 2.0
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def verdict_after(error: BaseException) -> Verdict | None:
    """The verdict for a check that raised ``error`` while a GPU is present:
    a crash if the context was usable before and is not now, inconclusive if
    it was lost before this case and ``error`` is that loss, else None (the
    error is the target's own, judged as usual)."""
    global _lost
    if _lost is not None:
        if "CUDA" in str(error):
            return Verdict(
                "inconclusive", f"the process's CUDA context was lost earlier, by {_lost}; every CUDA call fails since"
            )
        return None
    if usable():
        return None
    _lost = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return Verdict(
        "crash",
        f"raised {_lost}; the process's CUDA context is lost (every later "
        "CUDA call in it fails): replay the case in a fresh process",
        {"exception": type(error).__name__},
    )
