"""Granite 4.0 (granitemoehybrid): Mamba-2 state shapes, the hybrid page alignment vLLM logs for it, and
the weights estimate against a real vLLM log. Configs: tests/data/vllm-budget/configs/granite-4.0-*.json
(provenance in tests/data/vllm-budget/README.md)."""

from __future__ import annotations

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.sources.resolve import resolve

GIB = 1 << 30
CONFIGS = "tests/data/vllm-budget/configs/"


def _pool(run_json, name: str, *args: str) -> dict:
    return run_json("size", CONFIGS + name, *args)


def test_h_small_block_size_and_mamba_padding_as_vllm_logs_them(run_json) -> None:
    """A public start of ibm-granite/granite-4.0-h-small (vLLM 0.11.1 dev build; search-index file 57002958791,
    an AMD issue report) logs "Setting attention block size to 528 tokens" and "Padding mamba page size by 0.69%".
    By hand: Mamba-2 page = conv 3 x (8192 + 2 x 1 x 128) x 2 B + SSM 8192 x 128 x 2 B = 50,688 + 2,097,152
    = 2,147,840 B; attention 8 KV heads x 128 x 2 (K, V) x 2 B = 4096 B per token; 2,147,840 / 4096 = 524.4,
    up to a multiple of 16: 528; padding (528 x 4096 - 2,147,840) / 2,147,840 = 0.691 %."""
    d = _pool(run_json, "granite-4.0-h-small.json", "--kv-cache-memory", "10GiB", "--max-model-len", "8192",
              "--vllm-version", "0.11.0")
    assert d["block_size"] == 528
    assert d["state_bytes_per_request"] == 36 * 2_147_840
    # 36 mamba + 4 attention layers -> groups of 4 layers sharing one 528 x 4096 B page
    assert d["pool"]["bytes_per_block"] == 4 * 528 * 4096


def test_h_micro_state_per_rank() -> None:
    """granite-4.0-h-micro (hidden 2048, 64 Mamba heads of 64, state 128, one group, conv 4): per Mamba layer
    conv 3 x (4096 + 256) x 2 B + SSM 64 x 64 x 128 x 2 B = 26,112 + 1,048,576 B at TP 1. At TP 2 the
    inner channels and heads split but the single B/C group is repeated on every rank (vLLM's
    extra_groups_for_head_shards): 3 x (2048 + 256) x 2 + 32 x 64 x 128 x 2 = 13,824 + 524,288 B."""
    from kvcalc.core.dtypes import KV_DTYPES
    from kvcalc.core.footprint import CacheSettings, layer_spec

    spec = resolve(CONFIGS + "granite-4.0-h-micro.json").spec
    mamba = next(layer for layer in spec.layers if layer.kind == "mamba")
    assert sum(1 for layer in spec.layers if layer.kind == "mamba") == 36
    cache = CacheSettings(kv_dtype=KV_DTYPES["bfloat16"], block_size=16)
    assert layer_spec(mamba, 1, cache).page_size_bytes == 26_112 + 1_048_576
    assert layer_spec(mamba, 2, cache).page_size_bytes == 13_824 + 524_288


def test_h_micro_weights_hand_count() -> None:
    """Parameters by hand (no RoPE: position_embedding_type nope). Mamba-2 mixer: in_proj 2048 x (4096 + 4352
    + 64) = 17,432,576, conv1d 4352 x 4 + bias 4352, A/D/dt_bias 3 x 64, gated norm 4096, out_proj 4096 x 2048
    = 8,388,608: 25,847,232. Shared MLP 3 x 2048 x 8192 = 50,331,648. Attention q, o 2048 x 2048 and k, v
    2048 x 512: 10,485,760. Tied embedding 100352 x 2048 = 205,520,896. 36 x (mixer + MLP) + 4 x (attention
    + MLP) + embedding = 3,191,230,208, plus the layers' RMSNorm vectors (at most 81 x 2048)."""
    spec = resolve(CONFIGS + "granite-4.0-h-micro.json").spec
    v, _ = predict(spec, Settings().with_(gpu="H100-80GB", vllm_version="0.11.0", max_model_len=8192))
    hand = 36 * (25_847_232 + 50_331_648) + 4 * (10_485_760 + 50_331_648) + 205_520_896
    assert hand == 3_191_230_208
    assert 0 <= v["weights"] - 2 * hand <= 2 * 81 * 2048


def test_micro_weights_against_the_l40s_log() -> None:
    """ibm-granite/granite-4.0-micro (all 40 layers attention, RoPE), online FP8 on an L40S, vLLM 0.11.0:
    "Model loading took 3.4244 GiB" (IBM/CodeEngine serverless-fleets inferencing README, commit a8ebfa6;
    tests/data/vllm-budget/ibm-codeengine-granite4micro-l40s-v0110.log). The FP8 linear layers are 1 B per
    parameter; embedding (tied) and the RoPE table stay bf16."""
    spec = resolve(CONFIGS + "granite-4.0-micro.json").spec
    v, _ = predict(spec, Settings().with_(gpu="L40S", vllm_version="0.11.0", quantization="fp8", max_model_len=131072,
                                          gpu_memory_utilization=0.9))
    assert abs(v["weights"] / GIB - 3.4244) < 0.001
