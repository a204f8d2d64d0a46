"""Packages whose names load on first use (PEP 562 ``__getattr__``): importing the package costs
nothing, and ``package.Name`` imports the module that defines it then. ``store`` and ``export``
use it; it imports nothing of schedx."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, names: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` that loads each of ``names`` (name -> the
    submodule that defines it) the first time it is asked for."""

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


__all__ = ["lazy_names"]
