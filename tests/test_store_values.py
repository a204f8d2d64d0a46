"""The one ``to_dict``/``from_dict`` of the values that cross rooms (:mod:`store.values`), and the
one loader of a package's names on first use (:mod:`store.lazy`)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from store.values import DictValue


@dataclass(frozen=True)
class _Inner(DictValue):
    x: int = 0


@dataclass(frozen=True)
class _Outer(DictValue):
    name: str
    inner: _Inner = field(default_factory=_Inner)
    tags: tuple = ()


def test_a_value_is_a_plain_dict_and_back_ignoring_keys_it_does_not_know():
    value = _Outer("a", _Inner(3), ("t",))
    assert value.to_dict() == {"name": "a", "inner": {"x": 3}, "tags": ("t",)}
    assert _Inner.from_dict({"x": 3, "written_by_a_newer_schedx": 1}) == _Inner(3)
    assert _Inner.from_dict(None) == _Inner()


def test_packages_load_their_names_on_first_use():
    code = ("import sys, store, export; before = {m for m in sys.modules if m.startswith(('store.', 'export.'))}; "
            "store.StoreError; export.ExportError; "
            "after = {m for m in sys.modules if m.startswith(('store.', 'export.'))}; "
            "print(sorted(before), sorted(after - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    assert out.strip() == "['store.lazy'] ['export.errors', 'store.errors']", out
    import store

    with pytest.raises(AttributeError, match="module 'store' has no attribute 'Nothing'"):
        store.Nothing  # noqa: B018
