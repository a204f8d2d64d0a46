"""The default rules' decisions on a few small kernels (tiles, layout, int8 path, recurrence,
variants; for AVX-512, AVX2 and NEON, compile only) are the ones recorded in
``tests/default_decisions.json``: a change to the rules, or a move of their code, that changes a
decision shows here kernel by kernel. Deliberate? Write the file again with
``SCHEDX_WRITE_DECISIONS=1 python -m pytest tests/test_default_decisions.py`` and say why in the
change. ``python -m benchmarks.dump_decisions`` does the same for whole models and the corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from explorer.schedule.defaults.dump import workload_decisions
from explorer.target import parse_target
from tests.onnx_cases import recurrent

RECORDED = Path(__file__).with_name("default_decisions.json")
TARGETS = ("cpu:sapphirerapids", "cpu:znver3", "aarch64")  # AVX-512 (VNNI, AMX), AVX2, NEON: from flags, not the host
KERNELS = ("matmul:M=64,N=96,K=80", "conv2d_nchw:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=1,pad=1",
           "depthwise_conv2d:N=1,C=32,H=14,W=14,R=3,S=3,stride=1,pad=1", "softmax:M=64,N=128",
           "matmul_int8:M=32,N=64,K=64")


def _decisions(tmp: Path) -> dict:
    lstm = tmp / "lstm.onnx"
    onnx.save(recurrent("LSTM", "bidirectional"), lstm)
    table = {}
    for text in TARGETS:
        target = parse_target(text, cores=4)
        variants = 3 if text == TARGETS[0] else 0  # the search's variants: on one target (they cost 3x)
        table[text] = {spec: workload_decisions(spec, target, variants=variants) for spec in KERNELS}
        table[text]["lstm"] = workload_decisions(str(lstm), target)
    return table


def test_the_default_rules_decide_as_recorded(tmp_path):
    got = _decisions(tmp_path)
    if os.environ.get("SCHEDX_WRITE_DECISIONS"):
        RECORDED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {RECORDED.name}")
    recorded = json.loads(RECORDED.read_text())
    changed = [f"{t} {spec} {kernel}: {recorded[t][spec].get(kernel)} -> {decision}"
               for t in TARGETS for spec in got[t] for kernel, decision in got[t][spec].items()
               if recorded.get(t, {}).get(spec, {}).get(kernel) != decision]
    assert not changed, "default decisions changed (see the module docstring):\n" + "\n".join(changed)
    assert got == recorded  # and none disappeared
