"""A recurrent layer's whole sequence as one kernel: the time loop inside, the state in registers.

Unrolled into plain operators (:mod:`explorer.models.recurrent` with ``sequence_kernels=False``),
a layer over T steps is 2T to 3T kernels, each a call of Relax's VM that costs about a
microsecond: a 100-step GRU of width 64 spent 0.16 ms in the VM and 0.05 ms in its kernels, where
ONNX Runtime's GRU takes 0.12 ms. Here one PrimFunc runs every step of every direction of a
layer: per step a matrix-vector product of the state by the recurrence weights (``h @ R^T``, in
register tiles of whole vectors along the gate columns), then the gates, with TOPI's polynomial
``fast_exp`` so that they vectorize, writing ``Y[t]``. The directions of a bidirectional layer run
in parallel, one per thread. The input projection ``X @ W^T + b`` of all steps and directions
stays one matrix product before it.

:class:`RecurrenceSpec` says which cell (LSTM, GRU, RNN and their ONNX options) over which shapes;
it travels as JSON in the PrimFunc's ``schedx.recurrence`` attribute, so that a build swaps in the
variant for its target (:func:`for_target`): :func:`cpu_recurrence` (the CPU's vector width),
:func:`gpu_recurrence` (a thread block per direction and batch row, a thread per gate column,
the state in shared memory). Both are written as TVMScript from the spec, already scheduled
(``tirx.is_scheduled``).

Arguments, in order (N = gates x H, D directions; ONNX's own layouts for layout 0):
``xw [T, B, D*N]`` (the input projection with the biases that belong there), ``rt [D, H, N]``
(``R`` transposed), ``h0 [D, B, H]``, then for an LSTM ``c0 [D, B, H]`` and, with peepholes,
``p [D, 3H]``; for a GRU with ``linear_before_reset`` ``rbh [D, H]``. Outputs ``y [T, D, B, H]``,
``h_last [D, B, H]`` and, for an LSTM, ``c_last [D, B, H]``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from explorer.errors import ExplorerError

if TYPE_CHECKING:  # TVM is imported where a kernel is made: the spec is plain data
    import tvm

ATTR = "schedx.recurrence"
GPU_SHARED_BYTES = 48 * 1024  # what a CUDA thread block may allocate statically
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
ACTIVATIONS = ("Sigmoid", "Tanh", "Relu", "Softsign", "Softplus")


@dataclass(frozen=True)
class RecurrenceSpec:
    """One recurrent layer: ``op`` LSTM/GRU/RNN, its sizes, directions and ONNX options."""

    op: str
    seq: int
    batch: int
    hidden: int
    directions: tuple[str, ...] = ("forward",)  # "forward" / "reverse", per direction
    activations: tuple[tuple[str, ...], ...] = ()  # ONNX's f, g(, h) per direction; empty: defaults
    clip: float | None = None
    linear_before_reset: bool = False  # GRU
    peepholes: bool = False  # LSTM
    dtype: str = "float32"

    @property
    def gates(self) -> int:
        return GATES[self.op]

    @property
    def num_dir(self) -> int:
        return len(self.directions)

    def acts(self, d: int) -> tuple[str, ...]:
        return self.activations[d] if self.activations else DEFAULT_ACTIVATIONS[self.op]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RecurrenceSpec:
        d = json.loads(text)
        d["directions"] = tuple(d.get("directions", ("forward",)))
        d["activations"] = tuple(tuple(a) for a in d.get("activations", ()))
        return cls(**d)

    def input_names(self) -> list[str]:
        names = ["xw", "rt", "h0"]
        if self.op == "LSTM":
            names += ["c0"] + (["p"] if self.peepholes else [])
        if self.op == "GRU" and self.linear_before_reset:
            names.append("rbh")
        return names

    def input_shapes(self) -> list[tuple[int, ...]]:
        T, B, H, D, N = self.seq, self.batch, self.hidden, self.num_dir, self.gates * self.hidden
        shape = {"xw": (T, B, D * N), "rt": (D, H, N), "h0": (D, B, H), "c0": (D, B, H), "p": (D, 3 * H),
                 "rbh": (D, H)}
        return [shape[n] for n in self.input_names()]

    def output_names(self) -> list[str]:
        return ["y", "h_last"] + (["c_last"] if self.op == "LSTM" else [])

    def output_shapes(self) -> list[tuple[int, ...]]:
        T, B, H, D = self.seq, self.batch, self.hidden, self.num_dir
        return [(T, D, B, H), (D, B, H)] + ([(D, B, H)] if self.op == "LSTM" else [])

    def macs(self) -> int:
        """Multiply-adds of the recurrence (the matrix-vector products), all steps and directions."""
        return self.num_dir * self.seq * self.batch * self.hidden * self.gates * self.hidden


def spec_of(func: tvm.tirx.PrimFunc) -> RecurrenceSpec | None:
    """The spec a recurrence kernel carries, else None."""
    attrs = func.attrs
    if attrs is None or ATTR not in attrs:
        return None
    return RecurrenceSpec.from_json(str(attrs[ATTR]))


# -- writing TVMScript ----------------------------------------------------------------------------------

_EXP_P = ("T.float32(1.9875691500e-4)", "T.float32(1.3981999507e-3)", "T.float32(8.3334519073e-3)",
          "T.float32(4.1665795894e-2)", "T.float32(1.6666665459e-1)", "T.float32(5.0000001201e-1)")


class _Lines:
    """The TVMScript of one direction being written: its statements, the buffers it allocates,
    indentation and fresh names.

    A value used more than once is kept in a local buffer of one vector, indexed by the vector's
    lane, rather than in a ``LetStmt``: TVM 0.27's loop vectorizer loses a let-bound value (it
    reads 0), while a buffer of one vector becomes a register after LLVM's SROA. On a CPU every
    statement under a loop sits in an opaque block (TVM's passes over a scheduled module walk
    blocks); ``blocks=False`` writes plain statements (the GPU kernel)."""

    def __init__(self, spec: RecurrenceSpec, d: int, *, lanes: int, lane: str, blocks: bool) -> None:
        self.spec, self.d = spec, d
        self.lines: list[str] = []
        self.allocs: list[str] = []
        self.depth = 0
        self._n = 0
        self.lanes, self.lane, self.blocks = lanes, lane, blocks

    def add(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def alloc(self, name: str, size: int, scope: str) -> str:
        # a GPU block runs one direction: the directions' shared state can be the same memory
        full = name if scope == "shared" else f"{name}_{self.d}"
        self.allocs.append(f"{full} = T.alloc_buffer(({size},), \"{self.spec.dtype}\", scope=\"{scope}\")")
        return full

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}{self._n}_{self.d}"

    def block(self) -> None:
        """Open an opaque block; the caller closes it with ``depth -= 1`` (no-op without blocks)."""
        if self.blocks:
            self.add(f"with T.sblock(\"{self.fresh('s')}\"):")
            self.depth += 1

    def let(self, hint: str, expr: str) -> str:
        name = self.alloc(self.fresh(hint), self.lanes, "local")
        self.add(f"{name}[{self.lane}] = {expr}")
        return f"{name}[{self.lane}]"

    def exp(self, x: str) -> str:
        """TOPI's fast_exp: clamp, split into 2^n and a polynomial of the rest."""
        x = self.let("ex", f"T.max(T.min({x}, T.float32(88.3762626647950)), T.float32(-88.3762626647949))")
        n = self.let("en", f"T.floor({x} * T.float32(1.44269504088896341) + T.float32(0.5))")
        r = self.let("er", f"{x} - {n} * T.float32(0.693147180559945)")
        poly = _EXP_P[0]
        for p in _EXP_P[1:]:
            poly = f"({poly}) * {r} + {p}"
        two_n = f"T.reinterpret(\"float32\", T.shift_left(T.Cast(\"int32\", {n}) + 127, 23))"
        return self.let("e", f"(({poly}) * {r} * {r} + {r} + T.float32(1)) * {two_n}")

    def act(self, name: str, x: str, clip: float | None) -> str:
        x = f"({x})"
        if clip is not None:
            x = self.let("cl", f"T.max(T.min({x}, T.float32({clip!r})), T.float32({-clip!r}))")
        if name == "Sigmoid":
            return self.let("sg", f"T.float32(1) / (T.float32(1) + {self.exp(f'T.float32(0) - {x}')})")
        if name == "Tanh":
            return self.let("th", f"T.float32(1) - T.float32(2) / ({self.exp(f'{x} * T.float32(2)')} + T.float32(1))")
        if name == "Relu":
            return self.let("rl", f"T.max({x}, T.float32(0))")
        if name == "Softsign":
            return self.let("ss", f"{x} / (T.float32(1) + T.fabs({x}))")
        if name == "Softplus":  # max(x, 0) + log(1 + exp(-|x|)): no overflow where exp(x) would
            return self.let("sp", f"T.max({x}, T.float32(0)) + T.log(T.float32(1) + {self.exp(f'T.float32(0) - T.fabs({x})')})")
        raise ValueError(f"activation {name!r} has no recurrence kernel form (supported: {', '.join(ACTIVATIONS)})")


