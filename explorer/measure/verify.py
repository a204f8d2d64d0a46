"""Compare a kernel's outputs with a reference, with a tolerance per dtype."""

from __future__ import annotations

import numpy as np

# Normalised error bound: max |out - ref| / max(1, max |ref|). float32 sums over thousands of
# terms reorder freely under a schedule (tiling, vectorized reductions), hence 1e-4 and not eps.
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


def tolerance(dtype: str) -> float:
    """0 for integers (exact), else the normalised bound above."""
    return TOLERANCE.get(dtype, 0.0 if ("int" in dtype or dtype == "bool") else 1e-4)


def compare(outputs: list[np.ndarray], references: list[np.ndarray]) -> tuple[bool, float, float, str]:
    """``(verified, max_abs_error, max_rel_error, why)`` over all outputs."""
    worst_abs = worst_rel = 0.0
    why = ""
    ok = True
    for k, (out, ref) in enumerate(zip(outputs, references)):
        ref = np.asarray(ref)
        if out.shape != ref.shape:
            return False, float("inf"), float("inf"), f"output {k} has shape {out.shape}, expected {ref.shape}"
        if not np.all(np.isfinite(out)) and np.all(np.isfinite(ref)):
            return False, float("inf"), float("inf"), f"output {k} has NaN or infinite values"
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        abs_err = float(diff.max()) if diff.size else 0.0
        rel = abs_err / max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel)
        if rel > tolerance(str(out.dtype)):
            ok = False
            idx = np.unravel_index(int(diff.argmax()), diff.shape)
            why = (f"output {k} differs from the reference at {tuple(int(i) for i in idx)}: "
                   f"{out[idx]!r} vs {ref[idx]!r} (normalised error {rel:.2e} > {tolerance(str(out.dtype)):.0e})")
    return ok, worst_abs, worst_rel, why
