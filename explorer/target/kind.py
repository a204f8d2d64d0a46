"""What a kind of target is to the parser and the listings (:class:`TargetKind`); the registry
of kinds is :mod:`explorer.target.kinds`."""

from __future__ import annotations

from explorer.target.model import Target, TargetError


class TargetKind:
    """One kind of target. Subclasses set the class attributes and :meth:`parse`.

    ``name``: what records say (``cpu``, ``cuda``); ``target_class``: its targets' class (what
    they can do: ``searchable``...); ``words``: first words of its spellings (``cuda`` in
    ``cuda:sm_80``); ``json_kinds``: TVM's kinds in a JSON target; ``help``: its spellings for
    ``--target`` help, ``help_here``: those whose code this machine may run ("": none);
    ``choices``: spellings a picker offers; ``title``: its heading in ``schedx targets``;
    ``intrinsic_modules``: the ``tvm.s_tir.tensor_intrin`` submodules its code may use;
    ``tvm_keys``: the keys TVM gives its targets (what MetaSchedule looks custom rules up by)."""

    name: str = ""
    target_class: type[Target] = Target
    words: tuple[str, ...] = ()
    json_kinds: tuple[str, ...] = ()
    help: str = ""
    help_here: str = ""
    choices: tuple[str, ...] = ()
    title: str = ""
    intrinsic_modules: tuple[str, ...] = ()
    tvm_keys: tuple[str, ...] = ()

    def parse(self, text: str, head: str, arg: str, *, cores: int | None) -> Target:
        """The target ``text`` names (``head:arg``); raise :class:`TargetError` naming what is wrong."""
        raise NotImplementedError

    def parse_json(self, text: str, config: dict, *, cores: int | None) -> Target:
        """The target a JSON object (``config``, its keys' types already checked) names."""
        raise TargetError(f"schedx takes no JSON target of kind {config.get('kind')!r}; use {self.help}")

    def intrinsics(self, head: str, config: dict | None) -> tuple[str, ...]:
        """:attr:`Target.intrinsics` of a spelling (its first word, or its JSON), without TVM."""
        return self.intrinsic_modules

    def listing(self) -> list[dict]:
        """Its rows in ``schedx targets``: ``spec``, ``runs_here``, ``why_not_here``."""
        return []


__all__ = ["TargetKind"]
