"""The exporter corpus framework (``benchmarks/exporters``): modules run in their builder
interpreter, their files described in the manifest, failures listed with their error while the
others go on, files kept unless forced; and the committed manifest is well-formed. No TensorFlow
or Paddle needed: the modules here write tiny ONNX files with onnx.helper."""

from __future__ import annotations

import importlib
import json
import textwrap

import pytest

from benchmarks.bench_corpus import entry_shapes, exporter_lines
from benchmarks.exporters import build as exporters_build

GOOD = '''
import base64
import sys
from benchmarks.exporters import Model, build_each, main

EXPORTER = "fakeonnx"
REQUIREMENTS = ()


def _tiny(path):  # the child stays stdlib-only (fast): the bytes of a one-Relu model made by the test
    path.write_bytes(base64.b64decode("{tiny}"))


def _broken(path):
    raise ValueError("Unsupported op: FancyOp in layer dense_3")


def build(outdir):
    return build_each(outdir, EXPORTER, [Model("fake_relu", _tiny, "x:1x4", "a relu"),
                                         Model("fake_broken", _broken)])


if __name__ == "__main__":
    sys.exit(main(build))
'''

CRASH = '''
import sys
from benchmarks.exporters import main

EXPORTER = "crashy"
REQUIREMENTS = ()


def build(outdir):
    raise ImportError("No module named 'tensorflow'")


if __name__ == "__main__":
    sys.exit(main(build))
'''

NO_VENV = '''
EXPORTER = "novenv"
REQUIREMENTS = ("somepackage==1.0",)


def build(outdir):
    return []
'''


def _tiny_relu() -> str:
    import base64

    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="fakeonnx")
    return base64.b64encode(model.SerializeToString()).decode()


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "src" / "fake_exporters"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in (("good", GOOD.replace("{tiny}", _tiny_relu())), ("crash", CRASH), ("novenv", NO_VENV)):
        (pkg / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setenv("SCHEDX_EXPORTER_VENVS", str(tmp_path / "venvs"))
    monkeypatch.setenv("SCHEDX_EXPORTER_PYTHON", str(tmp_path / "no-such-python3.11"))
    importlib.invalidate_caches()
    return tmp_path / "src"


def test_build_lists_each_failure_with_its_error_and_writes_the_files_that_built(tmp_path, fake_modules):
    out, manifest, said = tmp_path / "out", tmp_path / "manifest.json", []
    names = ["fake_exporters.good", "fake_exporters.crash", "fake_exporters.novenv"]
    built, failures = exporters_build.build_all(names, out, manifest, pythonpath=[fake_modules], log=said.append)

    assert [b["name"] for b in built] == ["fake_relu"]
    why = {(f.module, f.name): f.error for f in failures}
    assert "Unsupported op: FancyOp in layer dense_3" in why[("fake_exporters.good", "fake_broken")]
    assert "No module named 'tensorflow'" in why[("fake_exporters.crash", None)]
    assert "no-such-python3.11" in why[("fake_exporters.novenv", None)]  # the venv's interpreter is named
    assert sum(line.startswith("FAILED") for line in said) == 3

    written = json.loads(manifest.read_text())
    (entry,) = written["models"]
    assert entry["file"] == "fake_relu.onnx" and (out / entry["file"]).exists()
    assert entry["shapes"] == "x:1x4" and entry["exporter"] == "fakeonnx" and entry["producer"] == "fakeonnx"
    assert entry["opset"] == 13 and entry["operators"] == {"Relu": 1} and entry["inputs"]["x"]["shape"] == ["batch", 4]
    assert len(written["failures"]) == 3 and not list(out.glob(".*partial*"))  # no half-written file left


def test_files_are_kept_unless_forced(tmp_path, fake_modules):
    out, manifest = tmp_path / "out", tmp_path / "manifest.json"
    exporters_build.build_all(["fake_exporters.good"], out, manifest, pythonpath=[fake_modules], log=lambda s: None)
    path = out / "fake_relu.onnx"
    path.write_bytes(path.read_bytes() + b"")  # same bytes, a later mtime marks this copy
    stamp = path.stat().st_mtime_ns
    exporters_build.build_all(["fake_exporters.good"], out, manifest, pythonpath=[fake_modules], log=lambda s: None)
    assert path.stat().st_mtime_ns == stamp
    exporters_build.build_all(["fake_exporters.good"], out, manifest, force=True, pythonpath=[fake_modules],
                              log=lambda s: None)
    assert path.stat().st_mtime_ns != stamp


def test_the_committed_manifest_names_each_file_its_exporter_and_shapes():
    from benchmarks.corpus.build import manifest_path

    manifest = json.loads(manifest_path("exporters").read_text())
    exporters = {exporters_build.short(m): importlib.import_module(m).EXPORTER for m in exporters_build.modules()}
    names = [m["name"] for m in manifest["models"]]
    assert len(names) == len(set(names))
    for m in manifest["models"]:
        assert exporters_build.check_entry(m) is None, m["name"]
        assert m["source"] in exporters, f"{m['name']}: no exporter module {m['source']}"
        assert m["exporter"] == exporters[m["source"]] == m["family"], m["name"]
        assert m["file"].endswith(".onnx") and len(m["sha256"]) == 64 and m["opset"] and m["inputs"]
        if m["shapes"]:
            assert {part.split(":")[0].split("=")[0] for part in m["shapes"].split(",")} <= set(m["inputs"])
    for f in manifest.get("failures", []):
        assert f["module"].split(".")[-1] in exporters and f["error"]


def test_every_exporter_module_declares_its_interface():
    for name in exporters_build.modules():
        mod = importlib.import_module(name)  # in the project's venv: no TensorFlow or Paddle at import
        assert isinstance(mod.EXPORTER, str) and mod.EXPORTER
        assert isinstance(mod.REQUIREMENTS, tuple) and callable(mod.build), name


def test_the_bench_prints_a_line_per_exporter():
    results = [{"name": "a", "exporter": "tf2onnx", "imports": True, "verified": True, "ratio_2t": 0.5},
               {"name": "b", "exporter": "tf2onnx", "imports": True, "verified": False, "ratio_2t": 1.25},
               {"name": "c", "exporter": "paddle2onnx", "imports": False}]
    lines = exporter_lines(results)
    assert lines[0] == "per exporter:"
    assert "tf2onnx" in lines[1] and "imports 2/2, verified 1/2" in lines[1] and "worst 1.25x (b)" in lines[1]
    assert "paddle2onnx" in lines[2] and "imports 0/1, verified 0/1" in lines[2]
    assert entry_shapes({"shapes": "input:1x512,sr=16000"}) == "input:1x512,sr=16000"
    assert entry_shapes({"shapes": None}) is None and entry_shapes({"shapes": {"x": "1x3"}}) == "x:1x3"
