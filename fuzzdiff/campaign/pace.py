"""Round 1's pace, measured: how many layout classes a first tour can afford.

The plan (fuzzdiff.campaign.plan) sizes round 1 from each check's cost, as
one machine measured it. On a slower machine a tour of every class for every
pair that does not compile runs past its share of the budget, and round 1
ends with pairs never run: the pairs left out are whatever comes last. So the
loop measures what first batches take, and once enough have ended, a pair
whose tour would not fit what is left of the share meets fewer classes (the
pairs taking them in turn, as compiling pairs do: layout_tour.first_tour).
Every pair still gets its batch; fewer of its classes wait for later rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuzzdiff.campaign.plan import SHARE

__all__ = ["MIN_TOUR", "Pace"]

MIN_TOUR = 2  # classes a narrowed tour still meets: contiguous is seldom where a bug hides
SAMPLE = 4  # first batches a slot runs before the pace is trusted
WEIGHT = 0.05  # of the newest batch in the running mean: a narrowed tour's batches are cheaper


@dataclass
class Pace:
    """The first batches of the ``pairs`` that do not compile, on ``slots``
    workers: how many started, how many ended, and the running mean of their
    seconds."""

    pairs: int
    slots: int
    started: int = 0
    ended: int = 0
    mean: float = 0.0

    def ended_batch(self, seconds: float) -> None:
        self.ended += 1
        self.mean = seconds if self.ended == 1 else self.mean + WEIGHT * (seconds - self.mean)

    def cases(self, classes: int, elapsed: float, budget: float | None) -> int | None:
        """The classes the next first tour meets, of ``classes``, ``elapsed``
        seconds into a campaign of ``budget`` (None: all of them)."""
        if budget is None or self.ended < SAMPLE * self.slots:
            return None
        left = SHARE * budget - elapsed
        need = (self.pairs - self.started) * self.mean / self.slots
        if need <= left:
            return None
        return min(classes, max(MIN_TOUR, int(classes * max(left, 0.0) / need)))
