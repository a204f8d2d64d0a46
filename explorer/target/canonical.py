"""The canonical text of a target: what records carry, equal for equal targets however they were
written (a :class:`explorer.target.Target`, TVM's object, a dict or JSON text)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

_ALWAYS_KEPT = ("kind", "mcpu", "arch")  # identify the hardware even when equal to a default


@functools.lru_cache(maxsize=64)
def _kind_defaults(kind: str) -> dict:
    import tvm

    from explorer.ir.plain import to_plain

    return to_plain(tvm.target.Target({"kind": kind}).export())


def _strip_defaults(config: dict) -> dict:
    base = _kind_defaults(config["kind"])
    out = {}
    for key, value in config.items():
        if key == "host" and isinstance(value, dict):
            out[key] = _strip_defaults(value)
        elif key in _ALWAYS_KEPT or key not in base or base[key] != value:
            if not (key == "tag" and value == ""):
                out[key] = value
    return out


@functools.lru_cache(maxsize=256)
def _canonical_text(config_text: str) -> str:
    import tvm

    from explorer.ir.plain import to_plain

    config = to_plain(tvm.target.Target(json.loads(config_text)).export())
    return json.dumps(_strip_defaults(config), sort_keys=True)


def canonical_target(target: object) -> str:
    """The text records carry for a target: its config as sorted JSON, without the values every
    target of its kind has (``tag``, default ``keys``, the default triple):
    ``{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}``. Equal targets give equal text, however
    they were written (a :class:`explorer.target.Target`, TVM's object, a dict or JSON text)."""
    from explorer.ir.plain import to_plain

    if isinstance(target, Mapping):
        config = to_plain(target)
    elif isinstance(target, str):
        config = json.loads(target) if target.lstrip().startswith("{") else {"kind": target}
    elif hasattr(target, "export"):  # tvm.target.Target
        config = to_plain(target.export())
    else:  # an explorer.target.Target
        config = target.config
    return _canonical_text(json.dumps(config, sort_keys=True))


__all__ = ["canonical_target"]
