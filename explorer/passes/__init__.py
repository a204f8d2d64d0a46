"""Relax pass pipelines and the snapshots taken after every pass."""

from explorer.passes.catalog import PASS_CATALOG, PassSpec, make_pass
from explorer.passes.pipelines import PIPELINES, PipelineSpec, get_pipeline, resolve_passes
from explorer.passes.runner import PipelineRun, run_pipeline
from explorer.passes.snapshot import ModuleCounts, Snapshot

__all__ = [
    "PASS_CATALOG",
    "PIPELINES",
    "ModuleCounts",
    "PassSpec",
    "PipelineRun",
    "PipelineSpec",
    "Snapshot",
    "get_pipeline",
    "make_pass",
    "resolve_passes",
    "run_pipeline",
]
