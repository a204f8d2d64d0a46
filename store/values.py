"""The one ``to_dict``/``from_dict`` of the frozen dataclasses that cross rooms as JSON (records,
search parameters, reports). It imports nothing of schedx, so every room may use it
(``explorer`` too, as it uses :mod:`store.outcome`)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Self


class DictValue:
    """A dataclass as a plain dict (:func:`dataclasses.asdict`: nested dataclasses too) and back;
    ``from_dict`` ignores keys the class does not have, so dicts another version of schedx wrote
    still read."""

    __slots__ = ()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Self:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


__all__ = ["DictValue"]
