"""Writing a recurrence kernel as TVMScript, for either target: the statements of one direction,
its state buffers, the cell's gates and activations (TOPI's polynomial ``fast_exp``, so that they
vectorize), the time loop, the function header, and the parse into a PrimFunc."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.schedule.defaults.recurrence_spec import ACTIVATIONS, ATTR, RecurrenceSpec

if TYPE_CHECKING:  # TVM is imported where a kernel is parsed
    import tvm

_EXP_P = ("T.float32(1.9875691500e-4)", "T.float32(1.3981999507e-3)", "T.float32(8.3334519073e-3)",
          "T.float32(4.1665795894e-2)", "T.float32(1.6666665459e-1)", "T.float32(5.0000001201e-1)")


class ScriptLines:
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
class StateBuffers:
    """Names of one direction's working buffers, and how its step and batch row are written."""

    h: str
    acc: str
    c: str | None
    zr: str | None
    rh: str | None
    acc2: str | None
    tt: str  # the step this iteration of t computes
    b: str  # the batch row


def state_buffers(lines: ScriptLines, scope: str, b: str) -> StateBuffers:
    """Allocate one direction's working buffers in ``scope``, for batch row ``b``."""
    spec, H, N = lines.spec, lines.spec.hidden, lines.spec.gates * lines.spec.hidden
    split = spec.op == "GRU" and not spec.linear_before_reset
    reverse = spec.directions[lines.d] == "reverse"
    return StateBuffers(h=lines.alloc("h", H, scope), acc=lines.alloc("acc", N, scope),
                        c=lines.alloc("c", H, scope) if spec.op == "LSTM" else None,
                        zr=lines.alloc("zr", H, scope) if split else None,
                        rh=lines.alloc("rh", H, scope) if split else None,
                        acc2=lines.alloc("acc2", N, scope) if split else None,
                        tt=f"({spec.seq - 1} - t)" if reverse else "t", b=b)


def _cell(lines: ScriptLines, st: StateBuffers, j: str) -> None:
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


def _reset(lines: ScriptLines, st: StateBuffers, j: str) -> None:
    """A GRU without linear_before_reset, between its two products: z, and r * h."""
    spec = lines.spec
    a = spec.acts(lines.d)
    lines.add(f"{st.zr}[{j}] = {lines.act(a[0], f'{st.acc}[{j}]', spec.clip)}")
    r = lines.act(a[0], f"{st.acc}[{spec.hidden} + {j}]", spec.clip)
    lines.add(f"{st.rh}[{j}] = {r} * {st.h}[{j}]")


def _load_state(lines: ScriptLines, st: StateBuffers, j: str) -> None:
    lines.add(f"{st.h}[{j}] = h0[{lines.d}, {st.b}, {j}]")
    if st.c:
        lines.add(f"{st.c}[{j}] = c0[{lines.d}, {st.b}, {j}]")


def _store_state(lines: ScriptLines, st: StateBuffers, j: str) -> None:
    lines.add(f"h_last[{lines.d}, {st.b}, {j}] = {st.h}[{j}]")
    if st.c:
        lines.add(f"c_last[{lines.d}, {st.b}, {j}] = {st.c}[{j}]")


def _step(lines: ScriptLines, st: StateBuffers, gemv, columns) -> None:
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


def write_sequence(lines: ScriptLines, st: StateBuffers, gemv, columns) -> None:
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


def script_header(spec: RecurrenceSpec, s_tir: bool) -> list[str]:
    """The ``@T.prim_func`` line, the signature and the attributes (the spec among them)."""
    attrs = f"{{\"tirx.noalias\": True, \"tirx.is_scheduled\": True, \"{ATTR}\": {spec.to_json()!r}}}"
    return [f"@T.prim_func(s_tir={s_tir})", f"def {spec.op.lower()}_sequence({_params(spec)}):",
            f"    T.func_attr({attrs})"]


def indented(lines: list[str], depth: int) -> list[str]:
    """``lines`` moved ``depth`` levels in."""
    return ["    " * depth + line for line in lines]


def parse_script(source: str) -> tvm.tirx.PrimFunc:
    """The PrimFunc a kernel's TVMScript ``source`` defines."""
    import tvm
    from tvm.script import tirx as T

    return tvm.script.from_source(source, extra_vars={"T": T})


__all__ = ["ScriptLines", "StateBuffers", "indented", "parse_script", "script_header", "state_buffers",
           "write_sequence"]
