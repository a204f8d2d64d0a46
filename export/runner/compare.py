"""The one rule that compares outputs with their reference: a bundle's ``run.py`` carries it
(:mod:`export.runner`), schedx's export (:mod:`export.verify`) and kernel measurements
(:mod:`explorer.measure.verify`) import it from here. numpy only."""

from __future__ import annotations

# The comparison rule, written once: a bundle's run.py carries it, and schedx's export
# (export.verify) and kernel measurements (explorer.measure.verify) import it from here.
# dtype -> (rtol: share of the output's scale, atol: an absolute floor that only lets a reference of
# exact zeros accept denormal noise). Integers and booleans compare exactly.
TOLERANCES = {"float64": (1e-9, 1e-300), "float32": (1e-4, 1e-35), "float16": (1e-2, 1e-7), "bfloat16": (2e-2, 1e-35)}
# The spacing of each float dtype's values at 1.0 (its "ulp" there).
_UNIT_SPACING = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
# How many of those steps a bounded non-linearity (range within [-1, 1]) may be off by, in absolute
# terms: implementations compute them to absolute, not relative, accuracy. ONNX Runtime's Sigmoid is
# off by up to 1.1 float32 steps of 1.0 (1.3e-7) at every input below -5, 5x the value itself at -17.
ACTIVATION_STEPS = 4
# How many steps of the dtype at its own scale a square root's input may be off by (its rounding: a
# cancellation's, summed in another order); float32: 7.6e-6 of the squares, 2.8e-3 of the largest
# distance allowed at a zero distance.
SQRT_STEPS = 64


def tolerances(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype``: exact (0, 0) for integers and booleans."""
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if "int" in dtype or dtype == "bool":
        return 0.0, 0.0
    return TOLERANCES["float32"]


def _sigmoid(r, **_):
    """Sigmoid: its input is ``log(r / (1 - r))``, its slope ``r (1 - r)``."""
    import numpy as np

    inside = r[(r > 0) & (r < 1)]
    pre = np.log(inside) - np.log1p(-inside)
    return (float(np.abs(pre).max()) if pre.size else 0.0), np.clip(r * (1 - r), 0.0, None)


def _tanh(r, **_):
    """Tanh: its input is ``atanh(r)``, its slope ``1 - r^2``."""
    import numpy as np

    pre = np.arctanh(r[np.abs(r) < 1])
    return (float(np.abs(pre).max()) if pre.size else 0.0), np.clip(1 - r * r, 0.0, None)


def _softmax(r, **_):
    """Softmax: its input is ``log r`` up to a shift (the scale is their spread), and an error of
    ``d`` in every input moves an output ``p`` by at most ``2 p (1 - p) d``."""
    import numpy as np

    pre = np.log(r[r > 0])
    return (float(pre.max() - pre.min()) if pre.size else 0.0), np.clip(2 * r * (1 - r), 0.0, None)


def _sqrt(r, *, rtol: float, unit: float):
    """Sqrt: its input is ``r^2`` (the scale ``S``, its largest). An error ``e`` of that input moves an
    output ``r`` by ``sqrt(r^2 + e) - r``: near 0 that is ``sqrt(e)``, not ``e / (2 r)``. The input's
    error is taken as its rounding, :data:`SQRT_STEPS` steps of the dtype at ``S`` (no more than
    ``rtol S``), and the slope given makes ``rtol S`` times it that move. A point cloud's distances
    (``cdist``: the square root of ``|a|^2 + |b|^2 - 2 a.b``, whose cancellation leaves an error of the
    squares' rounding at a point's zero distance to itself: 0.16 steps seen, k-NN of the outside set)."""
    import numpy as np

    r = np.clip(r, 0.0, None)
    scale = float((r * r).max()) if r.size else 0.0
    if scale == 0.0 or rtol == 0.0:
        return 0.0, np.zeros_like(r)
    e = min(rtol, SQRT_STEPS * unit) * scale
    return scale, (np.sqrt(r * r + e) - r) / (rtol * scale)


# An output's last non-linearity (its ONNX operator), when it is one that shrinks the scale of what
# it gets (or, as a square root near 0, enlarges the error of what it gets): name -> the scale of its
# input and its slope at each element, recovered from the reference.
ACTIVATIONS = {"Sigmoid": _sigmoid, "Tanh": _tanh, "Softmax": _softmax, "Sqrt": _sqrt}
# Operators whose (first) output's values are values of their first input, moved or selected: an output or a
# layer behind them holds the values of the activation that made that input (a k-NN layer's TopK of distances)
VALUES_OF_INPUT = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Tile",
                             "Slice", "Gather", "GatherElements", "GatherND", "TopK", "MaxPool", "ReduceMax",
                             "ReduceMin"})


def _plain(value):
    """A numpy scalar as a JSON-ready Python number."""
    value = value.item() if hasattr(value, "item") else value
    return value if isinstance(value, (bool, int, float)) else float(value)


def compare_output(out, ref, *, rtol: float | None = None, activation: str | None = None,
                   steps: float | None = None) -> dict:
    """One output against its reference, element by element (arrays of any rank, 0-d included).

    An element agrees when ``|out - ref| <= atol + rtol * max |ref|`` (the output's own scale;
    ``rtol`` and ``atol`` per dtype, :data:`TOLERANCES`); ``steps`` (an int8 model: a few
    quantization steps, absolute) is accepted as well. When the output is made by a non-linearity
    of :data:`ACTIVATIONS`, an element also agrees when its error is what that function's input,
    checked at its own scale, explains: ``ACTIVATION_STEPS`` steps of the dtype at 1.0 (the
    function's absolute accuracy) plus ``rtol * scale of the input * slope at the element``. A
    sigmoid of logits near -10 has values near 1e-4 whose error is measured, through the sigmoid's
    slope, against logits of ~10; a wrong kernel still moves the output by far more than that.

    ``rtol`` replaces the dtype's relative bound for float outputs (a bundle's manifest tolerance).
    The result is plain data: ``ok``, ``max_abs_error``, ``max_rel_error`` (against max |ref|),
    ``scale``, ``rule`` (in words), ``why`` and ``worst``: the element furthest past, or nearest to,
    what it is allowed (``index``, ``got``, ``expected``, ``error``, ``allowed``, ``rule``, ``ok``)."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return {"ok": False, "max_abs_error": float("inf"), "max_rel_error": float("inf"), "scale": None,
                "rule": "the same shape", "worst": None, "why": f"shape {out.shape}, expected {ref.shape}"}
    dtype = str(out.dtype)
    dtype_rtol, atol = tolerances(dtype)
    rtol = rtol if rtol is not None and dtype_rtol else dtype_rtol
    o, r = out.astype("float64").reshape(-1), ref.astype("float64").reshape(-1)  # 0-d: one element
    with np.errstate(invalid="ignore"):
        diff = np.abs(o - r)
    diff[(o == r) | (np.isnan(o) & np.isnan(r))] = 0.0  # the same inf, or NaN where the reference has NaN
    diff[np.isnan(diff)] = np.inf
    finite = np.abs(r[np.isfinite(r)])
    scale = float(finite.max()) if finite.size else 0.0
    allowed = np.full(diff.shape, atol + rtol * scale)
    rule = (f"error <= {rtol:.0e} x max |ref| ({scale:.2e})" + (f" + {atol:.0e}" if atol else "")) if rtol else "exact"
    if steps:
        allowed = np.maximum(allowed, float(steps))
        rule += f", or <= {float(steps):.2e} (a few quantization steps)"
    recover = ACTIVATIONS.get(activation or "") if rtol else None
    if recover is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            pre_scale, slope = recover(np.where(np.isfinite(r), r, 0.0), rtol=rtol,
                                       unit=_UNIT_SPACING.get(dtype, 2.0 ** -23))
        floor = ACTIVATION_STEPS * _UNIT_SPACING.get(dtype, 2.0 ** -23)
        allowed = np.maximum(allowed, floor + rtol * pre_scale * slope)
        rule += (f"; or, as the {activation} of an input of scale {pre_scale:.3g}: <= {floor:.1e} ({ACTIVATION_STEPS} "
                 f"{dtype} steps of 1.0) + {rtol:.0e} x {pre_scale:.3g} x the {activation}'s slope at the element")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / allowed)  # inf where nothing is allowed and something differs
    abs_err = float(diff.max()) if diff.size else 0.0
    rel_err = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else float("inf"))
    ok, worst = True, None
    if diff.size:
        i = int(np.argmax(ratio))
        ok = bool(ratio[i] <= 1.0)
        worst = {"index": [int(j) for j in np.unravel_index(i, out.shape)], "got": _plain(out.reshape(-1)[i]),
                 "expected": _plain(ref.reshape(-1)[i]), "error": float(diff[i]), "allowed": float(allowed[i]),
                 "ratio": float(ratio[i]), "rule": rule, "ok": ok}
    return {"ok": ok, "max_abs_error": abs_err, "max_rel_error": rel_err, "scale": scale, "rule": rule,
            "worst": worst, "why": ""}


