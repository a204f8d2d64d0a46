"""A step as a line of text (:meth:`explorer.schedule.steps.Step.describe`): by default (the Schedule page's
steps list, a step's error, the sketches of `schedx sketches` and the Search page) an annotation's value
is cut, in the middle, with its length; names of blocks and loops and index maps stay whole, however
long; ``limit=None`` gives it whole. Cutting loads no graph code (networkx)."""

from __future__ import annotations

import subprocess
import sys

from explorer.schedule.steps import DESCRIBED_VALUE_CHARS, Step

LLVM_IR = "define void @tile(ptr %a) {\n  entry:\n" + "  call void @llvm.x86.tdpbf16ps.internal()\n" * 120 + "}\n"
LONG_BLOCK = "conv2d_nhwc_bf16_" + "x" * 90


def test_a_long_annotation_value_is_cut_with_its_length_by_default():
    step = Step("annotate", {"target": LONG_BLOCK, "key": "pragma_import_llvm", "value": LLVM_IR})
    line = step.describe()
    head = f"annotate(target={LONG_BLOCK}, key=pragma_import_llvm, value=define void @tile(ptr %a) {{ entry: c…"
    assert line.startswith(head) and line.endswith(f"() }} ({len(LLVM_IR):,} characters))"), line
    assert len(line) < len(head) + DESCRIBED_VALUE_CHARS + 30, line
    assert step.describe(None) == f"annotate(target={LONG_BLOCK}, key=pragma_import_llvm, value={LLVM_IR})"


def test_names_and_index_maps_stay_whole_however_long():
    index_map = "lambda n, h, w, c: (n, h // 7, w // 7, c // 16, h % 7, w % 7, c % 16)  # a layout with a long map"
    steps = [Step("split", {"loop": f"{LONG_BLOCK}/i_0", "factors": [None, 16]}),
             Step("transform_layout", {"block": LONG_BLOCK, "buffer": "write:0", "index_map": index_map}),
             Step("annotate", {"target": LONG_BLOCK, "key": "pragma_auto_unroll_max_step", "value": 64})]
    for step in steps:
        assert step.describe() == step.describe(None), step
        assert LONG_BLOCK in step.describe()


def test_cutting_a_value_loads_no_graph_code():
    """The cut is plain text work: describing a step does not import explorer.graph (networkx, layouts)."""
    code = ("import sys\nfrom explorer.schedule.steps import Step\n"
            "Step('annotate', {'target': 'C', 'key': 'pragma_import_llvm', 'value': 'x' * 500}).describe(40)\n"
            "print(sorted(m for m in sys.modules if m == 'networkx' or m.startswith('explorer.graph')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
