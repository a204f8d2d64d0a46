"""One row of the default CPU rules: the choices the ``full`` rule can take otherwise. The rules'
own fallbacks (:data:`explorer.schedule.defaults.apply.RULES`) and the variants a search
measures (:data:`explorer.schedule.defaults.variants.VARIANTS`) are both written as these rows."""

from __future__ import annotations

from dataclasses import dataclass

from store.values import DictValue


@dataclass(frozen=True)
class DefaultVariant(DictValue):
    """One way the default rules can choose otherwise (all fields at their defaults: the default)."""

    rank: int = 0  # the register tile by choose_tiles' ranking (0: the one its model prefers)
    pixels: bool = True  # two output axes as one axis of rows, where the model gains
    tails: bool = True  # the rows a tile leaves over in a tile of their own (else tiles that divide them)

    @property
    def label(self) -> str:
        parts = ([f"tile ranked {self.rank + 1}"] if self.rank else []) + \
            ([] if self.pixels else ["rows not fused"]) + ([] if self.tails else ["no tail tile"])
        return "default rules, " + ", ".join(parts) if parts else "default rules"


__all__ = ["DefaultVariant"]
