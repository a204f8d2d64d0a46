"""Profile: time per fused kernel of a built model (in a fresh process), that adds up to the
model's time, with where each schedule came from, beside ONNX Runtime's per-node profile."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import cli
from export.profile import profile_workload

pytestmark = pytest.mark.heavy  # real builds or searches: left out of make test-fast


@pytest.fixture(scope="module")
def small_cnn_profile():
    return profile_workload("small_cnn", runs=5)


def test_rows_add_up_to_the_models_time(small_cnn_profile):
    p = small_cnn_profile
    assert p.kernels and all(k.seconds >= 0 for k in p.kernels)
    assert [k.seconds for k in p.kernels] == sorted((k.seconds for k in p.kernels), reverse=True)
    assert sum(k.share for k in p.kernels) == pytest.approx(1.0)
    instrumented = float(p.notes[0].split(" ms against")[0].split()[-1]) / 1e3
    # the kernels and the VM's builtins are the instrumented run, up to the Python between calls
    assert 0.5 * instrumented <= p.kernels_s + p.other_s <= 1.05 * instrumented
    conv = [k for k in p.kernels if "conv2d" in k.task]
    assert conv and conv[0].gflops and conv[0].calls == 1 and conv[0].schedule == "default"
    assert p.ort and p.ort_s and {n.op_type for n in p.ort} & {"Conv"}


def test_records_are_named_in_the_profile(tmp_path):
    from export.schedules import TaskSchedule

    steps = ({"primitive": "parallel", "args": {"loop": "conv2d_nhwc/yy"}},)
    task = "small_cnn/fused_conv2d_add_relu"  # conv + folded batch-norm + relu
    p = profile_workload("small_cnn", runs=2, ort=False,
                         schedules={task: TaskSchedule(steps=steps, record_id=41, source="manual")})
    row = next(k for k in p.kernels if k.task == task)
    assert row.schedule == "record" and row.record_id == 41


def test_cli_profile_json_and_table(tmp_path):
    result = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["kernels"] and data["end_to_end_s"] > 0
    table = CliRunner().invoke(cli, ["profile", "small_cnn", "--no-db", "--runs", "2", "--top", "3"])
    assert table.exit_code == 0 and "schedx tune small_cnn/" in table.output
    bad = CliRunner().invoke(cli, ["profile", "small_cnn", "--target", "cpu:nosuchcpu"])
    assert bad.exit_code == 1 and "LLVM does not know" in bad.output
