"""The step a bf16 or int8 product's default schedule records when its dot-product tile declined it
(the tile raised :class:`~.analysis.NotApplicable`) and the product ran on the fp32-style register tile
instead: either the CPU lacks the instructions (``on this CPU``), or the product's shape does not fit
the tile. :func:`~.apply.tiled` writes it; :mod:`.fallbacks` reads it back for a build's warning. The
one place its wording lives."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

NO_DOT = "no dot-product intrinsic"
_STEP = re.compile(rf"^(?P<block>.*?): {NO_DOT}(?P<lacks> on this CPU)? for its (?P<kind>\w+) product "
                   rf"\((?P<why>.*)\)$", re.DOTALL)


@dataclass(frozen=True)
class DeclinedDot:
    """A product whose dot-product tile declined it: its block, its kind (``bf16``, ``int8``), why, and
    whether the CPU lacks that kind's dot-product instructions (else the shape did not fit the tile)."""

    block: str
    kind: str
    why: str
    cpu_lacks: bool = False

    @property
    def step(self) -> str:
        """The step text the schedule's steps hold."""
        where = " on this CPU" if self.cpu_lacks else ""
        return f"{self.block}: {NO_DOT}{where} for its {self.kind} product ({self.why})"


def declined_dot(steps: Iterable[str]) -> DeclinedDot | None:
    """The product among a schedule's ``steps`` whose dot-product tile declined it, if one did."""
    for step in steps:
        found = _STEP.match(step)
        if found:
            return DeclinedDot(found["block"], found["kind"], found["why"], bool(found["lacks"]))
    return None


__all__ = ["NO_DOT", "DeclinedDot", "declined_dot"]
