"""Shared fixtures: tiny ONNX models made on the fly, and imported zoo models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(batch: int | str = 1) -> onnx.ModelProto:
    """conv -> batchnorm -> relu -> global pool -> flatten -> gemm; 6 ONNX nodes, 1x3x16x16 input.

    ``batch`` may be a name, making the first input dimension symbolic."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.2, (8, 3, 3, 3)).astype("float32"), "w1"),
        numpy_helper.from_array(np.ones(8, "float32"), "gamma"),
        numpy_helper.from_array(np.zeros(8, "float32"), "beta"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype("float32"), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype("float32"), "var"),
        numpy_helper.from_array(rng.normal(0, 0.2, (10, 8)).astype("float32"), "w2"),
        numpy_helper.from_array(np.zeros(10, "float32"), "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["out"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def tiny_onnx_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), path)
    return path


@pytest.fixture(scope="session")
def tiny_module():
    from explorer.models import import_onnx

    return import_onnx(tiny_cnn()).mod


@pytest.fixture(scope="session")
def resnet18():
    from explorer.models import load_model

    return load_model("resnet18")


@pytest.fixture
def one_round_in_model_check(monkeypatch):
    """Exports take the real in-model check (export.in_model.check_in_model) at one round of three
    profiled runs instead of three of ten: enough for a record that loses by far (a plain parallel
    loop nest against the default's register tile)."""
    import functools

    import export.in_model as in_model

    monkeypatch.setattr(in_model, "check_in_model", functools.partial(in_model.check_in_model, rounds=1, runs=3))


def pytest_configure(config):
    """Mark every process this run starts (UI servers, search jobs, pool workers inherit it)."""
    import os
    import uuid

    from tests.processes import RUN_MARKER

    os.environ.setdefault(RUN_MARKER, uuid.uuid4().hex)


def pytest_sessionfinish(session, exitstatus):
    """No process this run started may outlive it: kill any that did, and fail the run. Under
    pytest-xdist only the controller looks, after every worker finished (a worker finishing first
    would take a neighbour's live UI server for a leftover)."""
    import os

    if hasattr(session.config, "workerinput"):
        return

    from tests.processes import RUN_MARKER, kill_marked, leftovers

    left = leftovers(os.environ[RUN_MARKER])
    if left:
        kill_marked(RUN_MARKER, os.environ[RUN_MARKER])
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"  pid {pid}: {cmd[:160]}" for pid, cmd in left]
        if reporter is not None:
            reporter.write_line("processes left behind by the tests (killed now):\n" + "\n".join(lines), red=True)
        session.exitstatus = 1


@pytest.fixture(autouse=True, scope="session")
def _isolated_database(tmp_path_factory):
    """Every test writes to a throw-away database, never the user's default one."""
    import os

    path = tmp_path_factory.mktemp("db") / "schedx-test.db"
    old = os.environ.get("SCHEDX_DB")
    os.environ["SCHEDX_DB"] = str(path)
    yield path
    if old is None:
        os.environ.pop("SCHEDX_DB", None)
    else:
        os.environ["SCHEDX_DB"] = old
