"""A recurrence kernel for a CPU: a thread per direction, the matrix-vector product of each step
in register tiles of whole vectors along the gate columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.schedule.defaults.recurrence_script import (ScriptLines, StateBuffers, indented, parse_script,
                                                          script_header, state_buffers, write_sequence)
from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec

if TYPE_CHECKING:  # TVM is imported where a kernel is parsed
    import tvm


def _vector_loops(lines: ScriptLines, count: int, body) -> None:
    """``body(j)`` for j in [0, count), as loops of whole vectors then one short vector."""
    lanes = lines.lanes
    whole, rest = divmod(count, lanes)
    if whole:
        lines.add(f"for jo in range({whole}):")
        lines.add(f"    for ji in T.vectorized({lanes}):")
        lines.depth += 2
        lines.block()
        body(f"jo * {lanes} + ji")
        lines.depth -= 3
    if rest:
        lines.add(f"for ji in T.vectorized({rest}):")
        lines.depth += 1
        lines.block()
        body(f"{whole * lanes} + ji")
        lines.depth -= 2


def _tiles(count: int, lanes: int, rows: int) -> list[tuple[int, int, int]]:
    """Cover ``count`` columns by register tiles: (first column, vectors, lanes) runs, the whole
    tiles of ``rows`` vectors first (one entry per repeat), then fewer vectors, then a short one."""
    tiles, at = [], 0
    while count - at >= rows * lanes:
        tiles.append((at, rows, lanes))
        at += rows * lanes
    if (count - at) // lanes:
        n = (count - at) // lanes
        tiles.append((at, n, lanes))
        at += n * lanes
    if count - at:
        tiles.append((at, 1, count - at))
    return tiles


def _tile_loops(lines: ScriptLines, outer: str, nvec: int, width: int, statement: str) -> None:
    """``statement`` over a register tile (``r`` its vectors, ``l`` their lanes), under ``outer``."""
    depth = lines.depth
    if outer:
        lines.add(f"for {outer}:")
        lines.depth += 1
    lines.add(f"for r in T.unroll({nvec}):")
    lines.add(f"    for l in T.vectorized({width}):")
    lines.depth += 2
    lines.block()
    lines.add(statement)
    lines.depth = depth


def _gemv_cpu(lines: ScriptLines, st: StateBuffers, rows: int, vec: str, dst: str, first: int, count: int,
              with_xw: bool) -> None:
    """``dst[j] = (xw[tt, b, d*N + j] if with_xw else 0) + sum_k vec[k] * rt[d, k, j]`` for the
    columns [first, first + count): per tile, ``rows`` accumulators of a vector kept in registers
    over k."""
    spec, d = lines.spec, lines.d
    N = spec.gates * spec.hidden
    for at, nvec, width in _tiles(count, lines.lanes, rows):
        j0 = first + at
        tile = lines.alloc(lines.fresh("tile"), nvec * width, "local")
        at_tile, at_col = f"{tile}[r * {width} + l]", f"{j0} + r * {width} + l"
        init = f"xw[{st.tt}, {st.b}, {d * N} + {at_col}]" if with_xw else "T.float32(0)"
        _tile_loops(lines, "", nvec, width, f"{at_tile} = {init}")
        _tile_loops(lines, f"k in range({spec.hidden})", nvec, width,
                    f"{at_tile} = {at_tile} + {vec}[k] * rt[{d}, k, {at_col}]")
        _tile_loops(lines, "", nvec, width, f"{dst}[{at_col}] = {at_tile}")


def _cpu_direction(spec: RecurrenceSpec, d: int, lanes: int, rows: int) -> ScriptLines:
    lines = ScriptLines(spec, d, lanes=lanes, lane="ji", blocks=True)
    st = state_buffers(lines, "local", "b")
    columns = lambda count, body: _vector_loops(lines, count, body)  # noqa: E731
    gemv = lambda vec, dst, first, count, with_xw: _gemv_cpu(lines, st, rows, vec, dst, first, count, with_xw)  # noqa: E731
    lines.add(f"for b in range({spec.batch}):")
    lines.depth += 1
    write_sequence(lines, st, gemv, columns)
    return lines


def cpu_recurrence_source(spec: RecurrenceSpec, lanes: int, rows: int = 8) -> str:
    """The CPU kernel as TVMScript: ``lanes`` floats a vector, tiles of ``rows`` vectors; each
    direction in a block of its own (its buffers allocated there, so that they live in the
    parallel loop's body and LLVM keeps the tiles in registers), the directions in parallel."""
    out = script_header(spec, True) + ["    with T.sblock(\"root\"):"]
    depth = 2
    if spec.num_dir > 1:
        out.append(f"        for d in T.parallel({spec.num_dir}):")
        depth = 3
    for d, direction in enumerate(spec.directions):
        lines = _cpu_direction(spec, d, lanes, rows)
        inner = depth
        if spec.num_dir > 1:
            out.append("    " * depth + (f"if d == {d}:" if d < spec.num_dir - 1 else "else:"))
            inner += 1
        out.append("    " * inner + f"with T.sblock(\"{direction}\"):")
        whole = lambda names, shapes: ", ".join(  # noqa: E731 - every element of each buffer
            f"{n}[{', '.join(f'0:{e}' for e in shape)}]" for n, shape in zip(names, shapes))
        access = [f"T.reads({whole(spec.input_names(), spec.input_shapes())})",
                  f"T.writes({whole(spec.output_names(), spec.output_shapes())})"]
        out += indented(access + lines.allocs + lines.lines, inner + 1)
    return "\n".join(out) + "\n"


def cpu_recurrence(spec: RecurrenceSpec, lanes: int = 8) -> tvm.tirx.PrimFunc:
    """The kernel for a CPU whose float vectors hold ``lanes`` (8 for AVX2, 16 for AVX-512, 4 for
    NEON); on any CPU it computes the same, only the register tiles differ."""
    return parse_script(cpu_recurrence_source(spec, lanes))


__all__ = ["cpu_recurrence", "cpu_recurrence_source"]
