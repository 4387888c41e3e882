"""The pool under each vLLM release line's rules (issue 13), every figure derived by hand from
docs/vllm-releases.md (the boundary and its citation named in each test)."""

from __future__ import annotations

import json
import math

import pytest

GIB = 1 << 30


def pool(run_json, *args):
    return run_json("size", *args)["pool"]


# gpt-oss-20b: 24 layers, 12 sliding (window 128) + 12 full, 8 KV heads x 64, bf16:
# page 16 x 8 x 128 x 2 B = 32768; two groups of 12 -> 12 x 32768 B per block
OSS = ("gpt-oss-20b", "--kv-cache-memory", "10GiB", "--max-model-len", "131072", "--max-num-batched-tokens", "8192")
OSS_BLOCKS = 10 * GIB // (12 * 32768)  # 27306
FULL = 131072 // 16


def test_token_figure_by_release(run_json):
    # 0.20.1-: int(concurrency x L) (vllm==0.20.1: kv_cache_utils.py:1706)
    sliding_1 = math.ceil((127 + 8192) / 16) + 1  # one batch in flight before 0.26.0
    new = pool(run_json, *OSS, "--vllm-version", "0.20.1")
    assert new["kv_cache_size_tokens"] == int(OSS_BLOCKS / (FULL + sliding_1) * 131072)
    # 0.11.0-0.20.0: blocks // groups x min block size (vllm==0.20.0: kv_cache_utils.py:1694)
    for release in ("0.20.0", "0.11.0", "0.10.1.1"):
        old = pool(run_json, *OSS, "--vllm-version", release)
        assert old["num_blocks"] == OSS_BLOCKS
        assert old["kv_cache_size_tokens"] == OSS_BLOCKS // 2 * 16, release
        assert old["max_concurrency"] == OSS_BLOCKS / (FULL + sliding_1)


def test_before_0_9_1_mixed_layers_are_all_full(run_json):
    # 0.8.3-0.9.0.1: sliding + full -> sliding promoted to full, one group of 24 layers
    # (vllm==0.8.3: kv_cache_utils.py:601-625); tokens blocks x 16, concurrency blocks x 16 / L
    p = pool(run_json, *OSS, "--vllm-version", "0.9.0")
    blocks = 10 * GIB // (24 * 32768)
    assert p["num_blocks"] == blocks and p["bytes_per_block"] == 24 * 32768
    assert p["kv_cache_size_tokens"] == blocks * 16
    assert p["max_concurrency"] == blocks * 16 / 131072
    assert [g["kind"] for g in p["groups"]] == ["full"]


def test_in_flight_batches_from_0_26(run_json):
    # 0.26.0-: the window reserves max_concurrent_batches (pp + 1 = 2) x mnbt (vllm==0.26.0: kv_interface.py:584)
    p = pool(run_json, *OSS, "--vllm-version", "0.26.0")
    assert p["blocks_per_request"] == FULL + math.ceil((127 + 2 * 8192) / 16) + 1
    assert pool(run_json, *OSS, "--vllm-version", "0.25.1")["blocks_per_request"] == FULL + math.ceil((127 + 8192) / 16) + 1


def test_sliding_layers_are_full_before_0_8_3(run_json):
    # mistral-7b-v0.1 (window 4096 on every layer): 0.8.0-0.8.2 had no SlidingWindowSpec
    args = ("mistral-7b-v0.1", "--kv-cache-memory", "10GiB", "--max-model-len", "32768", "--max-num-batched-tokens", "2048")
    assert pool(run_json, *args, "--vllm-version", "0.8.2")["blocks_per_request"] == 32768 // 16
    assert pool(run_json, *args, "--vllm-version", "0.8.3")["blocks_per_request"] == math.ceil((4095 + 2048) / 16) + 1


# qwen3-0.6b: 28 layers x 16 x 8 KV heads x 256 x 2 B = 1,835,008 B per block
QWEN_BPB = 28 * 65536


def test_null_block_in_the_fit_check_from_0_29(run_json):
    # exactly 1000 blocks; L = 16000 needs 1000: 0.28.0 compares all of them, 0.29.0 one fewer
    args = ("qwen3-0.6b", "--kv-cache-memory", str(1000 * QWEN_BPB), "--max-model-len", "16000")
    assert pool(run_json, *args, "--vllm-version", "0.28.0")["fits_max_model_len"] is True
    p = pool(run_json, *args, "--vllm-version", "0.29.0")
    assert p["fits_max_model_len"] is False and p["estimated_max_model_len"] == 999 * 16


