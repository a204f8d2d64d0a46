"""numpy reference of a recurrence kernel (explorer.schedule.defaults.recurrence), ONNX's equations."""

from __future__ import annotations

import numpy as np

from explorer.schedule.defaults.recurrence_spec import RecurrenceSpec


def _act(name: str, x: np.ndarray, clip: float | None) -> np.ndarray:
    if clip is not None:
        x = np.clip(x, -clip, clip)
    return {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0),
            "Softsign": lambda v: v / (1 + np.abs(v)), "Softplus": lambda v: np.logaddexp(0, v)}[name](x)


def reference(spec: RecurrenceSpec, args: list[np.ndarray]) -> list[np.ndarray]:
    named = dict(zip(spec.input_names(), args))
    T, B, H, D = spec.seq, spec.batch, spec.hidden, spec.num_dir
    N = spec.gates * H
    y = np.zeros((T, D, B, H), np.float32)
    hs, cs = [], []
    for d, direction in enumerate(spec.directions):
        a, clip = spec.acts(d), spec.clip
        rt, xw = named["rt"][d], named["xw"][:, :, d * N:(d + 1) * N]
        h = named["h0"][d].copy()
        c = named["c0"][d].copy() if spec.op == "LSTM" else None
        for t in (range(T - 1, -1, -1) if direction == "reverse" else range(T)):
            if spec.op == "RNN":
                h = _act(a[0], xw[t] + h @ rt, clip)
            elif spec.op == "LSTM":
                g = xw[t] + h @ rt
                p = named["p"][d] if spec.peepholes else np.zeros(3 * H, np.float32)
                i = _act(a[0], g[:, :H] + p[:H] * c, clip)
                f = _act(a[0], g[:, 2 * H:3 * H] + p[2 * H:] * c, clip)
                c = f * c + i * _act(a[1], g[:, 3 * H:], clip)
                h = _act(a[0], g[:, H:2 * H] + p[H:2 * H] * c, clip) * _act(a[2], c, None)
            elif spec.linear_before_reset:
                g = h @ rt
                z = _act(a[0], xw[t][:, :H] + g[:, :H], clip)
                r = _act(a[0], xw[t][:, H:2 * H] + g[:, H:2 * H], clip)
                cand = _act(a[1], xw[t][:, 2 * H:] + r * (g[:, 2 * H:] + named["rbh"][d]), clip)
                h = cand + z * (h - cand)
            else:
                g = xw[t][:, :2 * H] + h @ rt[:, :2 * H]
                z, r = _act(a[0], g[:, :H], clip), _act(a[0], g[:, H:], clip)
                cand = _act(a[1], xw[t][:, 2 * H:] + (r * h) @ rt[:, 2 * H:], clip)
                h = cand + z * (h - cand)
            y[t, d] = h
        hs.append(h)
        cs.append(c)
    outs = [y, np.stack(hs)]
    if spec.op == "LSTM":
        outs.append(np.stack(cs))
    return outs
