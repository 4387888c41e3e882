"""`kvcalc probe --model-cache` on the CPU: a transformers model built from the preset's
config (random weights, 2 layers) runs a prefill of P tokens and G-1 decode steps; its own
DynamicCache must hold exactly what kvcalc predicts for transformers.

Expected bytes are derived here from each model's config: per layer K and V are
[1, kv_heads, positions, head_dim] in the model dtype, positions = P + G - 1, a sliding
layer of window W keeps the last W - 1 positions (transformers 5.x
DynamicSlidingWindowLayer: ``full_key_states[:, :, -self.sliding_window + 1 :, :]``), and
DeepSeek MLA caches the latent (kv_lora_rank and qk_rope_head_dim) since transformers 5.15
(https://github.com/huggingface/transformers/pull/47761).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app

pytest.importorskip("torch")
pytest.importorskip("transformers")

APP = build_app(["probe"])


def probe_json(*args: str, code: int = 0) -> dict:
    result = CliRunner().invoke(APP, ["probe", *args, "--model-cache", "--device", "cpu", "--format", "json"])
    assert result.exit_code == code, result.stderr + result.stdout
    return json.loads(result.stdout)


def layers(report: dict) -> list[dict]:
    return report["checks"][0]["details"]["layers"]


def measured(report: dict) -> list[int]:
    return [m["measured"] for m in report["checks"][0]["measurements"] if "K+V" in m["what"]]


def test_gqa_qwen3():
    # Qwen3-0.6B: 8 KV heads of 128, bf16; P 40 + G 5 - 1 = 44 positions.
    # K+V per layer = 2 x 8 x 44 x 128 x 2 B = 180,224 B.
    r = probe_json("qwen3-0.6b", "--prompt", "40", "--gen", "5")
    assert r["verdict"] == "agree"
    assert measured(r) == [2 * 8 * 44 * 128 * 2] * 2 == [180_224, 180_224]
    assert [x["transformers"]["measured_k_shape"] for x in layers(r)] == [[1, 8, 44, 128]] * 2
    # vLLM, same request: cdiv(44, 16) = 3 blocks x 16 x 4,096 B = 196,608 B per layer
    assert [x["vllm"]["bytes"] for x in layers(r)] == [3 * 16 * 4096] * 2


def test_mqa_falcon():
    # Falcon-7B: multi_query -> 1 KV head of 64, float16; P 16 + G 3 - 1 = 18 positions.
    # K+V per layer = 2 x 1 x 18 x 64 x 2 B = 4,608 B.
    r = probe_json("falcon-7b", "--prompt", "16", "--gen", "3")
    assert r["verdict"] == "agree"
    assert measured(r) == [4_608, 4_608]
    assert layers(r)[0]["transformers"]["measured_v_shape"] == [1, 1, 18, 64]


def test_mha_phi3():
    # Phi-3-mini: 32 KV heads of 96, bf16; P 20 + G 3 - 1 = 22 positions (window 2047 not reached).
    # K+V per layer = 2 x 32 x 22 x 96 x 2 B = 270,336 B.
    r = probe_json("phi-3-mini-4k-instruct", "--prompt", "20", "--gen", "3")
    assert r["verdict"] == "agree"
    assert measured(r) == [270_336, 270_336]


def test_sliding_window_gemma3():
    # Gemma-3-1B layers 0 and 1 are sliding, window 512; 1 KV head of 256, bf16.
    # P 520 + G 4 - 1 = 523 positions > 511: the cache shows the last 511 positions,
    # 2 x 1 x 511 x 256 x 2 B = 523,264 B, a slice of the last step's tensor of 511 + 1 = 512
    # positions = 524,288 B.
    r = probe_json("gemma-3-1b", "--prompt", "520", "--gen", "4")
    assert r["verdict"] == "agree"
    assert measured(r) == [523_264, 523_264]
    held = [m["measured"] for m in r["checks"][0]["measurements"] if "storage held" in m["what"]]
    assert held == [524_288, 524_288]
    assert layers(r)[0]["transformers"]["measured_k_shape"] == [1, 1, 511, 256]
    # vLLM keeps whole blocks of the window: positions 11..522 span blocks 0..32, of which
    # block 0 (0..15) is still partly inside: 33 blocks x 16 x 1,024 B = 540,672 B
    assert layers(r)[0]["vllm"]["bytes"] == 33 * 16 * 1024


def test_mla_deepseek_v2_lite_latent():
    # DeepSeek-V2-Lite, transformers >= 5.15: keys [1, 1, T, 512], values [1, 1, T, 64], bf16.
    # P 30 + G 3 - 1 = 32 positions: (512 + 64) x 32 x 2 B = 36,864 B per layer, the same bytes
    # vLLM holds in 2 blocks of 16 x 576 x 2 B.
    import transformers

    from kvcalc.probe.env import version_tuple

    if version_tuple(transformers.__version__) < (5, 15):
        pytest.skip("transformers < 5.15 caches decompressed MLA K/V")
    r = probe_json("deepseek-v2-lite", "--prompt", "30", "--gen", "3")
    assert r["verdict"] == "agree"
    assert measured(r) == [36_864, 36_864]
    first = layers(r)[0]
    assert first["transformers"]["measured_k_shape"] == [1, 1, 32, 512]
    assert first["transformers"]["measured_v_shape"] == [1, 1, 32, 64]
    assert first["vllm"]["bytes"] == 2 * 16 * 576 * 2


def test_shrink_keeps_kv_shape_and_cuts_layer_lists():
    from kvcalc.probe.model_cache import shrink_config

    cfg = {
        "model_type": "gpt_oss",
        "num_hidden_layers": 4,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "quantization_config": {"quant_method": "mxfp4"},
    }
    out, _notes = shrink_config(cfg, 2)
    assert out["layer_types"] == ["sliding_attention", "full_attention"]
    assert (out["num_key_value_heads"], out["head_dim"]) == (8, 64)
    assert (out["num_local_experts"], out["num_experts_per_tok"], out["intermediate_size"]) == (4, 2, 64)
    assert "quantization_config" not in out and cfg["num_hidden_layers"] == 4


def test_mamba_models_cannot_run():
    result = CliRunner().invoke(APP, ["probe", "jamba-v0.1", "--model-cache", "--device", "cpu"])
    assert result.exit_code == 3 and "recurrent-state" in result.stderr


@pytest.mark.gpu
def test_cuda_model_cache():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    result = CliRunner().invoke(
        APP, ["probe", "qwen3-0.6b", "--model-cache", "--device", "cuda", "--prompt", "40", "--gen", "5", "--format", "json"]
    )
    assert result.exit_code == 0, result.stderr
    assert measured(json.loads(result.stdout)) == [180_224, 180_224]
