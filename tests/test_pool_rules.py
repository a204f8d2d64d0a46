"""The pools' custom MetaSchedule rules are registered under the keys of every registered target
kind, read from the target registry (no list of keys of their own)."""

from __future__ import annotations

import pytest
import tvm_ffi

from explorer.target import parse_target
from explorer.target.kinds import target_kinds
from search.pool_rules import POOL_RULES, register_pool_rules


@pytest.mark.parametrize("spec", ["cpu:znver3", "cpu:sapphirerapids", "aarch64",
                                  *(c for k in target_kinds() for c in k.choices)])
def test_every_kinds_targets_find_the_pool_rules_under_one_of_their_keys(spec):
    register_pool_rules()
    keys = list(parse_target(spec).tvm().keys)
    for rule in POOL_RULES:  # MetaSchedule's ApplyCustomRule tries the target's keys in order
        assert any(tvm_ffi.get_global_func(f"s_tir.meta_schedule.{key}.meta_schedule.{rule}", allow_missing=True)
                   for key in keys), (spec, keys, rule)
