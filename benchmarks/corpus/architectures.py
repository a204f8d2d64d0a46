"""The corpus's architectures: what a user brings, built here from the package registries with
seeded weights (no download at run time).

Each entry names the module that builds it and its example inputs; `build.py` exports them to
ONNX as a user would (the exporter's default opset; some with the TorchScript exporter and a
dynamic batch, as older exports are) and writes the manifest. Families: torchvision
classification, segmentation and detection (backbone and heads, the part deployed without the
Python post-processing), timm (ConvNeXt, EfficientNet, RegNet, MobileViT, ViT/DeiT, LeViT, ...),
transformers from small configs (BERT, GPT-2, ViT, Whisper encoder, wav2vec2), recurrent models,
hand-written models (:mod:`benchmarks.corpus.custom`), the ONNX package's own models, int8 versions of a few.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.corpus.custom import (IMAGE, byte_conv_classifier, conformer_encoder, crnn, dcgan_generator,
                                      gru_tagger, gru_voice_activity, image, llama_decoder, lstm_tagger,
                                      melgan_vocoder, pix2pix_unet, seeded, style_transfer, text_detector_dbnet,
                                      yolo_nano)


@dataclass(frozen=True)
class Arch:
    """One corpus model: how to build it (a torch module and inputs), or where its file comes from."""

    name: str
    family: str
    source: str  # torchvision, timm, transformers, custom, onnx-package, quantized
    build: Callable[[], tuple[object, dict]] | None = None
    exporter: str = "dynamo"  # or "torchscript"
    dynamic_batch: bool = False
    base: str | None = None  # quantized: the corpus model it quantizes
    quantize: str | None = None  # "qdq" (static, QOperator-free) or "dynamic"
    package_file: str | None = None  # onnx-package: the file under onnx/backend/test/data
    notes: str = ""
    shapes: dict = field(default_factory=dict)  # --shapes a user would give (dynamic models)




def torchvision_classifier(name: str, shape=IMAGE):
    def build():
        from benchmarks.corpus.shims import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        return model.eval(), image(shape)
    return build


def torchvision_segmenter(name: str, shape=(1, 3, 256, 256)):
    def build():
        from benchmarks.corpus.shims import torchvision

        torch = seeded()
        seg = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.seg = seg

            def forward(self, x):
                return self.seg(x)["out"]
        return Out().eval(), image(shape)
    return build


def torchvision_video(name: str, shape=(1, 3, 8, 112, 112)):
    """A torchvision video classifier (3-D convolutions) on a short clip, seeded weights."""
    def build():
        from benchmarks.corpus.shims import torchvision

        seeded()
        return getattr(torchvision.models.video, name)(weights=None).eval(), image(shape)
    return build


def ssdlite_heads():
    """SSDlite320 (MobileNetV3 backbone): the raw box and class heads, as deployed before NMS."""
    from benchmarks.corpus.shims import torchvision

    torch = seeded()
    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            out = self.head(feats)
            return out["bbox_regression"], out["cls_logits"]
    return Heads().eval(), image((1, 3, 320, 320))


def fasterrcnn_fpn_rpn():
    """Faster R-CNN (MobileNetV3-large 320 FPN): backbone, FPN and the RPN head's maps."""
    from benchmarks.corpus.shims import torchvision

    torch = seeded()
    det = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)

    class Rpn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.rpn.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            logits, boxes = self.head(feats)
            return tuple(logits) + tuple(boxes)
    return Rpn().eval(), image((1, 3, 320, 320))


def timm_model(name: str, shape=IMAGE):
    def build():
        from benchmarks.corpus.shims import timm

        seeded()
        return timm.create_model(name, pretrained=False).eval(), image(shape)
    return build


def bert_small():
    import transformers

    torch = seeded()
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=512, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    ids = torch.randint(0, 1000, (1, 32))
    return Bert().eval(), {"input_ids": ids, "attention_mask": torch.ones(1, 32, dtype=torch.int64)}


def gpt2_small():
    import transformers

    torch = seeded()
    cfg = transformers.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2, n_positions=64, use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).eval()

    class Gpt2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits
    return Gpt2().eval(), {"input_ids": torch.randint(0, 1000, (1, 32))}


def hf_vit_small():
    import transformers

    torch = seeded()
    cfg = transformers.ViTConfig(image_size=96, patch_size=16, hidden_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=256)
    model = transformers.ViTModel(cfg, add_pooling_layer=False).eval()

    class Vit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state
    return Vit().eval(), {"pixel_values": torch.randn(1, 3, 96, 96)}


def whisper_encoder_small():
    import transformers

    torch = seeded()
    cfg = transformers.WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                                     decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=256,
                                     num_mel_bins=40, max_source_positions=100, vocab_size=1000,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    encoder = transformers.WhisperModel(cfg).get_encoder().eval()

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = encoder

        def forward(self, input_features):
            return self.m(input_features=input_features).last_hidden_state
    return Enc().eval(), {"input_features": torch.randn(1, 40, 200)}


def wav2vec2_small():
    import transformers

    torch = seeded()
    cfg = transformers.Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=256, conv_dim=(64, 64, 64, 64, 64, 64, 64),
                                      num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
                                      do_stable_layer_norm=False, feat_extract_norm="group")
    model = transformers.Wav2Vec2Model(cfg).eval()

    class W2v(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_values):
            return self.m(input_values=input_values).last_hidden_state
    return W2v().eval(), {"input_values": torch.randn(1, 8000)}


