"""The KV pool (issue 3): hand-derived block counts, concurrency and fit checks."""

from __future__ import annotations

import math

GIB = 1 << 30


def pool(run_json, *args):
    return run_json("size", *args)["pool"]


def test_uniform_qwen25_7b_020(run_json):
    # 28 layers x 4 KV heads x 128 x 2 (K,V) x 2 B = 2048 B per layer-token; page 16 x 2048 = 32768
    p = pool(run_json, "qwen2.5-7b", "--kv-cache-memory", "5.01GiB", "--max-model-len", "16384", "--vllm-version", "0.20")
    available = 5379446538  # 5.01 x 2**30 = 5379446538.24, rounded
    bpb = 28 * 16 * 2048
    assert p["bytes_per_block"] == bpb == 917504
    assert p["num_blocks"] == available // bpb == 5863
    assert p["max_concurrency"] == 5863 / (16384 // 16)
    assert p["kv_cache_size_tokens"] == int(5863 / 1024 * 16384) == 93808
    assert p["vllm_version"] == "0.20"
    assert "93,808 tokens" in p["log_line"]


def test_mla_deepseek_v3_tp8_block64(run_json):
    # MLA latent 576 x 2 B per token per layer on every rank; block 64 (FlashMLA)
    p = pool(run_json, "deepseek-v3", "--tp", "8", "--kv-cache-memory", "10GiB", "--block-size", "64",
             "--max-model-len", "131072")
    page = 64 * 576 * 2
    bpb = 61 * page
    assert p["bytes_per_block"] == bpb == 4497408
    assert p["num_blocks"] == 10 * GIB // bpb == 2387
    assert p["max_concurrency"] == 2387 / (131072 // 64)
    # RULES: at block 16 a DeepSeek V3 page is 18432 B on every rank at TP 8
    p16 = pool(run_json, "deepseek-v3", "--tp", "8", "--kv-cache-memory", "10GiB", "--max-model-len", "131072")
    assert p16["groups"][0]["page_size_bytes"] == 16 * 576 * 2 == 18432
    flashmla = pool(run_json, "deepseek-v3", "--tp", "8", "--kv-cache-memory", "10GiB", "--attention-backend", "FLASHMLA",
                    "--max-model-len", "131072")
    assert flashmla["block_size"] == 64


def test_interleaved_sliding_gpt_oss(run_json):
    # 12 sliding (window 128) + 12 full, same page 16 x (2 x 8 x 64 x 2) = 32768 -> 2 groups of 12
    p = pool(run_json, "gpt-oss-20b", "--kv-cache-memory", "10GiB", "--max-model-len", "131072",
             "--max-num-batched-tokens", "8192")
    bpb = 12 * 32768
    assert p["bytes_per_block"] == bpb
    assert p["num_blocks"] == 10 * GIB // bpb == 27306
    full = 131072 // 16
    in_flight = 2 * 8192  # 0.33: (pp + 1) batches in flight x max_num_batched_tokens
    sliding = math.ceil(min(128 - 1 + in_flight, 131072) / 16) + 1
    assert sliding == 1033
    assert p["blocks_per_request"] == full + sliding
    assert p["max_concurrency"] == 27306 / (full + sliding)
    old = pool(run_json, "gpt-oss-20b", "--kv-cache-memory", "10GiB", "--max-model-len", "131072",
               "--max-num-batched-tokens", "8192", "--vllm-version", "0.20")
    assert old["blocks_per_request"] == full + math.ceil((127 + 8192) / 16) + 1  # 0.20: no concurrency factor


def test_mistral_window_versions(run_json):
    # vLLM 0.33 vs 0.20 (docs/vllm-releases.md): Mistral-7B, 10 GiB: 0.33 default 3.997x, 0.20-style 6.658x
    args = ("mistral-7b-v0.1", "--kv-cache-memory", "10GiB", "--max-num-batched-tokens", "8192")
    blocks = 10 * GIB // (32 * 16 * 4096)  # 5120
    assert round(pool(run_json, *args)["max_concurrency"], 3) == round(blocks / (math.ceil((4095 + 16384) / 16) + 1), 3) == 3.997
    assert round(pool(run_json, *args, "--vllm-version", "0.20")["max_concurrency"], 3) == 6.658


def test_hybrid_mamba_jamba(run_json):
    # attention 8 x 128 x 2 x 2 B = 4096 B per layer-token; mamba1 state at TP 1:
    # conv 8192 x 3 x 2 B + ssm 8192 x 16 x 2 B = 311296 B -> block 16 x cdiv(311296, 16 x 4096) = 80
    p = pool(run_json, "jamba", "--kv-cache-memory", "10GiB", "--max-model-len", "262144", "--no-enable-prefix-caching")
    assert p["block_size"] == 80
    page = 80 * 4096  # the mamba page is padded to it
    # 28 mamba + 4 attention layers -> group size 4: 7 mamba groups + 1 attention group
    assert len(p["groups"]) == 8 and {g["page_size_bytes"] for g in p["groups"]} == {page}
    assert p["bytes_per_block"] == 4 * page
    assert p["num_blocks"] == 10 * GIB // (4 * page) == 8192
    assert p["blocks_per_request"] == math.ceil(262144 / 80) + 7 * 1
    assert p["max_concurrency"] == 8192 / (3277 + 7)
    # vLLM 0.28+ turns prefix caching on for hybrids by default: 'align', 2 state pages a request (0.33: Mamba-1
    # mixers export no prefill checkpoint)
    on = pool(run_json, "jamba", "--kv-cache-memory", "10GiB", "--max-model-len", "262144")
    assert on["block_size"] == 80 and on["blocks_per_request"] == math.ceil(262144 / 80) + 7 * 2
    # 0.25 with prefix caching asked: Jamba declares SupportsMambaPrefixCaching, so 'all': the block is a multiple
    # of lcm(vLLM's chunk for a Mamba-1 model, 2048, 16) = 2048 that holds a state page (311296 / 4096 = 76 tokens:
    # 2048), and a request holds one state page per block: cdiv(262144, 2048) = 128 in each of the 8 groups
    old = pool(run_json, "jamba", "--kv-cache-memory", "10GiB", "--max-model-len", "262144", "--vllm-version", "0.25.0",
               "--enable-prefix-caching")
    assert old["block_size"] == 2048 and old["blocks_per_request"] == 8 * 128


def test_qwen3_next_rules_example(run_json):
    # vLLM's hybrid page unification (docs/vllm-releases.md): block 544, 12 x 1114112 per block, 803 blocks, 10.16x at 40960
    p = pool(run_json, "qwen3-next", "--kv-cache-memory", "10GiB", "--max-model-len", "40960", "--no-enable-prefix-caching")
    assert p["block_size"] == 544 and p["bytes_per_block"] == 12 * 1114112
    assert p["num_blocks"] == 803
    assert round(p["max_concurrency"], 2) == 10.16


def test_fit_check_message_and_estimate(run_json):
    # qwen3-0.6b: page 16 x 4096 = 65536, 28 layers -> 1835008 B per block; 100 MiB available
    p = pool(run_json, "qwen3-0.6b", "--kv-cache-memory", "100MiB", "--max-model-len", "40960")
    bpb = 28 * 65536
    check = 100 * 2**20 - bpb  # 0.33 holds the null block back
    assert p["fits_max_model_len"] is False
    assert p["estimated_max_model_len"] == (check // bpb) * 16 == 896
    assert "the estimated maximum model length is 896" in p["error"]
    assert "max seq len (40960)" in p["error"]


def test_tp_pp_min_over_workers(run_json):
    # PP 3 over 28 layers -> [9, 10, 9]; the 10-layer stage decides the block count
    p = pool(run_json, "qwen3-0.6b", "--pp", "3", "--kv-cache-memory", "1GiB", "--max-model-len", "4096")
    assert [w["bytes_per_block"] for w in p["workers"]] == [9 * 65536, 10 * 65536, 9 * 65536]
    assert p["num_blocks"] == GIB // (10 * 65536)


def test_budget_from_gpu(run_json):
    # requested = ceil(total x 0.92); weights/activation/overhead given -> KV memory is the remainder
    p = pool(run_json, "qwen3-32b", "--gpu-memory", "79.1GiB", "--weights-bytes", "65.5GB", "--activation-bytes", "2GiB",
             "--overhead-bytes", "1GiB", "--cudagraph-bytes", "0", "--max-model-len", "40960")
    total = round(79.1 * 2**30)
    assert p["gpu_memory_bytes"] == total
    assert p["requested_bytes"] == math.ceil(total * 0.92)
    assert p["weights_bytes_per_rank"] == 65_500_000_000
    assert p["kv_cache_memory_bytes"] == math.ceil(total * 0.92) - 65_500_000_000 - 2 * GIB - GIB
    sources = {t["term"]: t["source"] for t in p["budget"][0]}
    assert any("--weights-bytes" in s for s in sources.values())


def test_dp_totals(run_json):
    p = pool(run_json, "qwen3-0.6b", "--dp", "4", "--kv-cache-memory", "1GiB", "--max-model-len", "4096")
    assert p["deployment"]["max_concurrency"] == 4 * p["max_concurrency"]
    assert p["deployment"]["gpus"] == 4


def test_num_gpu_blocks_override(run_json):
    p = pool(run_json, "qwen3-0.6b", "--num-gpu-blocks-override", "1000", "--max-model-len", "4096")
    assert p["num_blocks"] == 1000 and p["max_concurrency"] == 1000 / 256


def test_fit_planner(run_json):
    d = run_json("fit", "llama-3.1-70b", "--gpu", "H100-80GB", "--max-model-len", "32768", "--concurrency", "32")
    assert d["deployments"], "some 8-GPU plan must serve 32 x 32k"
    gpus = [x["gpus"] for x in d["deployments"]]
    assert gpus == sorted(gpus)
    assert all(x["max_concurrency"] >= 32 for x in d["deployments"])
    reasons = " ".join(x["reason"] for x in d["rejected"])
    assert "exceed the memory" in reasons  # TP 1: 70B weights do not fit one GPU


def test_bad_pool_inputs(run):
    for args, needle in [
        (("--gpu", "H100-80GB", "--gpu-memory-utilization", "0"), "--gpu-memory-utilization must be in (0, 1]"),
        (("--gpu", "H100-80GB", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization must be in (0, 1]"),
        (("--gpu", "Z100"), "known: H100-80GB"),
        # issue 13: any release from 0.8.0 is accepted ("0.10" was refused with "valid: 0.33, 0.20")
        (("--gpu", "H100-80GB", "--vllm-version", "0.7.3"), "predates vLLM's V1 engine"),
        (("--gpu", "H100-80GB", "--vllm-version", "latest"), "is not a release string"),
        (("--gpu-memory", "lots"), "--gpu-memory must be a size"),
    ]:
        code, out, err = run("size", "qwen3-0.6b", *args)
        assert code == 2, (args, err)
        assert needle in err and len(err.strip().splitlines()) == 1
    code, _, err = run("size", "llama-3.1-70b", "--gpu-memory", "20GiB")
    assert code == 2 and "exceed the memory" in err


def test_gpu_catalog_lists_sources(run_json):
    rows = run_json("gpus")
    h100 = next(r for r in rows if r["name"] == "H100-80GB")
    assert h100["memory_bytes"] == round(79.18 * 2**30)  # CUDA's total (mem_get_info), not nvidia-smi's 81559 MiB
    assert h100["cuda_total"] and "mem_get_info" in h100["source"]
    assert all(r["source"] for r in rows)
    assert h100["default_max_num_batched_tokens"] == 8192  # >= 70 GiB, not an A100
    a100 = next(r for r in rows if r["name"] == "A100-80GB")
    assert a100["default_max_num_batched_tokens"] == 2048  # vLLM keeps A100 on the small tier


def test_default_batched_tokens_capped_by_max_num_seqs(run_json):
    # vLLM caps the default at max_num_seqs x max_model_len: H100 tier 1024 seqs x 4 tokens = 4096 < 8192
    p = pool(run_json, "qwen3-0.6b", "--gpu", "H100-80GB", "--max-model-len", "4")
    assert p["max_num_batched_tokens"] == 1024 * 4
    p = pool(run_json, "qwen3-0.6b", "--gpu", "H100-80GB", "--max-model-len", "4096")
    assert p["max_num_batched_tokens"] == 8192


def test_rocm_attention_backends(run, run_json):
    """vLLM's ROCm backends take kernel blocks of 16 or multiples of 16 (vllm==0.33.0: v1/attention/backends/
    rocm_attn.py:153-165, rocm_aiter_fa.py:912-913, rocm_aiter_unified_attn.py:73-74): the default 16 stands;
    they are not MLA backends."""
    for backend in ("ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN"):
        d = run_json("size", "qwen3-8b", "--gpu", "MI300X", "--attention-backend", backend)
        assert d["block_size"] == 16
    code, _, err = run("size", "deepseek-v2-lite", "--attention-backend", "ROCM_AITER_FA")
    assert code == 2 and "ROCM_AITER_FA is a non-MLA backend" in err
