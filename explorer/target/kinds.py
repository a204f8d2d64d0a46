"""The registry of target kinds: what the one parser (:func:`explorer.target.parse_target`)
dispatches on, and where help texts, pickers and ``schedx targets`` read what exists.

A :class:`TargetKind` is one kind of target (CPUs, CUDA GPUs, ...): the words that start its
spellings, the TVM kinds a JSON target names it by, how it parses them, its spellings in a line
of help, the spellings a picker offers, the tensor intrinsics a worker registers for it (read
without TVM) and its rows in ``schedx targets``. A new device kind is one module with its
:class:`explorer.target.Target` subclass and its kind, registered here (a test registers a toy
one with :func:`kind_registered` and takes it away again). CPU architectures are one registry
further down: :func:`explorer.target.arches.register_arch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from explorer.target.cpu import CPU
from explorer.target.cuda import CUDA
from explorer.target.kind import TargetKind


_KINDS: dict[str, TargetKind] = {k.name: k for k in (CPU, CUDA)}  # the kinds schedx ships, CPUs first


def register_kind(kind: TargetKind) -> None:
    """Make ``kind`` parsed, listed and offered; its words and JSON kinds must be new."""
    taken = {w for k in _KINDS.values() for w in (*k.words, *k.json_kinds)}
    clash = sorted(taken & {*kind.words, *kind.json_kinds})
    if kind.name in _KINDS or clash:
        raise ValueError(f"target kind {kind.name!r} clashes with a registered one ({', '.join(clash) or kind.name})")
    _KINDS[kind.name] = kind


def unregister_kind(name: str) -> None:
    _KINDS.pop(name, None)


@contextmanager
def kind_registered(kind: TargetKind) -> Iterator[TargetKind]:
    """``kind`` registered inside the ``with`` block only."""
    register_kind(kind)
    try:
        yield kind
    finally:
        unregister_kind(kind.name)


def target_kinds() -> tuple[TargetKind, ...]:
    """Every registered kind, CPUs first."""
    return tuple(_KINDS.values())


def kind_named(name: str) -> TargetKind | None:
    return next((k for k in target_kinds() if k.name == name), None)


def kind_of_word(word: str) -> TargetKind | None:
    """The kind whose spellings start with ``word`` (``cuda``, ``aarch64``, ``cpu``)."""
    return next((k for k in target_kinds() if word in k.words), None)


def kind_of_json(kind: str) -> TargetKind | None:
    """The kind a JSON target's ``kind`` (TVM's: ``llvm``, ``cuda``) names."""
    return next((k for k in target_kinds() if kind in k.json_kinds), None)


SCOPES = ("all", "searchable", "cpu", "here")


def spec_help(scope: str = "all") -> str:
    """The spellings ``--target`` takes, in a line: of every kind (``all``), of kinds whose
    targets schedx searches (``searchable``) or sizes CPU rules for (``cpu``), or those whose code
    this machine may run (``here``)."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r}: one of {', '.join(SCOPES)}")
    kinds = [k for k in target_kinds() if scope == "all" or (scope == "searchable" and k.target_class.searchable)
             or (scope == "cpu" and k.target_class.cpu_rules) or (scope == "here" and k.help_here)]
    return ", ".join(k.help_here if scope == "here" else k.help for k in kinds) + ", or a JSON target"


def tvm_target_keys() -> tuple[str, ...]:
    """The keys TVM gives the targets of every registered kind (``cpu``, ``cuda``, ``gpu``), each once."""
    return tuple(dict.fromkeys(key for k in target_kinds() for key in k.tvm_keys))


def target_choices() -> tuple[str, ...]:
    """Spellings a target picker offers besides this machine's CPU."""
    return tuple(c for k in target_kinds() for c in k.choices)


__all__ = ["SCOPES", "TargetKind", "kind_named", "kind_of_json", "kind_of_word", "kind_registered", "register_kind",
           "spec_help", "target_choices", "target_kinds", "tvm_target_keys", "unregister_kind"]
