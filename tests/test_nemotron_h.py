"""NVIDIA's NemotronH (Nemotron-3-Nano-30B-A3B): a Mamba-2 / attention / MoE hybrid with one block per layer named by
hybrid_override_pattern (kvcalc.sources.nemotron_h). Three public Kaggle starts (tests/data/vllm-budget/set46-nemo-*.log,
sources in their first lines) check the pool to the token; every figure below is worked out by hand from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.core.plan import ParallelPlan
from kvcalc.core.weights import estimate_weights
from kvcalc.errors import ConfigError
from kvcalc.sources.config import spec_from_config

DATA = Path(__file__).parent / "data" / "vllm-budget"
CONFIG = DATA / "configs" / "nemotron-3-nano-30b-a3b-bf16.json"
GIB = 1 << 30
PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def test_the_pattern_names_each_layers_block() -> None:
    spec = spec_from_config(json.loads(CONFIG.read_text()), name="nano", source="test")
    assert spec.arch["hybrid_override_pattern"] == PATTERN and spec.num_layers == 52
    # 23 Mamba-2 mixers and 6 attention layers hold cache; the 23 MoE blocks hold none
    assert [x.layer for x in spec.layers if x.kind == "full"] == [i for i, c in enumerate(PATTERN) if c == "*"]
    assert sum(x.kind == "mamba" for x in spec.layers) == 23 and len(spec.layers) == 29
    bad = dict(json.loads(CONFIG.read_text()), hybrid_override_pattern="MEX")
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        spec_from_config(bad, name="bad", source="test")


@pytest.mark.parametrize("log,version,gib,tokens", [
    ("set46-nemo-hastws-rtxpro6000-v0.17.1-lora32-8k-u0.85.log", "0.17.1", "10.65", 372_096),
    ("set46-nemo-renta-rtxpro6000-v0.17.1-lora32-8k-u0.85-replicate.log", "0.17.1", "11.94", 415_616),
    ("set46-nemo-hastws-rtxpro6000-v0.18.0-lora32-8k-u0.85-cgprof.log", "0.18.0", "11.67", 406_912),
])
def test_the_pool_of_three_kaggle_starts(run_json, log, version, gib, tokens) -> None:
    # By hand, prefix caching on (Mamba cache mode 'all'): an attention layer's token is 2 x 2 KV heads x 128 x 2 B =
    # 1024 B; a Mamba-2 page holds the conv state 3 x (64 x 64 + 2 x 8 x 128) x 2 B and the SSM state 64 x 64 x 128
    # x 4 B (the config's mamba_ssm_cache_dtype float32, which vLLM takes from 0.13) = 2,134,016 B; 'all' aligns the
    # block to the 128-token chunk: 128 x cdiv(cdiv(2,134,016, 1024), 128) = 2176 tokens ("Setting attention block
    # size to 2176 tokens"), the Mamba page padded to 2176 x 1024 B. 23 Mamba layers in groups of 6 (the 6 attention
    # layers) make 4 groups and "Add 1 padding layers"; a block holds 6 pages; 5 groups share the blocks.
    text = (DATA / log).read_text()
    assert "Setting attention block size to 2176 tokens" in text and "Add 1 padding layers" in text
    assert f"Available KV cache memory: {gib} GiB" in text and f"GPU KV cache size: {tokens:,} tokens" in text
    page = 2176 * 1024
    assert 3 * (64 * 64 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4 == 2_134_016 < page
    blocks = int(float(gib) * GIB) // (6 * page)
    assert blocks // 5 * 2176 == tokens
    # kvcalc's probe of the log: the same count, to the token (the 0.18.0 log's "Overriding num_gpu_blocks=0 with
    # num_gpu_blocks_override=128" is the CUDA-graph profiling's own minimal cache, not a setting to apply)
    if version == "0.18.0":
        assert "Overriding num_gpu_blocks=0 with num_gpu_blocks_override=128" in text
    report = run_json("probe", str(CONFIG), "--from-vllm-log", str(DATA / log), "--vllm-version", version)
    size = next(m for m in report["checks"][0]["measurements"] if m["what"] == "GPU KV cache size")
    assert size["measured"] == tokens and size["verdict"] == "agree" and size["predicted_max"] == tokens


def test_the_weights_of_nemotron_3_nano() -> None:
    # By hand from the config: a Mamba-2 block's in_proj 2688 -> 2 x 4096 + 2 x 8 x 128 + 64, conv1d 6144 x 4 and its
    # bias, A, D and dt_bias (64 each), the gated norm 4096, out_proj 4096 -> 2688; an attention block's q and o
    # 2688 x 32 x 128, k and v 2688 x 2 x 128; a MoE block's router 2688 x 128, the shared expert's up and down
    # 2688 x 3712, 128 experts' up and down 2688 x 1856 (non-gated); untied embedding and LM head 131072 x 2688
    mamba = 2688 * 10304 + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * 2688
    attention = 2 * 2688 * 32 * 128 + 2 * 2688 * 2 * 128
    moe = 2688 * 128 + 2 * 2688 * 3712 + 128 * 2 * 2688 * 1856
    by_hand = 23 * mamba + 6 * attention + 23 * moe + 2 * 131072 * 2688
    spec = spec_from_config(json.loads(CONFIG.read_text()), name="nano", source="test")
    est = estimate_weights(spec, ParallelPlan(tp=1))
    assert 0 <= est.parameters - by_hand <= 2 * 52 * 2688  # kvcalc also counts two norm vectors a layer
    # bf16, no RoPE table (NemotronH's attention has none); the logs' "Model loading took 60.64 GiB" also holds LoRA's
    # stacked adapters for the MoE experts, which kvcalc does not model
    assert 0 <= est.bytes_per_stage[0] - 2 * by_hand <= 2 * (2 * 52 + 1) * 2688  # and the final norm
