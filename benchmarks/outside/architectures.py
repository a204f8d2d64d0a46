"""Held-out models: architectures schedx's rules were not written for, exported as a user would
(``torch.onnx.export``, the dynamo exporter first), to try import, export and speed on models
nobody tuned for. A model that fails or runs slow here is a defect to fix in general, then a
candidate for the corpus (``benchmarks/corpus``), where it stays as a regression test: the
Conformer encoder, the LLaMA-style decoder and the style-transfer net came from here.

Build: ``python -m benchmarks.corpus.build --set outside`` (files in ``~/.cache/schedx/outside``);
run: ``python -m benchmarks.bench_corpus --set outside``. Seeded weights, no download.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from benchmarks.corpus.architectures import Arch
from benchmarks.outside.modules import (
    CenterNetHead,
    ConvMixer,
    DETRHead,
    DFLHead,
    DLRM,
    ESPCN,
    FNet,
    GCN,
    HRLite,
    KNNPoints,
    Mixer,
    MoE,
    NHWCNet,
    NeRF,
    PointNet,
    QuartzNet,
    STFTNet,
    SelectiveScan,
    StyleGen,
    TCN,
    TinyUNet,
)

IMAGE = (1, 3, 224, 224)


def _tv(name, shape=IMAGE, **kw):
    def build():
        from benchmarks.corpus.shims import torchvision

        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None, **kw).eval(), {"input": torch.randn(*shape)}

    return build


def _timm(name, shape=IMAGE):
    def build():
        from benchmarks.corpus.shims import timm

        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False).eval(), {"input": torch.randn(*shape)}

    return build


def _custom(module, **inputs):
    def build():
        torch.manual_seed(0)
        return module().eval(), {k: v() for k, v in inputs.items()}

    return build


def t5():
    torch.manual_seed(0)
    import transformers

    cfg = transformers.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4)
    m = transformers.T5EncoderModel(cfg).eval()

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids).last_hidden_state

    return W().eval(), {"input_ids": torch.randint(0, 1000, (1, 48))}


def distilbert():
    torch.manual_seed(0)
    import transformers

    cfg = transformers.DistilBertConfig(
        vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=512, max_position_embeddings=64
    )
    m = transformers.DistilBertModel(cfg).eval()

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return W().eval(), {
        "input_ids": torch.randint(0, 1000, (1, 40)),
        "attention_mask": torch.ones(1, 40, dtype=torch.int64),
    }


def _hf(config_name: str, model_name: str, seq: int = 48, call: dict | None = None, **config):
    """A small transformers model of ``config`` (no download), returning its last hidden state;
    ``call``: keyword arguments of its forward (a decoder's ``use_cache=False``)."""

    def build():
        torch.manual_seed(0)
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        m = getattr(transformers, model_name)(cfg).eval()

        class W(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, **(call or {})).last_hidden_state

        return W().eval(), {"input_ids": torch.randint(0, 1000, (1, seq))}

    return build


def clip_text():
    torch.manual_seed(0)
    import transformers

    cfg = transformers.CLIPTextConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
    )
    m = transformers.CLIPTextModel(cfg).eval()

    class W(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            o = self.m(input_ids=input_ids)
            return o.last_hidden_state, o.pooler_output

    return W().eval(), {"input_ids": torch.randint(0, 999, (1, 77))}


def _randn(*shape):
    return lambda: torch.randn(*shape)


OUTSIDE: tuple[Arch, ...] = (
    Arch(
        "inception_v3", "cnn", "torchvision", _tv("inception_v3", (1, 3, 299, 299), aux_logits=False, init_weights=True)
    ),
    Arch("mobilenet_v3_large", "mobile cnn", "torchvision", _tv("mobilenet_v3_large")),
    Arch("efficientnet_v2_s", "mobile cnn", "torchvision", _tv("efficientnet_v2_s")),
    Arch("resnext50_32x4d", "cnn", "torchvision", _tv("resnext50_32x4d")),
    Arch("maxvit_t", "vision transformer", "torchvision", _tv("maxvit_t")),
    Arch("swin_v2_t", "vision transformer", "torchvision", _tv("swin_v2_t", (1, 3, 256, 256))),
    Arch("alexnet", "cnn", "torchvision", _tv("alexnet")),
    Arch("t5_encoder", "transformer", "transformers", t5),
    Arch("distilbert", "transformer", "transformers", distilbert),
    Arch("clip_text", "transformer", "transformers", clip_text),
    Arch(
        "unet_diffusion",
        "diffusion",
        "custom",
        _custom(TinyUNet, latent=_randn(1, 4, 32, 32), timestep=lambda: torch.tensor([10])),
    ),
    Arch("pointnet", "point cloud", "custom", _custom(PointNet, points=_randn(1, 3, 1024))),
    Arch("tcn", "sequence cnn", "custom", _custom(TCN, signal=_randn(1, 16, 2000))),
    Arch("mlp_mixer", "mlp", "custom", _custom(Mixer, input=_randn(*IMAGE))),
    Arch("espcn_sr", "super resolution", "custom", _custom(ESPCN, input=_randn(1, 1, 224, 224))),
    Arch("quartznet", "speech", "custom", _custom(QuartzNet, mel=_randn(1, 64, 400))),
    Arch("detr_tiny", "detection", "custom", _custom(DETRHead, input=_randn(1, 3, 256, 256))),
    Arch("hrnet_lite", "pose", "custom", _custom(HRLite, input=_randn(1, 3, 256, 192))),
    Arch("convmixer", "cnn", "custom", _custom(ConvMixer, input=_randn(*IMAGE))),
    Arch("stylegan_mod", "generative", "custom", _custom(StyleGen, z=_randn(1, 128))),
    Arch(
        "dlrm",
        "recommendation",
        "custom",
        _custom(DLRM, dense=_randn(4, 13), sparse=lambda: torch.randint(0, 1000, (4, 8, 3))),
    ),
    Arch("yolo_dfl_head", "detection", "custom", _custom(DFLHead, input=_randn(1, 3, 256, 256))),
    Arch("centernet_head", "detection", "custom", _custom(CenterNetHead, input=_randn(1, 3, 256, 256))),
    Arch("gcn", "graph", "custom", _custom(GCN, x=_randn(200, 64), adj=lambda: (torch.rand(200, 200) < 0.05).float())),
    Arch("nhwc_keras_style", "mobile cnn", "custom", _custom(NHWCNet, input=_randn(1, 96, 96, 3))),
    Arch("stft_classifier", "audio", "custom", _custom(STFTNet, wav=_randn(1, 16000))),
    *(
        Arch(f"timm_{name}", family, "timm", _timm(name, shape))
        for name, family, shape in (
            ("mixnet_s", "mobile cnn", IMAGE),
            ("tf_efficientnet_b0", "mobile cnn", IMAGE),
            ("hrnet_w18_small", "cnn", IMAGE),
            ("poolformer_s12", "vision transformer", IMAGE),
            ("efficientformer_l1", "vision transformer", IMAGE),
            ("edgenext_xx_small", "vision transformer", (1, 3, 256, 256)),
            ("xcit_nano_12_p16_224", "vision transformer", IMAGE),
            ("dla34", "cnn", IMAGE),
            ("rexnet_100", "mobile cnn", IMAGE),
            ("pit_ti_224", "vision transformer", IMAGE),
            ("fastvit_t8", "mobile cnn", (1, 3, 256, 256)),
            ("resnest14d", "cnn", IMAGE),
            ("skresnet18", "cnn", IMAGE),
            ("ese_vovnet19b_dw", "cnn", IMAGE),
            ("nf_resnet26", "cnn", IMAGE),
            ("efficientvit_b0", "vision transformer", IMAGE),
            ("mobilevitv2_050", "vision transformer", (1, 3, 256, 256)),
            ("pvt_v2_b0", "vision transformer", IMAGE),
        )
    ),
    # the second batch (2026-12-05): tried once the first batch's defects were fixed
    Arch("albert", "transformer", "transformers", _hf(
        "AlbertConfig", "AlbertModel", vocab_size=1000, embedding_size=64, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=512, max_position_embeddings=64)),
    Arch("deberta_v2", "transformer", "transformers", _hf(
        "DebertaV2Config", "DebertaV2Model", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=512, max_position_embeddings=64, relative_attention=True,
        pos_att_type=["p2c", "c2p"], position_buckets=32, max_relative_positions=64)),
    Arch("mistral_decoder", "transformer", "transformers", _hf(
        "MistralConfig", "MistralModel", call={"use_cache": False}, vocab_size=1000, hidden_size=128, intermediate_size=352,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=32,
        max_position_embeddings=128)),
    Arch("fnet", "transformer", "custom", _custom(FNet, input_ids=lambda: torch.randint(0, 1000, (1, 64)))),
    Arch("bloom_decoder", "transformer", "transformers", _hf(
        "BloomConfig", "BloomModel", call={"use_cache": False}, vocab_size=1000, hidden_size=128, n_layer=2,
        n_head=4)),
    Arch("opt_decoder", "transformer", "transformers", _hf(
        "OPTConfig", "OPTModel", call={"use_cache": False}, vocab_size=1000, hidden_size=128, num_hidden_layers=2,
        ffn_dim=512, num_attention_heads=4, word_embed_proj_dim=128, max_position_embeddings=128)),
    Arch("moe_mlp", "mixture of experts", "custom", _custom(MoE, x=_randn(64, 128))),
    Arch("selective_scan", "state space", "custom", _custom(SelectiveScan, x=_randn(1, 32, 64))),
    Arch("nerf_mlp", "neural field", "custom", _custom(NeRF, points=_randn(4096, 3))),
    Arch("knn_points", "point cloud", "custom", _custom(KNNPoints, pts=_randn(512, 3))),
    *(
        Arch(f"timm_{name}", family, "timm", _timm(name, shape))
        for name, family, shape in (
            ("convnextv2_atto", "cnn", IMAGE),
            ("ecaresnet26t", "cnn", IMAGE),
            ("sequencer2d_s", "recurrent", IMAGE),
            ("mvitv2_tiny", "vision transformer", IMAGE),
            ("eva02_tiny_patch14_224", "vision transformer", IMAGE),
            ("coat_lite_tiny", "vision transformer", IMAGE),
            ("gmlp_ti16_224", "mlp", IMAGE),
            ("botnet26t_256", "cnn", (1, 3, 256, 256)),
            ("halonet26t", "cnn", (1, 3, 256, 256)),
            ("tiny_vit_5m_224", "vision transformer", IMAGE),
            ("efficientvit_m0", "vision transformer", IMAGE),
            ("gcvit_xxtiny", "vision transformer", IMAGE),
            ("res2net50_14w_8s", "cnn", IMAGE),
            ("dpn68", "cnn", IMAGE),
            ("cait_xxs24_224", "vision transformer", IMAGE),
            ("crossvit_tiny_240", "vision transformer", (1, 3, 240, 240)),
        )
    ),
)
