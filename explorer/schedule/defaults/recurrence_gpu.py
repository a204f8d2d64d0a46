"""A recurrence kernel for a GPU: a thread block per direction and batch row, a thread per gate
column, the state in shared memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.errors import ExplorerError
from explorer.schedule.defaults.recurrence_script import (ScriptLines, StateBuffers, indented, parse_script,
                                                          script_header, state_buffers, write_sequence)
from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec

if TYPE_CHECKING:  # TVM is imported where a kernel is parsed
    import tvm

GPU_SHARED_BYTES = 48 * 1024  # what a CUDA thread block may allocate statically


def _gpu_columns(lines: ScriptLines, threads: int, count: int, body) -> None:
    """``body(j)`` for the columns [0, count), spread over the block's threads."""
    lines.add(f"for q in range({-(-count // threads)}):")
    lines.add(f"    if q * {threads} + tx < {count}:")
    lines.depth += 2
    body(f"q * {threads} + tx")
    lines.depth -= 2


def _gemv_gpu(lines: ScriptLines, st: StateBuffers, threads: int, acc: str, vec: str, dst: str, first: int,
              count: int, with_xw: bool) -> None:
    d, N = lines.d, lines.spec.gates * lines.spec.hidden

    def column(j: str) -> None:
        col = f"{first} + {j}"
        lines.add(f"{acc}[0] = {f'xw[{st.tt}, {st.b}, {d * N} + {col}]' if with_xw else 'T.float32(0)'}")
        lines.add(f"for k in range({lines.spec.hidden}):")
        lines.add(f"    {acc}[0] = {acc}[0] + {vec}[k] * rt[{d}, k, {col}]")
        lines.add(f"{dst}[{col}] = {acc}[0]")

    _gpu_columns(lines, threads, count, column)
    lines.add("T.tvm_storage_sync(\"shared\")")


def _gpu_direction(spec: RecurrenceSpec, d: int, threads: int, b: str) -> ScriptLines:
    lines = ScriptLines(spec, d, lanes=1, lane="0", blocks=False)
    st = state_buffers(lines, "shared", b)
    acc = lines.alloc("sum", 1, "local")

    def columns(count: int, body) -> None:
        _gpu_columns(lines, threads, count, body)
        lines.add("T.tvm_storage_sync(\"shared\")")

    gemv = lambda vec, dst, first, count, with_xw: _gemv_gpu(lines, st, threads, acc, vec, dst, first, count, with_xw)  # noqa: E731
    write_sequence(lines, st, gemv, columns)
    return lines


def gpu_recurrence_source(spec: RecurrenceSpec, max_threads: int = 256) -> str:
    """The CUDA kernel as TVMScript: thread block ``bx`` runs direction ``bx // B`` of batch row
    ``bx % B`` through every step; its threads share the state in shared memory and meet at a
    barrier after each phase of a step."""
    B, N = spec.batch, spec.gates * spec.hidden
    threads = min(max_threads, -(-N // 32) * 32)
    directions = [_gpu_direction(spec, d, threads, f"(bx - {d * B})" if d else "bx") for d in range(spec.num_dir)]
    shared = [a for a in directions[0].allocs if "scope=\"shared\"" in a]
    need = sum(int(a.split("((")[1].split(",")[0]) for a in shared) * 4
    if need > GPU_SHARED_BYTES:
        raise ExplorerError(f"{spec.op} of width {spec.hidden}: its CUDA kernel keeps the state in "
                            f"{need // 1024} KB of shared memory per thread block, more than the "
                            f"{GPU_SHARED_BYTES // 1024} KB a block has")
    out = script_header(spec, False)
    out.append(f"    bx = T.launch_thread(\"blockIdx.x\", {spec.num_dir * B})")
    out.append(f"    tx = T.launch_thread(\"threadIdx.x\", {threads})")
    out += indented(shared, 1)
    for d, lines in enumerate(directions):
        own = [a for a in lines.allocs if a not in shared]
        if spec.num_dir == 1:
            out += indented(own + lines.lines, 1)
            break
        out.append(f"    if bx < {B}:" if d == 0 else "    else:")
        out += indented(own + lines.lines, 2)
    return "\n".join(out) + "\n"


def gpu_recurrence(spec: RecurrenceSpec, max_threads: int = 256) -> tvm.tirx.PrimFunc:
    """The kernel for a GPU: a block per direction and batch row, at most ``max_threads`` threads."""
    return parse_script(gpu_recurrence_source(spec, max_threads))


__all__ = ["GPU_SHARED_BYTES", "gpu_recurrence", "gpu_recurrence_source"]