def test_whole_model_check_of_0_14_to_0_16(run_json):
    # PP 2 -> 14 + 14 layers, 14 x 65536 B per block per stage; 600 blocks of memory per stage.
    # L = 8000 = 500 blocks. 0.15: the whole model's 28 layers x 500 blocks > 600 x 14 layers -> refused
    # (vllm==0.15.0: kv_cache_utils.py:1514-1520); 0.13 and 0.17 check each stage's own 14 layers.
    mem = 600 * 14 * 65536
    args = ("qwen3-0.6b", "--pp", "2", "--kv-cache-memory", str(mem), "--max-model-len", "8000")
    p = pool(run_json, *args, "--vllm-version", "0.15.1")
    assert p["fits_max_model_len"] is False
    assert "(0.11 GiB KV cache is needed" not in p["error"]
    assert f"({round(28 * 65536 * 500 / GIB, 2)} GiB KV cache is needed" in p["error"]
    assert p["estimated_max_model_len"] == mem // (28 * 65536) * 16
    for release in ("0.13.0", "0.17.0"):
        assert pool(run_json, *args, "--vllm-version", release)["fits_max_model_len"] is True


def test_first_group_only_in_0_17_and_0_18(run_json):
    # gemma-2-9b-it: 21 sliding (4096) + 21 full, page 16 x 8 x 512 x 2 B = 131072; 2 groups of 21,
    # the sliding group first. L 8192, mnbt 2048: full 512 blocks, sliding cdiv(4095 + 2048, 16) + 1 = 385.
    # 600 blocks of memory: 0.17/0.18 check groups[0] only (385 fits); 0.19 the sum (897 does not).
    bpb = 21 * 131072
    args = ("gemma-2-9b-it", "--kv-cache-memory", str(600 * bpb), "--max-model-len", "8192", "--max-num-batched-tokens", "2048")
    assert pool(run_json, *args, "--vllm-version", "0.18.0")["fits_max_model_len"] is True
    p = pool(run_json, *args, "--vllm-version", "0.19.0")
    assert p["fits_max_model_len"] is False and p["blocks_per_request"] == 512 + 385


def test_group_size_ratio_by_release(run_json, tmp_path):
    # 6 full + 8 sliding layers: 8 < 1.5 x 6 -> groups of 8 (0.18.0-): 2 groups; 8 >= 1.25 x 6 ->
    # groups of 6 (0.12.0-0.17.x): 1 full + 2 sliding groups; 0.9.1-0.11.x always the smallest (6).
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 14,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16", "vocab_size": 1000, "intermediate_size": 3072, "use_sliding_window": True,
        "sliding_window": 1024, "layer_types": ["full_attention"] * 6 + ["sliding_attention"] * 8,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    groups = {v: len(pool(run_json, str(path), "--kv-cache-memory", "1GiB", "--vllm-version", v)["groups"])
              for v in ("0.18.0", "0.17.1", "0.11.2")}
    assert groups == {"0.18.0": 2, "0.17.1": 3, "0.11.2": 3}


@pytest.mark.parametrize(
    ("gpu", "release", "tokens"),
    [
        ("B200", "0.33.0", 16384), ("B200", "0.27.1", 8192),  # >= 160 GiB tier from 0.28.0
        ("A100-80GB", "0.8.5", 8192), ("A100-80GB", "0.9.0", 2048),  # A100 left out of >= 70 GiB from 0.9.0
        ("H100-80GB", "0.8.3", 8192), ("H20", "0.8.3", 2048), ("H20", "0.8.5", 8192),  # by name up to 0.8.4
    ],
)
def test_default_max_num_batched_tokens_by_release(run_json, gpu, release, tokens):
    p = pool(run_json, "qwen3-0.6b", "--gpu", gpu, "--max-model-len", "32768", "--vllm-version", release)
    assert p["max_num_batched_tokens"] == tokens


