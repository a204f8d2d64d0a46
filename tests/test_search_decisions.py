"""The Search page's decisions view (search/decisions.py), on traces written as MetaSchedule and
the default rules write them: the default's own tiles beside a winner's, differences marked,
variants of the default named (issue 52: the winner showed "None" everywhere, labelled "search",
though its record said "default rules, tile ranked 4")."""

from __future__ import annotations

from search.charts import batch_groups
from search.decisions import NOT_CHOSEN, decision_view, trace_choices
from store import Record

# The default rules on a 64x64x64 matmul: the block found by position, two loops split by fixed
# factors, the inner row tile unrolled; no sampling at all.
DEFAULT = [[
    ["GetSBlock", [], ["root", "main"], ["b0"]],
    ["GetChildBlocks", ["b0"], [], ["b1"]],
    ["CacheWrite", ["b1", []], [0, "global"], ["b2"]],
    ["GetLoops", ["b1"], [], ["l3", "l4", "l5"]],
    ["Split", ["l4", "None", 64], [True, False], ["l6", "l7"]],
    ["Split", ["l3", "None", 4], [True, False], ["l8", "l9"]],
    ["Reorder", ["l8", "l6", "l5", "l9", "l7"], [], []],
    ["Fuse", ["l8", "l6"], [1], ["l10"]],
    ["Parallel", ["l10"], [], []],
    ["Vectorize", ["l7"], [], []],
    ["Unroll", ["l9"], [], []],
], []]


def _variant(tile: int):
    """The default rules with another register tile (a variant: fixed factors too)."""
    insts = [list(i) for i in DEFAULT[0]]
    insts[5] = ["Split", ["l3", "None", tile], [True, False], ["l8", "l9"]]
    return [insts, []]


# MetaSchedule: the block by name, each loop's tile sampled, the unroll depth a categorical
# choice; after EnterPostproc, what post-processing did (not a decision)
SKETCH = [[
    ["GetSBlock", [], ["C", "main"], ["b0"]],
    ["GetSBlock", [], ["root", "main"], ["b1"]],
    ["GetLoops", ["b0"], [], ["l2", "l3", "l4"]],
    ["SamplePerfectTile", ["l2"], [4, 64], ["v5", "v6", "v7", "v8"]],
    ["Split", ["l2", "v5", "v6", "v7", "v8"], [True, False], ["l9", "l10", "l11", "l12"]],
    ["SamplePerfectTile", ["l3"], [4, 64], ["v13", "v14", "v15", "v16"]],
    ["Split", ["l3", "v13", "v14", "v15", "v16"], [True, False], ["l17", "l18", "l19", "l20"]],
    ["SamplePerfectTile", ["l4"], [2, 64], ["v21", "v22"]],
    ["Split", ["l4", "v21", "v22"], [True, False], ["l23", "l24"]],
    ["SampleCategorical", [], [[0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25]], ["v26"]],
    ["Annotate", ["b1", "v26"], ["meta_schedule.unroll_explicit"], []],
    ["EnterPostproc", [], [], []],
    ["GetLoops", ["b0"], [], ["l30", "l31"]],
    ["Split", ["l31", "None", 64], [True, False], ["l32", "l33"]],
], [[3, [2, 2, 16, 1]], [5, [16, 2, 1, 2]], [7, [64, 1]], [9, 3]]]


def _record(rid: int, source: str, gflops: float, trace, **environment) -> Record:
    return Record(workload_key="w", target='{"kind": "llvm"}', hardware="h", source=source, status="ok", steps=[],
                  trace=trace, latencies=[1e-3], median_s=1e-3, gflops=gflops, environment=environment, id=rid)


def test_a_sketch_s_choices_are_its_sampled_tiles_and_unroll_depth_before_post_processing():
    choices, sampled = trace_choices(SKETCH)
    assert choices == {"tile loop 1": [2, 2, 16, 1], "tile loop 2": [16, 2, 1, 2], "tile loop 3": [64, 1],
                       "unroll": "up to 512 steps"}
    assert sampled == {"tile loop 1": [2, 2, 16, 1], "tile loop 2": [16, 2, 1, 2], "tile loop 3": [64, 1]}


def test_the_default_s_choices_are_its_fixed_splits_and_the_loop_it_unrolls():
    choices, sampled = trace_choices(DEFAULT)
    assert choices == {"tile loop 1": [None, 4], "tile loop 2": [None, 64], "unroll": "whole loop 1.2"}
    assert sampled == {}  # nothing sampled: the extents are not known from it


def test_the_view_puts_the_default_first_names_variants_and_marks_what_differs():
    records = [_record(1, "default", 10.0, DEFAULT),
               _record(2, "search", 10.4, _variant(8), default_variant="default rules, tile ranked 4"),
               _record(3, "search", 12.0, SKETCH),
               _record(4, "search", 12.0, SKETCH),  # the same schedule timed again: shown once
               _record(5, "search", 1.0, [SKETCH[0], [[3, [1, 1, 1, 64]], [5, [64, 1, 1, 1]], [7, [1, 64]], [9, 0]]])]
    view = decision_view(records)
    assert [s.name for s in view.schedules] == ["default", "MetaSchedule sketch", "default rules, tile ranked 4",
                                                "MetaSchedule sketch"]
    assert [s.record_id for s in view.schedules] == [1, 3, 2, 5] and view.has_default
    assert [s.vs_default for s in view.schedules] == [1.0, 1.2, 1.04, 0.1]
    assert view.names == ("tile loop 1", "tile loop 2", "tile loop 3", "unroll")
    # the default's inferred factor is worked out from the loop's extent the sketches sampled (64)
    assert view.value(0, "tile loop 1") == "[16, 4]" and view.value(0, "tile loop 2") == "[1, 64]"
    assert view.value(0, "tile loop 3") == NOT_CHOSEN  # the default leaves the reduction whole
    variant = 2
    assert view.value(variant, "tile loop 1") == "[8, 8]"
    assert view.differences(variant) == ["tile loop 1"]  # the variant changed one choice: the row tile
    assert view.differences(1) == ["tile loop 1", "tile loop 2", "tile loop 3", "unroll"]
    assert view.value(3, "unroll") == "none"
    assert not any(view.differs(0, n) for n in view.names)  # the default is the baseline


def test_without_a_timed_default_nothing_is_marked_and_at_most_k_schedules_show():
    records = [_record(i, "search", float(i), [SKETCH[0], [[3, [i, 1, 1, 64 // i]], [5, [64, 1, 1, 1]],
                                                             [7, [1, 64]], [9, 0]]]) for i in (1, 2, 4, 8, 16, 32)]
    view = decision_view(records, k=3)
    assert not view.has_default and [s.record_id for s in view.schedules] == [32, 16, 8]
    assert all(s.vs_default is None for s in view.schedules)
    assert not any(view.differs(n, name) for n in range(3) for name in view.names)
    assert decision_view([]).schedules == ()


def test_batches_are_categories_grouped_when_there_are_many():
    points = [(0.1 * b, float(b), b) for b in range(1, 4) for _ in range(2)]
    groups = batch_groups(points)
    assert [label for label, _ in groups] == ["batch 1", "batch 2", "batch 3"]
    assert groups[0][1] == [(0.1, 1.0), (0.1, 1.0)]
    many = batch_groups([(0.0, 1.0, b) for b in range(1, 21)], most=8)
    assert len(many) <= 8 and many[0][0] == "batches 1-3" and many[-1][0] == "batches 19-20"
    assert sum(len(p) for _, p in many) == 20 and batch_groups([]) == []