@dataclass(frozen=True)
class _State:
    """Names of one direction's working buffers, and how its step and batch row are written."""

    h: str
    acc: str
    c: str | None
    zr: str | None
    rh: str | None
    acc2: str | None
    tt: str  # the step this iteration of t computes
    b: str  # the batch row


def _state(lines: _Lines, scope: str, b: str) -> _State:
    spec, H, N = lines.spec, lines.spec.hidden, lines.spec.gates * lines.spec.hidden
    split = spec.op == "GRU" and not spec.linear_before_reset
    reverse = spec.directions[lines.d] == "reverse"
    return _State(h=lines.alloc("h", H, scope), acc=lines.alloc("acc", N, scope),
                  c=lines.alloc("c", H, scope) if spec.op == "LSTM" else None,
                  zr=lines.alloc("zr", H, scope) if split else None,
                  rh=lines.alloc("rh", H, scope) if split else None,
                  acc2=lines.alloc("acc2", N, scope) if split else None,
                  tt=f"({spec.seq - 1} - t)" if reverse else "t", b=b)


def _cell(lines: _Lines, st: _State, j: str) -> None:
    """The gates of output ``j`` from the products in ``st.acc`` (absolute gate columns): the new
    state to ``h``/``c`` and ``y``. A GRU without linear_before_reset has z in ``zr`` and the
    candidate's product (computed on r * h) in ``acc2``."""
    spec, d = lines.spec, lines.d
    H, N, clip, a = spec.hidden, spec.gates * spec.hidden, spec.clip, spec.acts(d)
    acc, tt, b = st.acc, st.tt, st.b
    xw = lambda col: f"xw[{tt}, {b}, {d * N} + {col}]"  # noqa: E731 - a short spelling of the projection
    if spec.op == "RNN":
        hn = lines.act(a[0], f"{acc}[{j}]", clip)
    elif spec.op == "LSTM":
        c = lines.let("c", f"{st.c}[{j}]")
        peep = (lambda k, v: f" + p[{d}, {k * H} + {j}] * {v}") if spec.peepholes else (lambda k, v: "")
        i = lines.act(a[0], f"{acc}[{j}]" + peep(0, c), clip)
        f = lines.act(a[0], f"{acc}[{2 * H} + {j}]" + peep(2, c), clip)
        g = lines.act(a[1], f"{acc}[{3 * H} + {j}]", clip)
        cn = lines.let("cn", f"{f} * {c} + {i} * {g}")
        o = lines.act(a[0], f"{acc}[{H} + {j}]" + peep(1, cn), clip)
        hn = lines.let("hn", f"{o} * {lines.act(a[2], cn, None)}")
        lines.add(f"{st.c}[{j}] = {cn}")
    elif spec.linear_before_reset:
        z = lines.act(a[0], f"{xw(j)} + {acc}[{j}]", clip)
        r = lines.act(a[0], f"{xw(f'{H} + {j}')} + {acc}[{H} + {j}]", clip)
        cand = lines.act(a[1], f"{xw(f'{2 * H} + {j}')} + {r} * ({acc}[{2 * H} + {j}] + rbh[{d}, {j}])", clip)
        hn = lines.let("hn", f"{cand} + {z} * ({st.h}[{j}] - {cand})")
    else:
        z = lines.let("z", f"{st.zr}[{j}]")
        cand = lines.act(a[1], f"{st.acc2}[{2 * H} + {j}]", clip)
        hn = lines.let("hn", f"{cand} + {z} * ({st.h}[{j}] - {cand})")
    lines.add(f"{st.h}[{j}] = {hn}")
    lines.add(f"y[{tt}, {d}, {b}, {j}] = {hn}")


