"""A tiny YOLO-like detector exported by PyTorch with dynamic batch, height and width (built here,
no download): its head computes sizes from the feature maps' shapes at run time, as
ultralytics' Detect head does (anchors from ``torch.arange`` of each map's height and width, a
``view`` by computed sizes, a DFL softmax, a ``split``), after an FPN ``interpolate`` by a scale.

``crop_and_split`` adds a slice of the upsampled map to the size of the other one and a split of
the output by the computed anchor counts (sizes TVM's importer refuses until they are folded)."""

from __future__ import annotations

from pathlib import Path

OPSETS = (11, 13, 17)
SIDE = 64  # input height and width the tests fix with --shapes


def _module(*, crop_and_split: bool, channels: int = 8, classes: int = 3, reg: int = 4):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class TinyDetector(nn.Module):
        def __init__(self):
            super().__init__()
            c, self.reg, self.classes = channels, reg, classes
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.SiLU(), nn.Conv2d(c, c, 3, 2, 1), nn.SiLU())
            self.down = nn.Sequential(nn.Conv2d(c, c, 3, 2, 1), nn.SiLU())
            self.fuse = nn.Conv2d(2 * c, c, 1)
            self.heads = nn.ModuleList([nn.Conv2d(c, 4 * reg + classes, 1) for _ in range(2)])
            self.dfl = nn.Conv2d(reg, 1, 1, bias=False)
            self.dfl.weight.data[:] = torch.arange(reg, dtype=torch.float32).view(1, reg, 1, 1)

        def forward(self, x):
            p1 = self.stem(x)
            p2 = self.down(p1)
            up = F.interpolate(p2, scale_factor=2.0, mode="nearest")
            if crop_and_split:
                up = up[..., : p1.shape[2], : p1.shape[3]]
            feats = [head(p) for head, p in zip(self.heads, (self.fuse(torch.cat([p1, up], 1)), p2))]
            anchors, strides = [], []
            for f, stride in zip(feats, (4, 8)):
                _, _, h, w = f.shape
                gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                        torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
                anchors.append(torch.stack((gx, gy), -1).view(-1, 2))
                strides.append(torch.full((h * w, 1), float(stride)))
            anchors = torch.cat(anchors).transpose(0, 1).unsqueeze(0)
            b = x.shape[0]
            y = torch.cat([f.view(b, 4 * self.reg + self.classes, -1) for f in feats], 2)
            box, cls = y.split((4 * self.reg, self.classes), 1)
            a = box.shape[2]
            dist = self.dfl(box.view(b, 4, self.reg, a).transpose(2, 1).softmax(1)).view(b, 4, a)
            lt, rb = dist.chunk(2, 1)
            out = torch.cat(((anchors - lt + anchors + rb) / 2 * torch.cat(strides).transpose(0, 1), cls.sigmoid()), 1)
            if not crop_and_split:
                return out
            first, second = out.split([f.shape[2] * f.shape[3] for f in feats], 2)
            return torch.cat([second, first], 2)

    torch.manual_seed(0)
    return TinyDetector().eval()


def export_detector(path: str | Path, *, opset: int = 17, dynamo: bool = False, crop_and_split: bool = False) -> Path:
    """Write the detector to ``path`` with input ``x`` [batch, 3, height, width] symbolic, by
    ``torch.onnx.export`` (TorchScript, ``dynamic_axes``) or its dynamo exporter."""
    import torch

    module = _module(crop_and_split=crop_and_split)
    x = torch.randn(1, 3, SIDE, SIDE)
    path = Path(path)
    if dynamo:
        from torch.export import Dim

        dims = {"x": {0: Dim("batch", max=64), 2: Dim("height", min=32, max=2048),
                      3: Dim("width", min=32, max=2048)}}
        program = torch.onnx.export(module, (x,), dynamo=True, dynamic_shapes=dims, input_names=["x"],
                                    output_names=["y"], opset_version=opset, verbose=False)
        program.save(str(path))
    else:
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=opset, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                                                            "y": {0: "batch", 2: "anchors"}})
    return path


def export_ultralytics(yaml: str, dest: str | Path, *, simplify: bool = False, opset: int = 17) -> Path:
    """ultralytics' own ONNX export (``dynamic=True``) of a model built from its yaml, with random
    weights: nothing is downloaded. ultralytics writes the file in the working directory, named
    after the yaml; it is moved to ``dest``. Set ``YOLO_OFFLINE`` and ``YOLO_CONFIG_DIR`` before
    the first import of ultralytics to keep it from looking for updates or writing to $HOME."""
    import shutil

    from ultralytics import YOLO

    written = YOLO(yaml).export(format="onnx", dynamic=True, simplify=simplify, imgsz=SIDE, opset=opset)
    return Path(shutil.move(str(written), str(dest)))
