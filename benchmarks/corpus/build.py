"""Build the corpus: export every architecture to ONNX in a cache folder outside the repository
and write its manifest (``benchmarks/corpus/manifest.json``, committed: what each file is).

Run: ``python -m benchmarks.corpus.build [--set outside] [--out DIR] [--only a,b] [--force]``
(``--set outside``: the held-out models of ``benchmarks/outside``, into ``~/.cache/schedx/outside``;
``--set exporters``: the files of each exporter, ``benchmarks/exporters/build.py``). Needs the corpus
extra (``pip install -e .[corpus]``: torchvision, timm, transformers). Files that exist are kept
(``--force`` rebuilds); a model that fails to export is listed with its error and the others go on.
The folder: ``--out``, else ``$SCHEDX_CORPUS``, else ``~/.cache/schedx/corpus``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

from benchmarks.corpus.architectures import ARCHITECTURES, Arch, by_name

MANIFEST = Path(__file__).with_name("manifest.json")
OUTSIDE_MANIFEST = Path(__file__).parent.parent / "outside" / "manifest.json"
EXPORTERS_MANIFEST = Path(__file__).parent.parent / "exporters" / "manifest.json"
SETS = ("corpus", "outside", "exporters")


def corpus_dir(out: str | None = None, which: str = "corpus") -> Path:
    if which in ("outside", "exporters"):
        return Path(out or Path.home() / ".cache" / "schedx" / which)
    return Path(out or os.environ.get("SCHEDX_CORPUS") or Path.home() / ".cache" / "schedx" / "corpus")


def manifest_path(which: str = "corpus") -> Path:
    return {"outside": OUTSIDE_MANIFEST, "exporters": EXPORTERS_MANIFEST}.get(which, MANIFEST)


def architectures(which: str = "corpus") -> tuple[Arch, ...]:
    if which == "outside":
        from benchmarks.outside.architectures import OUTSIDE

        return OUTSIDE
    return ARCHITECTURES


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _export_torch(arch: Arch, path: Path) -> str:
    import torch

    import benchmarks.corpus.shims  # noqa: F401 - torchvision importable before transformers imports it
    module, inputs = arch.build()
    names = list(inputs)
    args = tuple(inputs.values())
    if arch.exporter == "torchscript":
        dynamic = {n: {0: "batch"} for n in names} if arch.dynamic_batch else None
        torch.onnx.export(module, args, str(path), input_names=names, dynamic_axes=dynamic, dynamo=False)
        return "torchscript"
    try:
        program = torch.onnx.export(module, args, input_names=names, dynamo=True, optimize=True)
        program.save(str(path))
        return "dynamo"
    except Exception:  # noqa: BLE001 - as a user would, fall back to the TorchScript exporter
        torch.onnx.export(module, args, str(path), input_names=names, dynamo=False)
        return "torchscript (dynamo failed)"


def _export_package(arch: Arch, path: Path) -> str:
    import onnx

    src = Path(onnx.__file__).parent / "backend" / "test" / "data" / arch.package_file
    path.write_bytes(src.read_bytes())
    return f"onnx {onnx.__version__} package file"


def _random_feed(model_path: Path) -> dict:
    import numpy as np
    import onnx


    model = onnx.load(str(model_path), load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feed = {}
    for inp in model.graph.input:
        if inp.name in init:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        if t.elem_type == onnx.TensorProto.INT64:
            feed[inp.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            feed[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def _quantize(arch: Arch, path: Path, folder: Path) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    base = folder / f"{arch.base}.onnx"
    if not base.exists():
        raise FileNotFoundError(f"{arch.name} quantizes {arch.base}, which was not built")
    pre = folder / f".{arch.name}.pre.onnx"
    quant_pre_process(str(base), str(pre), skip_symbolic_shape=True)
    try:
        if arch.quantize == "dynamic":
            quantize_dynamic(str(pre), str(path), weight_type=QuantType.QInt8)
            return "onnxruntime quantize_dynamic (int8 weights)"

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.left = 4

            def get_next(self):
                if not self.left:
                    return None
                self.left -= 1
                return _random_feed(pre)
        quantize_static(str(pre), str(path), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
        return "onnxruntime quantize_static (QDQ, per-channel int8 weights)"
    finally:
        pre.unlink(missing_ok=True)


def describe(path: Path) -> dict:
    """What the manifest says of a file: opset, inputs, operators, size, checksum."""
    import onnx

    model = onnx.load(str(path))
    init = {i.name for i in model.graph.initializer}

    def dims(t):
        return [d.dim_value if d.dim_value > 0 else (d.dim_param or "?") for d in t.shape.dim]
    ops = Counter(n.op_type for n in model.graph.node)
    return {
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "inputs": {i.name: {"shape": dims(i.type.tensor_type),
                            "dtype": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name}
                   for i in model.graph.input if i.name not in init},
        "outputs": [o.name for o in model.graph.output],
        "nodes": len(model.graph.node),
        "operators": dict(ops.most_common()),
        "megabytes": round(path.stat().st_size / 2**20, 2),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def build_one(arch: Arch, folder: Path, force: bool = False, manifest: Path = MANIFEST) -> dict:
    path = folder / f"{arch.name}.onnx"
    entry = {"name": arch.name, "family": arch.family, "source": arch.source, "file": path.name,
             "shapes": dict(arch.shapes)}
    if arch.notes:
        entry["notes"] = arch.notes
    if path.exists() and not force:
        old = next((m for m in _read_manifest(manifest) if m["name"] == arch.name), {})
        entry["exporter"] = old.get("exporter", "?")
    else:
        tmp = folder / f".{arch.name}.partial.onnx"
        if arch.source == "onnx-package":
            entry["exporter"] = _export_package(arch, tmp)
        elif arch.source == "quantized":
            entry["exporter"] = _quantize(arch, tmp, folder)
        else:
            entry["exporter"] = _export_torch(arch, tmp)
        data = tmp.with_name(tmp.name + ".data")
        if data.exists():  # weights the dynamo exporter saved beside the model: fold them in
            import onnx

            onnx.save(onnx.load(str(tmp)), str(tmp))
            data.unlink()
        os.replace(tmp, path)
    entry.update(describe(path))
    return entry


def _read_manifest(manifest: Path = MANIFEST) -> list[dict]:
    return json.loads(manifest.read_text())["models"] if manifest.exists() else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="which", choices=SETS, default="corpus",
                    help="the corpus, the held-out models of benchmarks/outside, or the files of each "
                         "exporter (benchmarks/exporters)")
    ap.add_argument("--out", help="the folder (default $SCHEDX_CORPUS or ~/.cache/schedx/corpus; "
                                  "~/.cache/schedx/outside for --set outside)")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--force", action="store_true", help="export again files that exist")
    opts = ap.parse_args(argv)
    if opts.which == "exporters":  # each exporter in its own builder venv: benchmarks/exporters/build.py
        from benchmarks.exporters.build import main as build_exporters

        return build_exporters((["--out", opts.out] if opts.out else []) + (["--only", opts.only] if opts.only else [])
                               + (["--force"] if opts.force else []))
    folder = corpus_dir(opts.out, opts.which)
    folder.mkdir(parents=True, exist_ok=True)
    every, manifest = architectures(opts.which), manifest_path(opts.which)
    archs = [by_name(n, every) for n in opts.only.split(",")] if opts.only else list(every)
    old = {m["name"]: m for m in _read_manifest(manifest)}
    failed = []
    for arch in archs:
        t0 = time.perf_counter()
        try:
            entry = build_one(arch, folder, opts.force, manifest)
        except Exception as exc:  # noqa: BLE001 - one model's failure is listed, the rest go on
            failed.append(arch.name)
            out(f"FAILED {arch.name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            out("".join(traceback.format_exception(exc)[-3:]).rstrip())
            continue
        old[arch.name] = entry
        out(f"{arch.name:<30} {entry['exporter']:<28} opset {entry['opset']} {entry['nodes']:>5} nodes "
            f"{entry['megabytes']:>7.1f} MB  {time.perf_counter() - t0:5.1f} s")
    order = [a.name for a in every]
    models = sorted(old.values(), key=lambda m: order.index(m["name"]) if m["name"] in order else len(order))
    about = ("the corpus of python -m benchmarks.corpus.build; files in $SCHEDX_CORPUS or ~/.cache/schedx/corpus"
             if opts.which == "corpus" else "the held-out models of python -m benchmarks.corpus.build --set outside; "
             "files in ~/.cache/schedx/outside")
    manifest.write_text(json.dumps({"about": about, "models": models}, indent=1) + "\n")
    out(f"{len(archs) - len(failed)}/{len(archs)} exported into {folder}" + (f"; failed: {', '.join(failed)}"
                                                                              if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
