"""A check's role in torch's OpInfo tests, as the check declares it.

As an OpInfo carries flags (``supports_forward_ad``) and skips of the tests
that consume it (``TestFwdGradients.test_forward_mode_AD``), a check says
which of those stand for it: ``Check.opinfo``. The OpInfo wing reads the role
(``Target.declines``): a check whose flag is False on an op, or whose test the
op skips or expects to fail, does not apply to that op's targets. A check
without a role does not run on OpInfo targets at all. Plain data, so that the
targets never import the checks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpInfoRole"]


@dataclass(frozen=True)
class OpInfoRole:
    """flags:  the OpInfo flags that must all be True on an op for the check to
            apply (a flag that refines another, ``check_batched_forward_grad``
            of ``supports_forward_ad``, counts only where that one is set).
    tests:  ``(test class, test name)`` pairs of torch's OpInfo tests: an op
            that skips one, or expects it to fail, skips the check.
    why:    the reason given when a flag is False; by default the flags,
            ``"OpInfo supports_forward_ad=False"``.
    """

    flags: tuple[str, ...] = ()
    tests: tuple[tuple[str, str], ...] = ()
    why: str = ""

    @property
    def unflagged(self) -> str:
        """Why the check does not apply where one of its flags is False."""
        if self.why:
            return self.why
        if len(self.flags) == 1:
            return f"OpInfo {self.flags[0]}=False"
        return f"OpInfo {' or '.join(self.flags)} is False"