def _tv(name, family, **kw):
    return Arch(name, family, "torchvision", torchvision_classifier(name), **kw)


def _timm(name, family, **kw):
    return Arch(f"timm_{name}", family, "timm", timm_model(name), **kw)


ARCHITECTURES: tuple[Arch, ...] = (
    _tv("resnet18", "cnn"),
    _tv("resnet50", "cnn", exporter="torchscript", dynamic_batch=True, shapes={"input": "1x3x224x224"}),
    _tv("mobilenet_v2", "mobile cnn"),
    _tv("mobilenet_v3_small", "mobile cnn"),
    _tv("efficientnet_b0", "mobile cnn"),
    _tv("squeezenet1_1", "cnn", exporter="torchscript"),
    _tv("shufflenet_v2_x1_0", "mobile cnn"),
    _tv("densenet121", "cnn"),
    _tv("googlenet", "cnn"),
    _tv("regnet_y_400mf", "cnn"),
    _tv("mnasnet0_5", "mobile cnn", exporter="torchscript", dynamic_batch=True, shapes={"input": "1x3x224x224"}),
    _tv("convnext_tiny", "cnn"),
    _tv("swin_t", "vision transformer"),
    Arch("lraspp_mobilenet_v3_large", "segmentation", "torchvision", torchvision_segmenter("lraspp_mobilenet_v3_large")),
    Arch("deeplabv3_mobilenet_v3_large", "segmentation", "torchvision",
         torchvision_segmenter("deeplabv3_mobilenet_v3_large")),
    Arch("ssdlite320_heads", "detection", "torchvision", ssdlite_heads),
    Arch("fasterrcnn_mnv3_fpn_rpn", "detection", "torchvision", fasterrcnn_fpn_rpn),
    _timm("convnext_atto", "cnn"),
    _timm("regnetx_002", "cnn"),
    _timm("efficientnet_lite0", "mobile cnn"),
    _timm("ghostnet_100", "mobile cnn"),
    _timm("lcnet_050", "mobile cnn"),
    Arch("timm_mobilevit_xxs", "vision transformer", "timm", timm_model("mobilevit_xxs", (1, 3, 256, 256))),
    _timm("vit_tiny_patch16_224", "vision transformer"),
    _timm("deit_tiny_patch16_224", "vision transformer", exporter="torchscript"),
    _timm("levit_128s", "vision transformer"),
    _timm("repvit_m0_9", "mobile cnn"),
    Arch("bert_small", "transformer", "transformers", bert_small),
    Arch("gpt2_small", "transformer", "transformers", gpt2_small),
    Arch("hf_vit_small", "vision transformer", "transformers", hf_vit_small),
    Arch("whisper_encoder_small", "speech", "transformers", whisper_encoder_small),
    Arch("wav2vec2_small", "speech", "transformers", wav2vec2_small),
    Arch("conformer_encoder", "speech", "custom", conformer_encoder),
    Arch("llama_decoder", "transformer", "custom", llama_decoder),
    Arch("lstm_tagger", "recurrent", "custom", lstm_tagger),
    Arch("gru_tagger", "recurrent", "custom", gru_tagger, exporter="torchscript"),
    Arch("gru_voice_activity", "recurrent", "custom", gru_voice_activity),
    Arch("crnn", "recurrent", "custom", crnn, exporter="torchscript"),
    Arch("byte_conv_classifier", "1-d cnn", "custom", byte_conv_classifier),
    Arch("yolo_nano", "detection", "custom", yolo_nano, exporter="torchscript"),
    Arch("dbnet_text_detector", "detection", "custom", text_detector_dbnet),
    Arch("r3d_18", "video", "torchvision", torchvision_video("r3d_18")),
    Arch("pix2pix_unet", "image to image", "custom", pix2pix_unet),
    Arch("dcgan_generator", "generative", "custom", dcgan_generator),
    Arch("style_transfer", "image to image", "custom", style_transfer),
    Arch("melgan_vocoder", "speech", "custom", melgan_vocoder),
    Arch("onnx_inception_v1", "cnn", "onnx-package", package_file="light/light_inception_v1.onnx"),
    Arch("onnx_inception_v2", "cnn", "onnx-package", package_file="light/light_inception_v2.onnx"),
    Arch("onnx_shufflenet", "mobile cnn", "onnx-package", package_file="light/light_shufflenet.onnx"),
    Arch("onnx_zfnet512", "cnn", "onnx-package", package_file="light/light_zfnet512.onnx"),
    Arch("onnx_densenet121", "cnn", "onnx-package", package_file="light/light_densenet121.onnx"),
    Arch("resnet18_int8_qdq", "quantized", "quantized", base="resnet18", quantize="qdq"),
    Arch("mobilenet_v2_int8_qdq", "quantized", "quantized", base="mobilenet_v2", quantize="qdq"),
    Arch("bert_small_int8_dynamic", "quantized", "quantized", base="bert_small", quantize="dynamic"),
    Arch("lstm_tagger_int8_dynamic", "quantized", "quantized", base="lstm_tagger", quantize="dynamic"),
)


def by_name(name: str, archs: tuple[Arch, ...] = ARCHITECTURES) -> Arch:
    for arch in archs:
        if arch.name == name:
            return arch
    raise KeyError(f"no model named {name!r}; known: {', '.join(a.name for a in archs)}")