def _reset(lines: _Lines, st: _State, j: str) -> None:
    """A GRU without linear_before_reset, between its two products: z, and r * h."""
    spec = lines.spec
    a = spec.acts(lines.d)
    lines.add(f"{st.zr}[{j}] = {lines.act(a[0], f'{st.acc}[{j}]', spec.clip)}")
    r = lines.act(a[0], f"{st.acc}[{spec.hidden} + {j}]", spec.clip)
    lines.add(f"{st.rh}[{j}] = {r} * {st.h}[{j}]")


def _load_state(lines: _Lines, st: _State, j: str) -> None:
    lines.add(f"{st.h}[{j}] = h0[{lines.d}, {st.b}, {j}]")
    if st.c:
        lines.add(f"{st.c}[{j}] = c0[{lines.d}, {st.b}, {j}]")


def _store_state(lines: _Lines, st: _State, j: str) -> None:
    lines.add(f"h_last[{lines.d}, {st.b}, {j}] = {st.h}[{j}]")
    if st.c:
        lines.add(f"c_last[{lines.d}, {st.b}, {j}] = {st.c}[{j}]")


def _step(lines: _Lines, st: _State, gemv, columns) -> None:
    """One step: the product(s) and the gates. ``gemv(vec, dst, first, count, with_xw)`` writes a
    matrix-vector product; ``columns(count, body)`` runs ``body(j)`` over the state's columns."""
    spec, H, N = lines.spec, lines.spec.hidden, lines.spec.gates * lines.spec.hidden
    if spec.op == "GRU" and not spec.linear_before_reset:
        gemv(st.h, st.acc, 0, 2 * H, True)
        columns(H, lambda j: _reset(lines, st, j))
        gemv(st.rh, st.acc2, 2 * H, H, True)
    else:
        gemv(st.h, st.acc, 0, N, not spec.linear_before_reset)
    columns(H, lambda j: _cell(lines, st, j))


