"""kvcalc.core.fast gives exactly footprint()'s per-rank figures, and the same errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstrategies import caches, models, plans, traffics

from kvcalc.core.fast import fast_footprint, summarize, traffic_pairs
from kvcalc.core.footprint import CacheSettings, Traffic, footprint, resolve_kv_dtype
from kvcalc.core.plan import ParallelPlan
from kvcalc.errors import PlanError
from kvcalc.sources.config import spec_from_config
from kvcalc.sources.presets import all_presets


def _reference(model, plan, cache, traffic):
    try:
        fp = footprint(model, plan, cache, traffic)
    except PlanError:
        return "PlanError"
    return (fp.bytes_per_token_per_rank, fp.effective_bytes_per_rank, fp.block_rounded_bytes_per_rank)


def _fast(summary, plan, cache, traffic):
    try:
        return fast_footprint(summary, plan, cache, traffic_pairs(traffic.requests))
    except PlanError:
        return "PlanError"


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fast_equals_footprint_on_random_models(data):
    model = data.draw(models(kinds=("full", "sliding", "chunked")))
    plan = data.draw(plans(model))
    cache = data.draw(caches(model))
    traffic = data.draw(traffics())
    summary = summarize(model)
    assert _fast(summary, plan, cache, traffic) == _reference(model, plan, cache, traffic)
    # a second call goes through the memoised TP / PP facts: still equal
    assert _fast(summary, plan, cache, traffic) == _reference(model, plan, cache, traffic)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_fast_equals_footprint_with_mamba_and_cross(data):
    model = data.draw(st.one_of(models(mamba=True, mla=False, cross=False), models(cross=True, mla=False, mamba=False)))
    plan = data.draw(plans(model))
    cache = data.draw(caches(model))
    traffic = data.draw(traffics())
    assert _fast(summarize(model), plan, cache, traffic) == _reference(model, plan, cache, traffic)


PRESETS = sorted(all_presets(include_user=False))


@pytest.mark.parametrize("name", PRESETS)
def test_fast_equals_footprint_on_presets(name):
    model = spec_from_config(all_presets(include_user=False)[name].load()["config"], name=name, source="")
    summary = summarize(model)
    traffic = Traffic((0, 1, 15, 16, 17, 4095, 4097, 40000))
    checked = 0
    for tp in (1, 2, 4, 8):
        for pp in (1, 3):
            for kv in ("auto", "fp8"):
                plan = ParallelPlan(tp=tp, pp=pp)
                cache = CacheSettings(kv_dtype=resolve_kv_dtype(kv, model), block_size=16)
                ref = _reference(model, plan, cache, traffic)
                assert _fast(summary, plan, cache, traffic) == ref, (tp, pp, kv)
                checked += ref != "PlanError"
    assert checked > 0  # at least TP 1 fits every preset


def test_traffic_pairs_groups_equal_lengths_and_rejects_bad_counts():
    assert traffic_pairs([5, 5, 0, 7, 5]) == ((5, 3), (0, 1), (7, 1))
    with pytest.raises(PlanError):
        traffic_pairs([3, -1])


def test_hand_computed_example():
    # qwen3-0.6b: 28 full layers, 8 KV heads of 128 (K and V), bf16: 28 * 2 * 8 * 128 * 2 = 114688 B/token.
    # TP 2 x PP 2: 14 layers and 4 heads per rank -> 14 * 2 * 4 * 128 * 2 = 28672 B/token per rank.
    # 2 requests of 100 tokens at block 16: effective 200 tokens; rounded 2 * ceil(100/16) * 16 = 224 tokens.
    model = spec_from_config(all_presets()["qwen3-0.6b"].load()["config"], name="qwen3-0.6b", source="")
    cache = CacheSettings(kv_dtype=resolve_kv_dtype("auto", model), block_size=16)
    got = fast_footprint(summarize(model), ParallelPlan(tp=2, pp=2), cache, ((100, 2),))
    assert got == (28672, 28672 * 200, 28672 * 224)
