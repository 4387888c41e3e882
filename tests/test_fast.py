"""The cached, grouped path (``footprint()``: per-stage spec tables built once, equal layers
counted together) gives exactly the per-layer figures of a naive recomputation, and the
same errors; its caches change nothing when the same question is asked again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstrategies import caches, models, plans, traffics

from kvcalc.core.footprint import CacheSettings, Traffic, check_tp, footprint, layer_spec, resolve_kv_dtype
from kvcalc.core.plan import ParallelPlan, pp_ranges
from kvcalc.errors import PlanError
from kvcalc.sources.config import spec_from_config
from kvcalc.sources.presets import all_presets


def _naive(model, plan, cache, traffic):
    """Per layer, per request, no grouping and no cache: the largest rank's figures."""
    try:
        check_tp(model, plan.tp)
        ranges = pp_ranges(model.num_layers, plan.pp, plan.pp_layers)
        specs = [(layer.layer, layer_spec(layer, plan.tp, cache)) for layer in model.layers]
    except PlanError:
        return "PlanError"
    best = (0, 0, 0)
    for start, end in ranges:
        bpt = eff = rnd = 0
        for i, spec in specs:
            if not start <= i < end:
                continue
            bpt += 0 if spec.kind in ("cross", "mamba") else spec.bytes_per_token
            for t in traffic.requests:
                if spec.kind == "mamba":
                    eff += spec.state_bytes if t else 0
                    rnd += spec.state_bytes if t else 0
                else:
                    eff += spec.held_tokens(t) * spec.bytes_per_token
                    rnd += spec.held_blocks(t) * spec.block_size * spec.bytes_per_token
        best = tuple(max(a, b) for a, b in zip(best, (bpt, eff, rnd)))
    return best


def _product(model, plan, cache, traffic):
    try:
        fp = footprint(model, plan, cache, traffic)
    except PlanError:
        return "PlanError"
    ranks = (
        max((r.bytes_per_token for r in fp.ranks), default=0),
        max((r.effective_bytes for r in fp.ranks), default=0),
        max((r.block_rounded_bytes for r in fp.ranks), default=0),
    )
    got = (fp.bytes_per_token_per_rank, fp.effective_bytes_per_rank, fp.block_rounded_bytes_per_rank)
    assert got == ranks  # the per-stage figures and the per-rank records agree
    return got


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_grouped_path_equals_naive_on_random_models(data):
    model = data.draw(models(kinds=("full", "sliding", "chunked")))
    plan = data.draw(plans(model))
    cache = data.draw(caches(model))
    traffic = data.draw(traffics())
    assert _product(model, plan, cache, traffic) == _naive(model, plan, cache, traffic)
    # a second call goes through the cached per-stage tables: still equal
    assert _product(model, plan, cache, traffic) == _naive(model, plan, cache, traffic)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_grouped_path_equals_naive_with_mamba_and_cross(data):
    model = data.draw(st.one_of(models(mamba=True, mla=False, cross=False), models(cross=True, mla=False, mamba=False)))
    plan = data.draw(plans(model))
    cache = data.draw(caches(model))
    traffic = data.draw(traffics())
    assert _product(model, plan, cache, traffic) == _naive(model, plan, cache, traffic)


PRESETS = sorted(all_presets(include_user=False))


@pytest.mark.parametrize("name", PRESETS)
def test_grouped_path_equals_naive_on_presets(name):
    model = spec_from_config(all_presets(include_user=False)[name].load()["config"], name=name, source="")
    traffic = Traffic((0, 1, 15, 16, 17, 4095, 4097, 40000))
    checked = 0
    for tp in (1, 2, 4, 8):
        for pp in (1, 3):
            for kv in ("auto", "fp8"):
                plan = ParallelPlan(tp=tp, pp=pp)
                cache = CacheSettings(kv_dtype=resolve_kv_dtype(kv, model), block_size=16)
                ref = _naive(model, plan, cache, traffic)
                assert _product(model, plan, cache, traffic) == ref, (tp, pp, kv)
                checked += ref != "PlanError"
    assert checked > 0  # at least TP 1 fits every preset


def test_traffic_lengths_group_equal_lengths_and_bad_counts_are_rejected():
    assert Traffic((5, 5, 0, 7, 5)).lengths == ((5, 3), (0, 1), (7, 1))
    with pytest.raises(PlanError):
        Traffic((3, -1))


def test_hand_computed_example():
    # qwen3-0.6b: 28 full layers, 8 KV heads of 128 (K and V), bf16: 28 * 2 * 8 * 128 * 2 = 114688 B/token.
    # TP 2 x PP 2: 14 layers and 4 heads per rank -> 14 * 2 * 4 * 128 * 2 = 28672 B/token per rank.
    # 2 requests of 100 tokens at block 16: effective 200 tokens; rounded 2 * ceil(100/16) * 16 = 224 tokens.
    model = spec_from_config(all_presets()["qwen3-0.6b"].load()["config"], name="qwen3-0.6b", source="")
    cache = CacheSettings(kv_dtype=resolve_kv_dtype("auto", model), block_size=16)
    fp = footprint(model, ParallelPlan(tp=2, pp=2), cache, Traffic((100, 100)))
    got = (fp.bytes_per_token_per_rank, fp.effective_bytes_per_rank, fp.block_rounded_bytes_per_rank)
    assert got == (28672, 28672 * 200, 28672 * 224)
    assert len(fp.ranks) == 4 and {r.effective_bytes for r in fp.ranks} == {28672 * 200}