def _number(value) -> str:
    return f"{value:.7g}" if isinstance(value, float) else repr(value)


def describe_worst(worst: dict) -> str:
    """One sentence on a worst element (as :func:`compare_outputs` gives it) and the rule it was held to."""
    verb, sign = ("is nearest its bound", "<=") if worst["ok"] else ("differs from the reference", ">")
    return (f"output {worst.get('output', 0)} {verb} at {tuple(worst['index'])}: got {_number(worst['got'])}, "
            f"expected {_number(worst['expected'])} (error {worst['error']:.2e} {sign} {worst['allowed']:.2e} "
            f"allowed there; rule: {worst['rule']})")


def compare_outputs(outputs: list, references: list, *, rtol: float | None = None,
                    output_atol: list | None = None, activations: list | None = None) -> dict:
    """Every output against its reference with :func:`compare_output` (``output_atol`` and
    ``activations``: per output, as a bundle's manifest lists them). Plain data: ``verified``,
    ``max_abs_error``, ``max_rel_error``, ``why`` (the first failing output's worst element, in
    words), ``worst`` (the worst element over all outputs, with its ``output`` number) and
    ``outputs`` (each output's result)."""
    results = []
    for k, (out, ref) in enumerate(zip(outputs, references)):
        step = output_atol[k] if output_atol and k < len(output_atol) else None
        act = activations[k] if activations and k < len(activations) else None
        result = compare_output(out, ref, rtol=rtol, activation=act, steps=step)
        if result["worst"] is not None:
            result["worst"]["output"] = k
        results.append(result)
    why = "" if len(outputs) == len(references) else f"{len(outputs)} outputs, the reference has {len(references)}"
    failing = next((k for k, r in enumerate(results) if not r["ok"]), None)
    if failing is not None:
        bad = results[failing]
        why = describe_worst(bad["worst"]) if bad["worst"] else f"output {failing}: {bad['why']}"
    worsts = [r["worst"] for r in results if r["worst"] is not None]
    return {"verified": not why, "max_abs_error": max((r["max_abs_error"] for r in results), default=0.0),
            "max_rel_error": max((r["max_rel_error"] for r in results), default=0.0), "why": why,
            "worst": max(worsts, key=lambda w: w["ratio"], default=None), "outputs": results}


__all__ = ["ACTIVATIONS", "ACTIVATION_STEPS", "TOLERANCES", "compare_output", "compare_outputs", "describe_worst",
           "tolerances"]
