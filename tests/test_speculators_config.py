"""A speculators-format draft head (RedHatAI's *.speculator.eagle3, the speculators library's checkpoints): vLLM builds
its layer config from ``transformer_layer_config`` and lifts draft_vocab_size / target_hidden_size into it
(vllm==0.33.0: transformers_utils/configs/speculators/base.py:47-64, algos.py:30-50)."""

from __future__ import annotations

from pathlib import Path

from kvcalc.sources.resolve import resolve

CONFIGS = Path(__file__).parent / "data" / "vllm-budget" / "configs"


def test_the_nested_layer_config_is_the_heads():
    # the published config (dishantghai/ai-perf-hw3-spec-decode-quant @d1c3b59): one llama layer of 32 heads, 8 KV heads
    # x 128, hidden 4096, intermediate 12288; the compressed-vocab head's 32,000-row LM head comes from the top level
    full = resolve(str(CONFIGS / "eagle3-qwen3-8b-dishantghai.json")).spec
    small = resolve(str(CONFIGS / "eagle3-qwen3-8b-compressed-vocab-dishantghai.json")).spec
    for spec in (full, small):
        assert (spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (1, 32, 8, 128)
        assert spec.arch["intermediate_size"] == 12288 and spec.dtype == "bfloat16"
    assert (full.arch["draft_vocab_size"], small.arch["draft_vocab_size"]) == (151936, 32000)
