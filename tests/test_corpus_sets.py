"""The benchmark model sets: the corpus (``benchmarks/corpus``) and the held-out models
(``benchmarks/outside``), built and run by the same commands with ``--set``."""

from __future__ import annotations

import json

from benchmarks.corpus.build import architectures, corpus_dir, manifest_path


def test_the_held_out_models_are_named_apart_from_the_corpus_and_listed_in_their_manifest():
    corpus = [a.name for a in architectures("corpus")]
    outside = [a.name for a in architectures("outside")]
    assert len(set(corpus)) == len(corpus) and len(set(outside)) == len(outside)
    assert not set(corpus) & set(outside)
    for which, names in (("corpus", corpus), ("outside", outside)):
        listed = [m["name"] for m in json.loads(manifest_path(which).read_text())["models"]]
        assert listed == names, which  # the manifest is what the build wrote, in the same order
    assert corpus_dir(None, "outside").name == "outside" and corpus_dir("/x", "outside").as_posix() == "/x"
