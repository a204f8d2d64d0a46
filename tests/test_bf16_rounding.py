"""fp32 -> bf16 rounding (:func:`explorer.schedule.bf16_dot.to_bits`, compiled for this CPU, scalar and
vectorized as the packing blocks run it; :func:`explorer.passes.bf16_dense.bf16_bits` for weights):
nearest even on finite values, infinities kept, and a NaN stays a NaN of its sign (quiet bit set)
whatever its payload."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from explorer.passes.bf16_dense import bf16_bits
from explorer.schedule.bf16_dot import QUIET_NAN_BIT, to_bits
from explorer.target.cpu import host_target

# fp32 bits -> the bf16 bits of nearest even rounding (written by hand, not by the code under test)
EXACT = {
    0x00000000: 0x0000, 0x80000000: 0x8000,  # +-0
    0x3F800000: 0x3F80, 0xBF800000: 0xBF80,  # +-1
    0x3F808000: 0x3F80, 0x3F818000: 0x3F82,  # ties: to the even neighbour
    0x3F808001: 0x3F81, 0x3F807FFF: 0x3F80,  # just above and below a tie
    0x7F7FFFFF: 0x7F80, 0xFF7FFFFF: 0xFF80,  # max finite fp32: rounds up to +-infinity
    0x7F7F7FFF: 0x7F7F,  # bf16's max finite stays
    0x7F800000: 0x7F80, 0xFF800000: 0xFF80,  # +-infinity
    0x00000001: 0x0000, 0x00008000: 0x0000, 0x00018000: 0x0002,  # denormals: tie to even, zero kept
    0x00008001: 0x0001, 0x807FFFFF: 0x8080,  # a denormal rounding up to the smallest normal
}
NANS = (0x7FFFFFFF, 0xFFFFFFFF,  # payload all ones: rounding carried it into the sign (+-0)
        0x7F800001, 0xFF800001, 0x7F80FFFF,  # payload below the top 16 bits only: was infinity
        0x7FC00000, 0xFFC00000, 0x7FA00000, 0x7F818000, 0x7FBFFFFF)  # quiet, signalling, ties


def _to_bits_kernel(vector: bool):
    """``to_bits`` over a 1-d fp32 array of 64, compiled for this CPU (``vector``: 16 lanes)."""
    x = te.placeholder((64,), "float32", name="x")
    y = te.compute((64,), lambda i: to_bits(x[i]), name="y")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
    if vector:
        _, inner = sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, 16])
        sch.vectorize(inner)
    return tvm.compile(sch.mod, target=host_target().tvm())


def _run(kernel, bits: np.ndarray) -> np.ndarray:
    x = np.zeros(64, np.uint32)
    x[:len(bits)] = bits
    y = tvm.runtime.tensor(np.zeros(64, np.uint16))
    kernel["main"](tvm.runtime.tensor(x.view(np.float32)), y)
    return y.numpy()[:len(bits)]


@pytest.fixture(scope="module", params=["scalar", "vector"])
def compiled(request):
    return _to_bits_kernel(request.param == "vector")


def _hex(bits) -> list[str]:
    return [f"{int(b):#06x}" for b in bits]


def test_finite_values_and_infinities_round_to_nearest_even(compiled):
    src = np.array(list(EXACT), np.uint32)
    want = np.array(list(EXACT.values()), np.uint16)
    assert _hex(_run(compiled, src)) == _hex(want)
    assert _hex(bf16_bits(src.view(np.float32))) == _hex(want)


def test_a_nan_stays_a_quiet_nan_of_its_sign(compiled):
    src = np.array(NANS, np.uint32)
    want = (src >> 16 | QUIET_NAN_BIT).astype(np.uint16)  # vcvtneps2bf16's rule: top bits, quiet bit set
    for got in (_run(compiled, src), bf16_bits(src.view(np.float32))):
        assert _hex(got) == _hex(want)
        back = (got.astype(np.uint32) << 16).view(np.float32)
        assert np.isnan(back).all()
        assert (np.signbit(back) == np.signbit(src.view(np.float32))).all()


def test_random_bits_match_torch_and_the_integer_rounding(compiled):
    """Every non-NaN input (random bit patterns over all exponents, 64 at a time) gives torch's bf16
    bits and the bits of the rounding before NaNs were kept; a NaN gives a NaN."""
    rng = np.random.default_rng(0)
    src = rng.integers(0, 2**32, 64 * 40, dtype=np.uint64).astype(np.uint32)
    src[::7] |= 0x7F800000  # many infinities and NaNs
    got = np.concatenate([_run(compiled, chunk) for chunk in src.reshape(-1, 64)])
    f = src.view(np.float32)
    finite = ~np.isnan(f)
    u = src.astype(np.uint64)
    integer = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.isnan(f).sum() > 100 and finite.sum() > 1000
    assert _hex(got[finite]) == _hex(integer[finite])
    assert np.isnan((got[~finite].astype(np.uint32) << 16).view(np.float32)).all()
    assert _hex(bf16_bits(f)) == _hex(got)
    torch = pytest.importorskip("torch")  # (an optional extra: the checks above run without it)
    torch_bits = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert _hex(got[finite]) == _hex(torch_bits[finite])


def test_the_rounding_loop_stays_a_vector_loop():
    """The NaN test is integer arithmetic TVM vectorizes: the loop's LLVM IR stores 16 bf16 at a time
    and gathers nothing (``tirx.isnan`` was scalarized, and LLVM vectorized the loop with gathers)."""
    ll = _to_bits_kernel(vector=True).mod.inspect_source("ll")
    assert "store <16 x i16>" in ll and "gather" not in ll
