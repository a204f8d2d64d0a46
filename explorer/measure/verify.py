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

The rule itself is written once, in :mod:`export.runner.compare` (a bundle's ``run.py``, which
runs where schedx is not installed, applies it too); this module is its kernel-side face.
"""

from __future__ import annotations

import numpy as np

from export.runner.compare import TOLERANCES, compare_outputs, tolerances

# The relative bounds alone, as older callers (and bundle manifests) read them.
TOLERANCE = {k: v[0] for k, v in TOLERANCES.items()}


def tolerance(dtype: str) -> float:
    """The relative bound (share of the reference's largest magnitude); 0 for integers."""
    return tolerances(dtype)[0]


def compare(outputs: list[np.ndarray], references: list[np.ndarray],
            output_atol: list[float | None] | None = None, rtol: float | None = None) -> tuple[bool, float, float, str]:
    """``(verified, max_abs_error, max_rel_error, why)`` over the outputs that have a reference (the
    rule of :func:`export.verify_bundle.compare_outputs`); the relative error is
    ``max |out - ref| / max |ref|`` (inf when the reference is all zeros and the output is not).
    ``output_atol``: per output, an absolute error that is accepted as well (an int8 model's few
    quantization steps; None: the dtype's rule alone), as the bundle's run.py accepts it; ``rtol``
    replaces the dtype's relative bound for float outputs (a bundle's manifest tolerance, as run.py
    reads it)."""
    n = min(len(outputs), len(references))
    check = compare_outputs(list(outputs)[:n], list(references)[:n], rtol=rtol, output_atol=output_atol)
    return check["verified"], check["max_abs_error"], check["max_rel_error"], check["why"]


__all__ = ["TOLERANCE", "TOLERANCES", "compare", "tolerance", "tolerances"]
