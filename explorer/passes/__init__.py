"""Relax pass pipelines and the snapshots taken after every pass. Names load on first use
(:func:`store.lazy.lazy_names`): importing one pass module (a kernel's vocabulary that a default
schedule reads, say) does not import the catalog and every pass, which import those schedules."""

from store.lazy import lazy_names

__getattr__ = lazy_names(__name__, {"PASS_CATALOG": "catalog", "PassSpec": "catalog", "make_pass": "catalog",
                                    "PIPELINES": "pipelines", "PipelineSpec": "pipelines",
                                    "get_pipeline": "pipelines", "resolve_passes": "pipelines",
                                    "PipelineRun": "runner", "run_pipeline": "runner",
                                    "ModuleCounts": "snapshot", "Snapshot": "snapshot"})

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
