"""The numeric check: a tolerance that scales with the reference's magnitude (relative and
absolute, per dtype), so that tiny-valued outputs are checked as strictly as large ones."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import te

from explorer.kernels.kernel import make_kernel
from explorer.measure import measure
from explorer.measure.verify import compare, tolerances


def _tiny(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((16, 16)) * 1e-9).astype("float32")


def test_a_perturbed_tiny_valued_output_fails():
    ref = _tiny()
    ok, _, rel, why = compare([ref * np.float32(1.01)], [ref])
    assert not ok and rel == pytest.approx(0.01, rel=1e-3) and "max |ref|" in why
    # the old rule divided by max(1, max|ref|): zeros passed a 1e-4 tolerance
    ok, _, rel, _ = compare([np.zeros_like(ref)], [ref])
    assert not ok and rel == pytest.approx(1.0)


def test_rounding_noise_passes_at_every_magnitude():
    rng = np.random.default_rng(1)
    for scale in (1e-9, 1.0, 1e6):
        ref = (rng.standard_normal((64, 64)) * scale).astype("float32")
        noisy = ref + (rng.standard_normal(ref.shape) * 1e-6 * scale).astype("float32")
        ok, _, rel, why = compare([noisy], [ref])
        assert ok and rel < 1e-4, (scale, why)


def test_zeros_nans_integers_and_shapes():
    z = np.zeros((4, 4), "float32")
    assert compare([z], [z])[0]
    assert not compare([z + np.float32(1e-6)], [z])[0]  # a reference of exact zeros: only denormal noise
    assert compare([z + np.float32(1e-40)], [z])[0]
    nan = np.full((2,), np.nan, "float32")
    assert compare([nan], [nan])[0]
    assert not compare([nan], [np.ones(2, "float32")])[0]
    i = np.arange(6, dtype="int32")
    assert compare([i], [i])[0] and not compare([i + (i == 3)], [i])[0]
    assert tolerances("int8") == (0.0, 0.0) and tolerances("float16")[0] == 1e-2
    assert not compare([np.zeros(3, "float32")], [np.zeros(4, "float32")])[0]


def _scaled_kernel(factor: float):
    """``C = A * 1e-9`` computed by TVM, with a numpy reference that says what it should be."""
    A = te.placeholder((32, 32), "float32", name="A")
    C = te.compute((32, 32), lambda i, j: A[i, j] * factor, name="C")
    func = te.create_prim_func([A, C])
    return make_kernel(func, name="tiny_scale", title="tiny", source="test", spec="tiny", params={},
                       reference=lambda a: [a * np.float32(1e-9)])


def test_measure_refuses_a_kernel_that_computes_the_wrong_tiny_values():
    good = measure(_scaled_kernel(1e-9), isolate=False, repeat=1, min_repeat_s=0.001)
    assert good.ok and good.verified, good.error
    wrong = measure(_scaled_kernel(1.01e-9), isolate=False, repeat=1, min_repeat_s=0.001)
    assert wrong.status == "verify_failed" and wrong.max_rel_error == pytest.approx(0.01, rel=1e-2)
    zero = measure(_scaled_kernel(0.0), isolate=False, repeat=1, min_repeat_s=0.001)
    assert zero.status == "verify_failed"
