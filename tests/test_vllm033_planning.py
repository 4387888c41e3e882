"""kvcalc's pool against vectors computed by vLLM 0.33.0's own planning code (issue 13).

tests/data/vllm033-planning-vectors.json was generated OFFLINE by scripts/vllm033_vectors.py,
which runs the vllm==0.33.0 wheel's get_global_kv_cache_groups, get_kv_cache_configs (fit
check with the null block, its refusal text and estimated length),
get_max_concurrency_for_kv_cache_config and _estimate_max_model_len_from_groups on CPU torch,
for random presets, TP 1-8 (TP > KV heads included), PP 1-4, block 16-128, bf16/fp8 KV, 1 B to
80 GiB per worker, max_num_batched_tokens 512-8192 with pp + 1 batches in flight. The per-layer
specs handed to vLLM come from kvcalc's per-layer shapes, so this checks the planning: groups,
bytes per block, blocks, concurrency, token figure, fit, estimated length, refusals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.app.service import cache_settings, default_block_size, plan
from kvcalc.app.settings import Settings
from kvcalc.core.footprint import stage_specs
from kvcalc.core.pool import engine_cache, plan_pool
from kvcalc.core.specs import MambaSpec
from kvcalc.errors import PlanError
from kvcalc.sources.resolve import resolve

DATA = json.loads((Path(__file__).parent / "data" / "vllm033-planning-vectors.json").read_text())
CASES = DATA["cases"]


def test_vectors_have_provenance_and_breadth():
    assert "vLLM 0.33.0's own planning code" in DATA["provenance"]
    assert len(CASES) >= 300
    assert {c["inputs"]["tp"] for c in CASES} == {1, 2, 4, 8} and {c["inputs"]["pp"] for c in CASES} == {1, 2, 3, 4}
    assert {c["inputs"]["kv_dtype"] for c in CASES} == {"auto", "fp8"}
    assert any("refused" in c["vllm"] for c in CASES) and any("refused" not in c["vllm"] for c in CASES)
    assert any(c["inputs"]["disable_hybrid_kv_cache_manager"] for c in CASES)
    assert any(c["inputs"]["num_gpu_blocks_override"] for c in CASES)


def _kvcalc(i: dict):
    model = resolve(i["preset"]).spec
    # the vectors hand vLLM mamba_cache_mode "none" (scripts/vllm033_vectors.py): prefix caching off
    s = Settings(tp=i["tp"], pp=i["pp"], kv_dtype=i["kv_dtype"], block_size=i["block_size"],  # type: ignore[call-arg]
                 enable_prefix_caching=False)
    cache = cache_settings(model, s, block_size=default_block_size(model, s))
    p = plan(s)
    cache, pad, _ = engine_cache(model, p, cache)
    workers = [
        {(layer.layer, layer.kind): (spec.with_padding(pad) if pad and isinstance(spec, MambaSpec) else spec)
         for layer, spec in st.specs}
        for st in stage_specs(model, p, cache)
    ]
    return plan_pool(
        workers, i["available"], max_model_len=i["max_model_len"],
        in_flight=i["max_concurrent_batches"] * i["max_num_batched_tokens"],
        encoder_input_tokens=i["max_num_batched_tokens"] if model.encoder_decoder else 0,
        disable_hybrid=i["disable_hybrid_kv_cache_manager"], num_gpu_blocks_override=i["num_gpu_blocks_override"],
    )


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{c['inputs']['preset']}" for n, c in enumerate(CASES)])
def test_kvcalc_agrees_with_vllm_033(case):
    i, v = case["inputs"], case["vllm"]
    try:
        got = _kvcalc(i)
    except PlanError as exc:  # kvcalc refuses the settings up front, quoting vLLM's exception
        assert "refused" in v and f"'{v['refused']}'" in str(exc)
        return
    if "refused" in v:  # vLLM's start-up refusal, word for word
        assert got.error == v["refused"]
        return
    assert got.error is None
    assert len(got.groups) == v["num_groups"]
    assert [w.bytes_per_block for w in got.workers] == v["bytes_per_block"]
    assert got.num_blocks == v["num_blocks"]
    assert got.max_concurrency == pytest.approx(v["max_concurrency"], rel=0, abs=1e-9)
    assert got.kv_cache_size_tokens == v["kv_cache_size_tokens"]
    assert got.estimated_max_model_len == v["estimated_max_model_len"]
