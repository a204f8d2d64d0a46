"""Compare a kernel's outputs with a reference, with a tolerance per dtype that scales with the
reference's magnitude.

An output passes when ``max |out - ref| <= atol + rtol * max |ref|`` (over each output tensor).
The relative part follows the reference's own scale: float32 sums over thousands of terms
reorder freely under a schedule (tiling, vectorized reductions), so the error grows with the
magnitude of the values, and 1e-4 of the largest one is the bound, not machine epsilon. The
absolute part is tiny (a few times the dtype's smallest normal number): it only lets a reference
of exact zeros accept denormal noise. Earlier schedx divided the error by ``max(1, max |ref|)``,
so a model whose outputs are ~1e-9 passed a 1e-4 tolerance whatever it computed, zeros included.
Integers compare exactly.
"""

from __future__ import annotations

import numpy as np

# dtype -> (rtol: share of max |ref|, atol: absolute floor)
TOLERANCES = {
    "float64": (1e-9, 1e-300),
    "float32": (1e-4, 1e-35),
    "float16": (1e-2, 1e-7),
    "bfloat16": (2e-2, 1e-35),
}
# The relative bounds alone, as older callers (and bundle manifests) read them.
TOLERANCE = {k: v[0] for k, v in TOLERANCES.items()}


def tolerances(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype``: exact (0, 0) for integers and booleans."""
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if "int" in dtype or dtype == "bool":
        return 0.0, 0.0
    return TOLERANCES["float32"]


def tolerance(dtype: str) -> float:
    """The relative bound (share of the reference's largest magnitude); 0 for integers."""
    return tolerances(dtype)[0]


def within(abs_error: float, scale: float, dtype: str, rtol: float | None = None) -> bool:
    """Whether an error of ``abs_error`` is acceptable for a reference whose largest magnitude is
    ``scale`` (``rtol``: a relative bound that replaces the dtype's for a float output)."""
    dtype_rtol, atol = tolerances(dtype)
    if rtol is not None and dtype_rtol:
        dtype_rtol = rtol
    return abs_error <= atol + dtype_rtol * scale


def compare(outputs: list[np.ndarray], references: list[np.ndarray],
            output_atol: list[float | None] | None = None, rtol: float | None = None) -> tuple[bool, float, float, str]:
    """``(verified, max_abs_error, max_rel_error, why)`` over all outputs; the relative error is
    ``max |out - ref| / max |ref|`` (inf when the reference is all zeros and the output is not).
    ``output_atol``: per output, an absolute error that is accepted as well (an int8 model's few
    quantization steps; None: the dtype's rule alone), as the bundle's run.py accepts it; ``rtol``
    replaces the dtype's relative bound for float outputs (a bundle's manifest tolerance, as run.py
    reads it)."""
    worst_abs = worst_rel = 0.0
    why = ""
    ok = True
    for k, (out, ref) in enumerate(zip(outputs, references)):
        ref = np.asarray(ref)
        out = np.asarray(out)
        if out.shape != ref.shape:
            return False, float("inf"), float("inf"), f"output {k} has shape {out.shape}, expected {ref.shape}"
        if not np.all(np.isfinite(out)) and np.all(np.isfinite(ref)):
            return False, float("inf"), float("inf"), f"output {k} has NaN or infinite values"
        out, ref = np.atleast_1d(out), np.atleast_1d(ref)  # a 0-d output (a reduction to a scalar) as one element
        o, r = out.astype(np.float64), ref.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(o - r)
        diff[(o == r) | (np.isnan(o) & np.isnan(r))] = 0.0  # the same inf, or NaN where the reference has NaN
        diff[np.isnan(diff)] = np.inf
        abs_err = float(diff.max()) if diff.size else 0.0
        finite = np.abs(r[np.isfinite(r)])
        scale = float(finite.max()) if finite.size else 0.0
        rel = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel)
        dtype = str(out.dtype)
        steps = output_atol[k] if output_atol and k < len(output_atol) else None
        if not within(abs_err, scale, dtype, rtol) and not (steps and abs_err <= steps):
            ok = False
            bound, atol = tolerances(dtype)
            bound = rtol if rtol is not None and bound else bound
            idx = np.unravel_index(int(diff.argmax()), diff.shape)
            why = (f"output {k} differs from the reference at {tuple(int(i) for i in idx)}: "
                   f"{out[idx]!r} vs {ref[idx]!r} (error {abs_err:.2e} > {bound:.0e} x max |ref| {scale:.2e}"
                   + (f" + {atol:.0e})" if atol else ")"))
    return ok, worst_abs, worst_rel, why
