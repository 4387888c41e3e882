"""LoRA's stacked adapter buffers in the weights term (core.lora; vLLM 0.13-0.33 shapes), by hand."""

from __future__ import annotations

import json

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.sources.resolve import resolve

# Qwen3-8B on two T4s in fp16 (the exact-qwen3-8b-lora runs of tests/data/vllm-budget): hidden 4096, 32 query
# heads and 8 KV heads of 128, intermediate 12288, vocab 151936, 36 layers; TP 2, vLLM defaults 1 LoRA of rank 16
T4 = dict(gpu="T4", vllm_version="0.22.1", tp=2, gpu_memory_utilization=0.85, max_model_len=4096, max_num_seqs=1,
          dtype="float16", enforce_eager=True)
R = 16
QKV = 3 * R * 4096 + (2048 + 512 + 512) * R  # A: one per q/k/v slice over the whole input; B: this rank's outputs
O_PROJ = R * 2048 + 4096 * R  # row-parallel: input split, output whole
GATE_UP = 2 * R * 4096 + 2 * 6144 * R
DOWN = R * 6144 + 4096 * R
EMBED = 151936 * R + 4096 * R  # whole vocabulary on every rank
HEAD = R * 4096 + 151936 * R
QWEN3_8B_T4 = (36 * (QKV + O_PROJ + GATE_UP + DOWN) + EMBED + HEAD) * 2


def _weights(**kw) -> int:
    values, _ = predict(resolve("qwen3-8b").spec, Settings().with_(**T4, **kw))
    return values["weights"]


def test_stacks_by_hand():
    assert QWEN3_8B_T4 == 70_148_096
    assert _weights(enable_lora=True) - _weights() == QWEN3_8B_T4
    # the logs print "Model loading took 7.7 GiB" and "7.71 GiB": kvcalc 7.70 with the stacks, 7.64 without
    assert round(_weights(enable_lora=True) / (1 << 30), 2) == 7.70
    # four adapters of rank 64: sixteen times the elements
    assert _weights(enable_lora=True, max_loras=4, max_lora_rank=64) - _weights() == 16 * QWEN3_8B_T4


def _stage_weights(out: dict) -> list[int]:
    return [next(t["bytes"] for t in stage if t["term"].startswith("- weights")) for stage in out["pool"]["budget"]]


def test_pp_stages_split_the_stacks(run_json):
    base = ("qwen3-8b", "--gpu", "H100-80GB", "--tokens", "100", "--max-model-len", "4096")
    plain = _stage_weights(run_json("size", *base, "--pp", "2"))
    lora = _stage_weights(run_json("size", *base, "--pp", "2", "--enable-lora"))
    # TP 1, bf16: 18 layers per stage; the embedding's stacks on stage 0, the LM head's on stage 1
    layer = 3 * R * 4096 + (4096 + 1024 + 1024) * R + R * 4096 + 4096 * R + 2 * R * 4096 + 2 * 12288 * R + R * 12288 + 4096 * R
    assert lora[0] - plain[0] == (18 * layer + 151936 * R + 4096 * R) * 2
    assert lora[1] - plain[1] == (18 * layer + R * 4096 + 151936 * R) * 2


def test_bad_lora_flags(run):
    for args, flag in (
        (("--enable-lora", "--max-lora-rank", "24"), "--max-lora-rank"),
        (("--max-loras", "2"), "--enable-lora"),
    ):
        code, _, err = run("size", "qwen3-8b", "--gpu", "H100-80GB", "--tokens", "10", *args)
        assert code == 2 and flag in err and "Traceback" not in err, args


def test_moe_experts_take_stacks_from_0_11_1(run_json):
    # Qwen3-30B-A3B at TP 1, rank 16, one adapter, bf16, by hand: every one of its 48 layers is a MoE layer (no shared
    # expert): attention's q/k/v (32 x 128, 4 x 128 KV) and o, and FusedMoEWithLoRA's stacks for 128 experts of 768:
    # gate and up each A = 16 x 2048, B = 768 x 16; down A = 16 x 768, B = 2048 x 16; the embedding and LM head
    base = ("qwen3-30b-a3b", "--gpu", "H100-80GB", "--tokens", "100", "--max-model-len", "4096")
    attention = 3 * R * 2048 + (4096 + 2 * 512) * R + R * 4096 + 2048 * R
    routed = 128 * (2 * (R * 2048 + 768 * R) + R * 768 + 2048 * R)
    ends = 151936 * R + 2048 * R + R * 2048 + 151936 * R
    for version, experts in (("0.22.0", routed), ("0.11.0", 0)):  # no LoRA on routed experts before 0.11.1
        plain = _stage_weights(run_json("size", *base, "--vllm-version", version))
        lora = run_json("size", *base, "--vllm-version", version, "--enable-lora")
        assert _stage_weights(lora)[0] - plain[0] == (48 * (attention + experts) + ends) * 2
    assert "routed experts take no LoRA before 0.11.1" in json.dumps(lora)
    # MLA and state-space layers: a note, no figure
    mla = ("deepseek-v2-lite", "--gpu", "H100-80GB", "--tokens", "100", "--max-model-len", "4096")
    out = run_json("size", *mla, "--enable-lora")
    assert "LoRA stacks of this architecture" in json.dumps(out)
    assert _stage_weights(out) == _stage_weights(run_json("size", *mla))