def test_error_texts_word_for_word(run_json):
    # 100 blocks of qwen3-0.6b, L 4096 = 256 blocks needed: 0.47 GiB needed, 0.17 GiB available
    args = ("qwen3-0.6b", "--kv-cache-memory", str(100 * QWEN_BPB), "--max-model-len", "4096")
    need, mem = 256 * QWEN_BPB, 100 * QWEN_BPB
    est = 100 * 16  # per-layer sum: 100 blocks of 16 tokens
    docs = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    head = f"To serve at least one request with the models's max seq len (4096), ({need / GIB:.2f} GB KV cache is needed, "
    assert pool(run_json, *args, "--vllm-version", "0.8.2")["error"] == (
        head + f"which is larger than the available KV cache memory ({mem / GIB:.2f} GB). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    # 0.8.4-0.9.0.1: the number is lost, "Based on the available memory,  Try" (vllm==0.8.4: :541-552)
    assert pool(run_json, *args, "--vllm-version", "0.8.4")["error"].endswith(
        "GiB). Based on the available memory,  Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.")
    assert pool(run_json, *args, "--vllm-version", "0.13.0")["error"].endswith(
        f"GiB). Based on the available memory, the estimated maximum model length is {est}. Try increasing "
        f"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. {docs}")
    assert docs not in pool(run_json, *args, "--vllm-version", "0.12.0")["error"]
    assert pool(run_json, *args, "--vllm-version", "0.22.0")["error"] == (
        f"To serve at least one request with the model's max seq len (4096), ({round(need / GIB, 2)} GiB KV cache is "
        f"needed, which is larger than the available KV cache memory ({round(mem / GIB, 2)} GiB). Based on the available "
        f"memory, the estimated maximum model length is {est}. Try increasing `gpu_memory_utilization` (which also "
        f"controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. {docs}")


def test_log_lines_by_release(run_json):
    args = ("qwen3-0.6b", "--pp", "2", "--kv-cache-memory", "1GiB", "--max-model-len", "4096")
    old = pool(run_json, *args, "--vllm-version", "0.10.2")
    # per worker before the minimum: two Available lines (%.2f) and two size/concurrency pairs
    assert old["log_lines"][:2] == ["Available KV cache memory: 1.00 GiB"] * 2
    assert old["log_lines"][2] == f"GPU KV cache size: {GIB // (14 * 65536) * 16:,} tokens"
    assert len(old["log_lines"]) == 6
    new = pool(run_json, *args, "--vllm-version", "0.28.0")
    assert new["log_lines"][0] == "Available KV cache memory: 1.0 GiB"  # round(x, 2) from 0.14.0
    assert new["log_lines"][-1].startswith("GPU KV cache size: ") and ", Maximum concurrency for 4,096" in new["log_lines"][-1]
    assert " / " in pool(run_json, *args, "--vllm-version", "0.27.1")["log_line"]


def test_the_output_names_the_rule_line(run_json, run):
    p = pool(run_json, "qwen3-0.6b", "--kv-cache-memory", "1GiB", "--vllm-version", "0.19.1")
    assert p["rules"] == "vLLM 0.19.1: rules of 0.19.0–0.19.x" and p["vllm_version"] == "0.19.1"
    assert pool(run_json, "qwen3-0.6b", "--kv-cache-memory", "1GiB", "--vllm-version", "0.41.0")["rules"].startswith(
        "vLLM 0.41.0: newer than the newest release kvcalc was checked against")
    code, out, _ = run("size", "qwen3-0.6b", "--kv-cache-memory", "1GiB", "--vllm-version", "v0.22.0")
    assert code == 0 and "vLLM 0.22.0: rules of 0.22.0–0.22.x" in out


def test_override_not_applied_in_0_9_1(run_json):
    args = ("qwen3-0.6b", "--kv-cache-memory", "1GiB", "--num-gpu-blocks-override", "100", "--max-model-len", "4096")
    assert pool(run_json, *args, "--vllm-version", "0.9.1")["num_blocks"] == GIB // QWEN_BPB
    assert pool(run_json, *args, "--vllm-version", "0.9.2")["num_blocks"] == 100


def test_mamba_before_0_10_is_refused(run):
    code, _, err = run("size", "jamba-v0.1", "--kv-cache-memory", "10GiB", "--vllm-version", "0.9.2")
    assert code == 2 and "mamba layers from 0.10.0" in err


def test_float_kv_dtype_differing_from_the_model_is_refused_by_0_33(run):
    code, _, err = run("size", "qwen3-0.6b", "--dtype", "float16", "--kv-dtype", "bfloat16")
    assert code == 2
    assert ('kv_cache_dtype="bfloat16" is incompatible with dtype="float16". Please set `--kv-cache-dtype` to `auto` or '
            "`float16`.") in err
    assert run("size", "qwen3-0.6b", "--dtype", "float16", "--kv-dtype", "bfloat16", "--vllm-version", "0.32.0")[0] == 0


def test_whisper_cross_attention_reserves_the_encoder_input_budget(run_json, run):
    # whisper-large-v3: 32 decoder + 32 cross layers, 20 heads x 64, fp16: page 16 x 20 x 128 x 2 = 81920.
    # From 0.11.0 a cross layer reserves cdiv(max_num_encoder_input_tokens = mnbt, 16) blocks; 0.10.x the
    # encoder length 1500 -> 94 blocks.
    p = pool(run_json, "whisper-large-v3", "--kv-cache-memory", "2GiB", "--max-num-batched-tokens", "4096")
    assert {g["kind"]: g["blocks_per_request"] for g in p["groups"]} == {"full": 448 // 16, "cross": 4096 // 16}
    old = pool(run_json, "whisper-large-v3", "--kv-cache-memory", "2GiB", "--vllm-version", "0.10.2")
    assert {g["kind"]: g["blocks_per_request"] for g in old["groups"]}["cross"] == math.ceil(1500 / 16)
    code, _, err = run("size", "whisper-large-v3", "--kv-cache-memory", "2GiB", "--disable-hybrid-kv-cache-manager")
    assert code == 2 and "Failed to promote local KV cache specs to one unified type." in err


def test_kv_cache_memory_per_pp_stage(run_json, run):
    p = pool(run_json, "qwen3-0.6b", "--pp", "2", "--kv-cache-memory", "12.13GiB,11.33GiB", "--max-model-len", "4096")
    per_stage = [round(12.13 * GIB), round(11.33 * GIB)]
    assert p["kv_cache_memory_bytes_per_stage"] == per_stage
    assert p["num_blocks"] == min(m // (14 * 65536) for m in per_stage)
    code, _, err = run("size", "qwen3-0.6b", "--pp", "2", "--kv-cache-memory", "1GiB,2GiB,3GiB")
    assert code == 2 and "3 figures for 2 PP stage(s)" in err


def test_absent_sliding_window_is_the_transformers_default(run_json, tmp_path):
    base = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 1024, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
            "vocab_size": 1000, "intermediate_size": 4096}
    for extra, kind in (({}, "sliding"), ({"sliding_window": None}, "full")):
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps({**base, **extra}))
        p = pool(run_json, str(path), "--kv-cache-memory", "1GiB", "--max-num-batched-tokens", "2048")
        assert [g["kind"] for g in p["groups"]] == [kind]
        if kind == "sliding":  # window 4096, 0.33: 2 batches of 2048 in flight -> cdiv(4095 + 4096, 16) + 1 blocks
            assert p["blocks_per_request"] == math.ceil((4095 + 2 * 2048) / 16) + 1


def test_yarn_max_model_len_by_release(run, run_json, tmp_path):
    # A YaRN config (Qwen3-32B's 40960 positions, factor 4 over 32768 original positions, as a user adds it for
    # 128k). 0.9.2-0.29 derive original x factor = 32768 x 4 = 131072 (vllm==0.29.0: config/model.py:2452-2458);
    # 0.30+ take YaRN positions as already scaled: 40960 (vllm==0.30.0/0.33.0: config/model.py, the rope types
    # list with "yarn"), so 131072 is refused there.
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600,
        "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    base = (str(path), "--kv-cache-memory", "10GiB", "--tokens", "1000")
    for release in ("0.29.0", "0.10.0"):
        out = run_json("size", *base, "--vllm-version", release)
        assert out["pool"]["max_model_len"] == 131072, release
        run_json("size", *base, "--vllm-version", release, "--max-model-len", "131072")
    assert run_json("size", *base, "--vllm-version", "0.30.0")["pool"]["max_model_len"] == 40960
    code, _, err = run("size", *base, "--vllm-version", "0.30.0", "--max-model-len", "131072")
    assert code == 2 and "maximum length 40960" in err
