"""The one parser of target spellings: every spelling a user types becomes a
:class:`explorer.target.Target` of its kind. The first word of a spelling (or a JSON target's
``kind``) picks the kind in the registry (:mod:`explorer.target.kinds`); the kind parses the rest
(CPUs: :mod:`explorer.target.cpu`, CUDA: :mod:`explorer.target.cuda`).

Spellings (:func:`parse_target`; :func:`explorer.target.spec_help` lists the registered ones):

- ``cpu`` (also ``host``, ``llvm``): this machine's CPU, from its real features (see
  :mod:`explorer.target.host`);
- ``cpu:MCPU``: a CPU LLVM knows (``cpu:znver3``, ``cpu:skylake-avx512``, ``cpu:x86-64-v3``);
- ``cpu:MCPU+feat,-feat``: with features added or removed (``cpu:znver4,-avx512f``;
  ``cpu:-avx512f`` is this machine without AVX-512);
- ``aarch64`` / ``aarch64:MCPU`` (and ``x86_64:MCPU`` on an ARM host): a CPU of another
  architecture (:data:`explorer.target.model.CPU_ARCHES`), cross-compiled (``aarch64:cortex-a76``);
- ``cuda`` / ``cuda:sm_XX`` (``cuda:90`` too): an NVIDIA GPU, with a generic host CPU half;
- a JSON object as TVM takes it (``{"kind": "llvm", "mcpu": "znver3", "num-cores": 4}``).

Unknown CPUs, features, architectures and malformed JSON raise :class:`TargetError` naming what
is valid. TVM's own target object is built only on demand (:meth:`Target.tvm`);
:func:`intrinsics_of` reads the little a worker pool needs without importing TVM at all.
"""

from __future__ import annotations

import functools
import json

from explorer.target.kinds import kind_of_json, kind_of_word, spec_help
from explorer.target.model import Target, TargetError


def _head(text: str) -> tuple[str, str]:
    """``aarch64:cortex-a76`` -> ``("aarch64", "cortex-a76")``."""
    head, _, arg = text.partition(":")
    return head.strip().lower(), arg.strip()


def intrinsics_of(text: str) -> tuple[str, ...]:
    """:attr:`Target.intrinsics` of a target spelling, read without importing TVM (a worker pool
    starts on it before the parent loads TVM): its kind's answer. A spelling :func:`parse_target`
    would refuse gives this machine's CPU's; parsing it later says why."""
    text = (text or "cpu").strip()
    config = None
    if text.startswith("{"):
        try:
            config = json.loads(text)
            kind = kind_of_json(str(config.get("kind", "llvm")))
        except (ValueError, AttributeError):
            config, kind = None, None
        head = ""
    else:
        head, _ = _head(text)
        kind = kind_of_word(head)
    return (kind or kind_of_word("cpu")).intrinsics(head, config)


def record_mismatch(target_text: str, hardware: str) -> str:
    """Why a record's target cannot have run on the machine its fingerprint names ("" when it
    can): AVX-512 code measured on a machine whose fingerprint says avx2, or another
    architecture. RPC devices and malformed fingerprints are not judged."""
    from explorer.target.environment import read_fingerprint

    machine = read_fingerprint(hardware)
    if machine is None:
        return ""
    try:
        target = parse_target(target_text)
    except (TargetError, ValueError):
        return ""
    return target.mismatch(machine.arch, machine.isa)


_JSON_TYPES = {"kind": str, "mcpu": str, "mtriple": str, "arch": str, "num-cores": int, "vector-width": int,
               "mattr": list, "keys": list, "libs": list, "max_num_threads": int, "thread_warp_size": int,
               "host": (dict, str), "tag": str}


@functools.lru_cache(maxsize=4)
def kind_keys(kind: str) -> tuple[str, ...]:
    """The keys TVM's target kind ``kind`` (llvm, cuda) takes in a JSON target."""
    from tvm.target import TargetKind

    return tuple(str(k) for k in TargetKind.options_from_name(kind))


def _check_keys(config: dict, kind: str) -> None:
    """Refuse a key TVM's ``kind`` does not take, naming the valid ones (TVM's own error, from deep
    inside the first build, read as a bug in schedx)."""
    import difflib

    known = kind_keys(kind)
    unknown = [k for k in config if k not in known and not str(k).startswith("feature.")]  # (TVM takes feature.*)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        named = (f"key {unknown[0]!r} is" if len(unknown) == 1 else
                 f"keys {', '.join(map(repr, unknown))} are")
        raise TargetError(f"target {named} unknown to TVM's {kind} kind; {hint}its keys are {', '.join(known)}")


def _json_target(text: str, cores: int | None) -> Target:
    try:
        config = json.loads(text)
    except ValueError as err:
        raise TargetError(f"the target is not valid JSON ({err.msg} at character {err.pos}); e.g. "
                          '\'{"kind": "llvm", "mcpu": "znver3", "num-cores": 4}\'') from None
    if not isinstance(config, dict):
        raise TargetError("a JSON target must be an object such as {\"kind\": \"llvm\", \"mcpu\": \"znver3\"}")
    for key, value in config.items():
        want = _JSON_TYPES.get(key)
        if want is not None and (not isinstance(value, want) or isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
            raise TargetError(f"target key {key!r} must be a {names}, got {value!r}")
        if key in ("num-cores", "vector-width") and value <= 0:
            raise TargetError(f"target key {key!r} must be positive, got {value}")
    kind = config.get("kind")
    found = kind_of_json(kind) if isinstance(kind, str) else None
    if found is None:
        raise TargetError(f"unknown target kind {kind!r}: schedx builds for "
                          f"{', '.join(k for k in _json_kinds())}")
    if kind in ("cuda", "llvm"):  # (keys TVM knows; another kind checks its own)
        _check_keys(config, kind)
    return found.parse_json(text, config, cores=cores)


def _json_kinds() -> list[str]:
    from explorer.target.kinds import target_kinds

    return [j for k in target_kinds() for j in k.json_kinds]


def parse_target(spec: str | Target | None, *, cores: int | None = None) -> Target:
    """Parse a target spelling (see the module docstring); raise :class:`TargetError` naming what
    is wrong. ``cores`` sets ``num-cores`` of CPU targets (default: this machine's usable cores)."""
    if isinstance(spec, Target):
        return spec
    text = "cpu" if spec is None else str(spec).strip()
    if not text:  # `--target ''`: a slip, not a choice of this machine
        raise TargetError(f"an empty target: use {spec_help()}")
    if text.startswith("{"):
        return _json_target(text, cores)
    head, arg = _head(text)
    kind = kind_of_word(head)
    if kind is None:
        raise TargetError(f"unknown target {spec!r}: use {spec_help()}")
    return kind.parse(text, head, arg, cores=cores)


__all__ = ["intrinsics_of", "kind_keys", "parse_target", "record_mismatch"]
