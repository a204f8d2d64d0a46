"""The CPU kernels whose default schedule is not the one meant for them, one warning line each.

Two cases, told apart by a kernel's :class:`~.apply.DefaultChoice`:

- **fell back**: ``fallback_reason`` is set only where a row of :data:`~.apply.RULES` was tried and
  failed (TVM refused a step, or :mod:`explorer.schedule.lint` found the schedule wrong) and a
  later, simpler row scheduled the kernel (inception_v3's bf16 1xN convolutions once fell so from
  their AMX tiles to the plain rule, at 2 GFLOPS, and nothing said so);
- **no dot product**: a bf16 or int8 product whose dot-product tile declined it (the tile raised
  :class:`~.analysis.NotApplicable`: the CPU lacks the instruction, or the shape does not fit the
  tile) ran on the fp32-style register tile; its steps say so (:mod:`.declined_dot`). Where the CPU
  lacks the instructions the line says to build in fp32 or for a CPU that has them, not to search.

Any other specialised rule that does not claim a kernel (a register tile that does not fit) is no
failure: the general rule is that kernel's rule, and nothing is said.

Each line names the task as a build's coverage warning does (``model/fused_...``: the build gives
``task_names``), keeps TVM's reason (cut) for a bug report, and ends with what to do: the
``schedx tune`` command that searches that task as it was built (the build writes it:
:func:`export.tune_command.tune_command`, given as ``tune_commands``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from explorer.schedule.defaults.declined_dot import declined_dot

if TYPE_CHECKING:
    from explorer.schedule.defaults.apply import DefaultChoice

TILED = "its tiled schedule (register tiles around the main reduction, the other blocks parallel and vectorized)"
# what each rule a kernel can fall to means for it (the rule names of explorer.schedule.defaults.apply.RULES)
INSTEAD = {
    "full": "a simpler tiling took it instead (the rows not fused, or no tail tile)",
    "safe": "the plain schedule took it instead (nothing tiled: each block's outer loop parallel, its inner loop "
            "vectorized; often many times slower)",
    "none": "no schedule applied: it runs as a naive loop nest (many times slower)",
}
REASON_CHARS = 240  # a warning line stays readable; the whole reason is in the choice


def _cut(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


def _why(reason: str) -> str:
    """The rules' reasons (``rule: why; rule: why``) without the rule names, each distinct one once."""
    named = tuple(f"{rule}: " for rule in INSTEAD)
    parts = (next((part.removeprefix(n) for n in named if part.startswith(n)), part).strip()
             for part in reason.split("; "))
    return _cut("; ".join(dict.fromkeys(part for part in parts if part)))


def _action(command: str) -> str:
    search = f"search it (`{command}`)" if command else "search its task (`schedx tune`)"
    return f"{search}, or report it with the reason in brackets"


def fallback_note(task: str, choice: DefaultChoice, command: str = "") -> str:
    """One line: the task, why the tiled rule failed (TVM's words, cut), the rule it fell to, and what
    to do (``command``: the ``schedx tune`` command that searches the task)."""
    return (f"kernel {task}: {TILED} failed on it ({_why(choice.fallback_reason)}); "
            f"{INSTEAD.get(choice.rule, choice.rule)}; {_action(command)}")


def no_dot_note(task: str, choice: DefaultChoice, command: str = "") -> str | None:
    """One softer line where a bf16 or int8 product's dot-product tile declined it, else None."""
    declined = declined_dot(choice.steps)
    if declined is None:
        return None
    kind = declined.kind
    action = (f"build it in fp32, or for a CPU with {kind} dot-product instructions" if declined.cpu_lacks
              else _action(command))  # a search cannot give a CPU instructions it lacks
    return (f"kernel {task}: its {kind} product ran on the fp32-style register tile, not on {kind} dot-product "
            f"instructions ({_cut(declined.why)}); {action}")


def fallback_notes(choices: Mapping[str, DefaultChoice], skip: frozenset[str] = frozenset(), *,
                   task_names: Mapping[str, str] = {}, tune_commands: Mapping[str, str] = {}) -> list[str]:
    """A line per task of ``choices`` (by function name) whose kernel fell back or ran without its
    dot-product tile, in their order; the kernels in ``skip`` are left out (a build that rebuilt them
    with the last rule says so itself). ``task_names``: function name -> the task it stands for
    (:attr:`explorer.workload.Task.funcs`; a function not named is its own task); ``tune_commands``:
    task name -> the ``schedx tune`` command that searches it."""
    lines = []
    for name, choice in choices.items():
        if name in skip:
            continue
        task = task_names.get(name, name)
        command = tune_commands.get(task, "")
        line = fallback_note(task, choice, command) if choice.fallback_reason else no_dot_note(task, choice, command)
        if line is not None:
            lines.append(line)
    return list(dict.fromkeys(lines))  # the functions of one task: one line


def untiled_kernels(choices: Mapping[str, DefaultChoice], skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """The functions of ``choices`` (but those in ``skip``) that did not get the first rule's tile,
    each with why (cut): their rule fell back to a simpler one, or their dot-product tile declined
    their product."""
    untiled = {}
    for name, c in choices.items():
        declined = declined_dot(c.steps)
        if name not in skip and (c.rule != "full" or declined is not None):
            untiled[name] = _cut(declined.why) if declined is not None else _why(c.fallback_reason)
    return untiled


__all__ = ["INSTEAD", "TILED", "fallback_note", "fallback_notes", "no_dot_note", "untiled_kernels"]