def _sequence(lines: _Lines, st: _State, gemv, columns) -> None:
    """The state loaded, every step, the last state stored."""
    columns(lines.spec.hidden, lambda j: _load_state(lines, st, j))
    lines.add(f"for t in range({lines.spec.seq}):")
    lines.depth += 1
    _step(lines, st, gemv, columns)
    lines.depth -= 1
    columns(lines.spec.hidden, lambda j: _store_state(lines, st, j))


def _params(spec: RecurrenceSpec) -> str:
    names = spec.input_names() + spec.output_names()
    shapes = spec.input_shapes() + spec.output_shapes()
    return ", ".join(f"{n}: T.Buffer({tuple(s)!r}, \"{spec.dtype}\")" for n, s in zip(names, shapes))


def _header(spec: RecurrenceSpec, s_tir: bool) -> list[str]:
    attrs = f"{{\"tirx.noalias\": True, \"tirx.is_scheduled\": True, \"{ATTR}\": {spec.to_json()!r}}}"
    return [f"@T.prim_func(s_tir={s_tir})", f"def {spec.op.lower()}_sequence({_params(spec)}):",
            f"    T.func_attr({attrs})"]


def _indent(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + line for line in lines]


# -- CPU: a thread per direction, whole-vector register tiles --------------------------------------------

def _vector_loops(lines: _Lines, count: int, body) -> None:
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


def _tile_loops(lines: _Lines, outer: str, nvec: int, width: int, statement: str) -> None:
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


