"""Hugging Face optimum's ONNX export (``optimum.exporters.onnx.main_export``, from the
``optimum-onnx`` package) of tiny transformers with random weights: a BERT encoder
(``feature-extraction``: dynamic batch and sequence length) and a GPT-2 decoder with past key
values (``text-generation-with-past``: ``past_key_values.N.key/value`` inputs and ``present.N``
outputs, dynamic past and new sequence lengths).

optimum-onnx 0.1.0 pins ``optimum~=2.1`` and ``transformers<4.58``, so it runs in its own builder
venv (torch the CPU build beside pip's find-links). The configs are tiny (2 layers, hidden 64) and
saved locally: nothing is downloaded at run time.

Run: ``python -m benchmarks.exporters.optimum_hf OUTDIR`` (prints the entries as JSON).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.exporters import Model, build_each, main

EXPORTER = "optimum"
REQUIREMENTS: tuple[str, ...] = ("torch==2.13.0+cpu", "optimum-onnx==0.1.0", "optimum==2.1.0",
                                 "transformers>=4.36,<4.58", "onnx", "onnxruntime", "onnxscript")
SEED = 0
LAYERS = 2
HEADS = 4
HIDDEN = 64
PAST = 7  # past sequence length the --shapes string fixes for the decoder
NEW = 1  # new tokens per decoder step


def _export(config, model_class: str, task: str, path: Path) -> None:
    import torch
    import transformers
    from optimum.exporters.onnx import main_export

    torch.manual_seed(SEED)
    with tempfile.TemporaryDirectory(prefix="schedx-optimum-") as tmp:
        src, out = Path(tmp) / "model", Path(tmp) / "onnx"
        getattr(transformers, model_class)(config).eval().save_pretrained(src)
        main_export(str(src), output=str(out), task=task, no_post_process=False, do_validation=False,
                    library_name="transformers")
        shutil.copyfile(out / "model.onnx", path)


def bert(path: Path) -> None:
    from transformers import BertConfig

    config = BertConfig(vocab_size=512, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=4 * HIDDEN, max_position_embeddings=128)
    _export(config, "BertModel", "feature-extraction", path)


def gpt2(path: Path) -> None:
    from transformers import GPT2Config

    config = GPT2Config(vocab_size=512, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=128)
    _export(config, "GPT2LMHeadModel", "text-generation-with-past", path)


def gpt2_shapes() -> str:
    head = HIDDEN // HEADS
    past = ",".join(f"past_key_values.{i}.{kv}:1x{HEADS}x{PAST}x{head}" for i in range(LAYERS) for kv in ("key", "value"))
    return f"input_ids:1x{NEW},attention_mask:1x{PAST + NEW},position_ids:1x{NEW},{past}"


def models() -> list[Model]:
    return [
        Model("optimum_bert_encoder", bert, "input_ids:1x16,attention_mask:1x16,token_type_ids:1x16",
              f"optimum main_export feature-extraction: tiny BERT ({LAYERS} layers, hidden {HIDDEN}), dynamic batch "
              "and sequence"),
        Model("optimum_gpt2_with_past", gpt2, gpt2_shapes(),
              f"optimum main_export text-generation-with-past: tiny GPT-2 ({LAYERS} layers, hidden {HIDDEN}), "
              f"past key values as inputs, one new token after {PAST} past"),
    ]


def build(outdir: Path) -> list[dict]:
    return build_each(outdir, EXPORTER, models())


if __name__ == "__main__":
    sys.exit(main(build))
