"""The pin that keeps MetaSchedule alive: apache-tvm-ffi 0.1.15.x segfaults saving IR as JSON."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_pinned_versions():
    assert version("apache-tvm") == "0.27.0.post1"
    assert version("apache-tvm-ffi") == "0.1.14.post1"


def test_saving_an_ir_node_as_json_does_not_crash():
    code = ("import tvm; s = tvm.ir.save_json(tvm.tirx.const(1, 'int32')); "
            "n = tvm.ir.load_json(s); assert int(n.value) == 1; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"saving IR as JSON crashed (rc={proc.returncode}): {proc.stderr[-500:]}"
    assert proc.stdout.strip().endswith("ok")