def _gemv_cpu(lines: _Lines, st: _State, rows: int, vec: str, dst: str, first: int, count: int,
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


def _cpu_direction(spec: RecurrenceSpec, d: int, lanes: int, rows: int) -> _Lines:
    lines = _Lines(spec, d, lanes=lanes, lane="ji", blocks=True)
    st = _state(lines, "local", "b")
    columns = lambda count, body: _vector_loops(lines, count, body)  # noqa: E731
    gemv = lambda vec, dst, first, count, with_xw: _gemv_cpu(lines, st, rows, vec, dst, first, count, with_xw)  # noqa: E731
    lines.add(f"for b in range({spec.batch}):")
    lines.depth += 1
    _sequence(lines, st, gemv, columns)
    return lines


def cpu_recurrence_source(spec: RecurrenceSpec, lanes: int, rows: int = 8) -> str:
    """The CPU kernel as TVMScript: ``lanes`` floats a vector, tiles of ``rows`` vectors; each
    direction in a block of its own (its buffers allocated there, so that they live in the
    parallel loop's body and LLVM keeps the tiles in registers), the directions in parallel."""
    out = _header(spec, True) + ["    with T.sblock(\"root\"):"]
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
        out += _indent(access + lines.allocs + lines.lines, inner + 1)
    return "\n".join(out) + "\n"


# -- GPU: a thread block per direction and batch row, a thread per gate column ---------------------------------

def _gpu_columns(lines: _Lines, threads: int, count: int, body) -> None:
    """``body(j)`` for the columns [0, count), spread over the block's threads."""
    lines.add(f"for q in range({-(-count // threads)}):")
    lines.add(f"    if q * {threads} + tx < {count}:")
    lines.depth += 2
    body(f"q * {threads} + tx")
    lines.depth -= 2


def _gemv_gpu(lines: _Lines, st: _State, threads: int, acc: str, vec: str, dst: str, first: int,
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


def _gpu_direction(spec: RecurrenceSpec, d: int, threads: int, b: str) -> _Lines:
    lines = _Lines(spec, d, lanes=1, lane="0", blocks=False)
    st = _state(lines, "shared", b)
    acc = lines.alloc("sum", 1, "local")

    def columns(count: int, body) -> None:
        _gpu_columns(lines, threads, count, body)
        lines.add("T.tvm_storage_sync(\"shared\")")

    gemv = lambda vec, dst, first, count, with_xw: _gemv_gpu(lines, st, threads, acc, vec, dst, first, count, with_xw)  # noqa: E731
    _sequence(lines, st, gemv, columns)
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
    out = _header(spec, False)
    out.append(f"    bx = T.launch_thread(\"blockIdx.x\", {spec.num_dir * B})")
    out.append(f"    tx = T.launch_thread(\"threadIdx.x\", {threads})")
    out += _indent(shared, 1)
    for d, lines in enumerate(directions):
        own = [a for a in lines.allocs if a not in shared]
        if spec.num_dir == 1:
            out += _indent(own + lines.lines, 1)
            break
        out.append(f"    if bx < {B}:" if d == 0 else "    else:")
        out += _indent(own + lines.lines, 2)
    return "\n".join(out) + "\n"


def _parse(source: str) -> tvm.tirx.PrimFunc:
    import tvm
    from tvm.script import tirx as T

    return tvm.script.from_source(source, extra_vars={"T": T})


def cpu_recurrence(spec: RecurrenceSpec, lanes: int = 8) -> tvm.tirx.PrimFunc:
    """The kernel for a CPU whose float vectors hold ``lanes`` (8 for AVX2, 16 for AVX-512, 4 for
    NEON); on any CPU it computes the same, only the register tiles differ."""
    return _parse(cpu_recurrence_source(spec, lanes))


def gpu_recurrence(spec: RecurrenceSpec, max_threads: int = 256) -> tvm.tirx.PrimFunc:
    """The kernel for a GPU: a block per direction and batch row, at most ``max_threads`` threads."""
    return _parse(gpu_recurrence_source(spec, max_threads))


_OWN_ATTRS = frozenset({"s_tir", "tirx.noalias", "tirx.is_scheduled", ATTR})  # the variant's own


def for_target(func: tvm.tirx.PrimFunc, *, lanes: int | None = None, gpu: bool = False) -> tvm.tirx.PrimFunc | None:
    """A recurrence kernel ``func`` written again for a CPU with ``lanes`` float lanes or for a
    GPU, keeping ``func``'s other attributes (its global symbol); None when ``func`` is none."""
    spec = spec_of(func)
    if spec is None:
        return None
    made = gpu_recurrence(spec) if gpu else cpu_recurrence(spec, lanes or 8)
    for key, value in (func.attrs or {}).items():
        if key not in _OWN_ATTRS:  # the caller's: global symbol, op pattern, weight buffers
            made = made.with_attr(key, value)
    return made


__all__ = ["ACTIVATIONS", "ATTR", "RecurrenceSpec", "cpu_recurrence", "cpu_recurrence_source", "for_target",
           "gpu_recurrence", "gpu_recurrence_source", "spec_of"]
