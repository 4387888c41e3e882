"""SGLang's rules (kvcalc.core.sglang, kvcalc.core.sglang_pool) and --engine sglang through the
commands. Every expectation is worked out by hand from docs/sglang-rules.md (R-numbers)."""

from __future__ import annotations

import json

import pytest

from kvcalc.core.sglang import (
    chunked_prefill_default,
    max_running_requests,
    mem_fraction_static_default,
    parse_release,
    rules_for,
)
from kvcalc.errors import PlanError

GIB = 1 << 30
H100_MIB = 81559
BUDGET = ("--free-before-weights", "100GiB", "--free-after-weights", "50GiB", "--mem-fraction-static", "0.9")
REST = int((50 - 100 * (1 - 0.9)) * GIB)  # R2, as SGLang computes it in floating point


def line(v: str):
    return rules_for(v)[0]


def mfs(v: str, gpu_mib: int | None, tp: int = 1, *, chunk: int = 8192, graph: int = 256, mla: bool = False) -> float:
    return mem_fraction_static_default(line(v), gpu_mib, tp=tp, pp=1, dp=1, dp_attention=False, chunk=chunk, graph_bs=graph, mla=mla)[0]


def test_mem_fraction_static_defaults() -> None:  # R10
    assert mfs("0.4.0", H100_MIB, tp=8) == 0.81
    assert mfs("0.4.3", None, tp=2) == 0.87
    assert mfs("0.4.6", 143771) == (143771 - 13 * 1024) / 143771  # > 80 GiB: (mem - 13 GiB) / mem
    assert mfs("0.4.6", H100_MIB, tp=4) == 0.85
    assert mfs("0.4.10", H100_MIB) == round((H100_MIB - 10 * 1024) / H100_MIB, 3)  # (9.5 + 1/2) GiB
    assert mfs("0.4.10", 23034, tp=4) == round((23034 - 3.2 * 1024) / 23034, 3)  # (2.8 + 4/10) GiB
    # 0.5.3: 512 + 1.5 x 8192 + 2 x 256 + 1/8 GiB = 13,440 MiB
    assert mfs("0.5.3", H100_MIB) == round((H100_MIB - 13440) / H100_MIB, 3) == 0.835
    # 0.5.10 adds piecewise CUDA graphs: 58 sizes up to 8192 x 8 MiB, or 1.5 GiB for MLA
    assert mfs("0.5.10", H100_MIB) == round((H100_MIB - 13440 - 58 * 8) / H100_MIB, 3)
    assert mfs("0.5.10", H100_MIB, mla=True) == round((H100_MIB - 13440 - 1536) / H100_MIB, 3)
    assert mfs("0.5.3", 23034, chunk=2048, graph=16) == round((23034 - (512 + 3072 + 32 + 128)) / 23034, 3)


def test_chunked_prefill_defaults() -> None:  # R11
    assert chunked_prefill_default(line("0.4.0"), 23034) == 2048
    assert chunked_prefill_default(line("0.4.0"), H100_MIB) == 8192
    assert chunked_prefill_default(line("0.4.10"), 46068) == 8192  # L40S: no 4096 tier before 0.5.3
    assert chunked_prefill_default(line("0.5.3"), 46068) == 4096
    assert chunked_prefill_default(line("0.5.3"), 183359) == 16384
    assert chunked_prefill_default(line("0.5.3"), H100_MIB, dp=4, dp_attention=True) == 2048


def test_max_running_requests() -> None:  # R6
    # 46,611 tokens / 131,072 x 512 = 182 -> clamped to 2048; <= 0.4.6 the request pool has one more slot
    assert max_running_requests(line("0.4.3"), 46611, 131072, None, 1)[0] == 2049
    assert max_running_requests(line("0.4.10"), 46611, 131072, None, 1)[0] == 2048
    assert max_running_requests(line("0.4.10"), 1000, 131072, None, 1)[0] == 500  # tokens // 2
    # user 10,000 with 1,000,000 tokens: est = 1e6 / 131072 x 512 = 3906
    assert max_running_requests(line("0.5.10"), 1_000_000, 131072, 10_000, 1)[0] == 3906
    assert max_running_requests(line("0.5.16"), 1_000_000, 131072, 10_000, 1)[0] == 10_000
    assert max_running_requests(line("0.5.16"), 1_000_000, 131072, 10_000, 4)[0] == 2500


@pytest.mark.parametrize(
    ("text", "release"),
    [("0.4.3.post4", (0, 4, 3, 4)), ("v0.5.8.post1", (0, 5, 8, 1)), ("0.5.10rc1", (0, 5, 10, 0)), ("0.5", (0, 5, 0, 0))],
)
def test_parse_release(text: str, release: tuple) -> None:
    assert parse_release(text) == release


def test_unknown_releases_are_refused() -> None:
    with pytest.raises(PlanError, match="predates"):
        rules_for("0.3.6")
    with pytest.raises(PlanError, match="not a release string"):
        rules_for("latest")


def test_version_errors_name_the_flag(run) -> None:
    code, _out, err = run("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--sglang-version", "0.3.6", "--gpu", "H100-80GB")
    assert code == 2 and "--sglang-version '0.3.6' predates" in err and len(err.strip().splitlines()) == 1
    code, _out, err = run("size", "llama-3.1-8b-instruct", "--engine", "tgi")
    assert code == 2 and "--engine 'tgi' is not known" in err
    code, _out, err = run("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--kv-cache-dtype", "fp8_ds_mla")
    assert code == 2 and "--kv-cache-dtype" in err


def test_newest_release_says_so(run_json) -> None:
    out = run_json("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--sglang-version", "0.6.1", *BUDGET)
    assert "newer than the newest release kvcalc was checked against (0.5.23)" in out["pool"]["sglang_rules"]


def test_dense_pool_by_hand(run_json) -> None:  # R2-R5
    out = run_json("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--sglang-version", "0.5.6", *BUDGET)
    p = out["pool"]
    cell = 32 * 8 * 128 * 2 * 2  # 131,072 B
    assert p["engine"] == "sglang" and p["rest_bytes"] == REST
    assert p["max_total_num_tokens"] == p["pool_tokens"] == REST // cell
    assert p["k_size_bytes"] == (REST // cell + 1) * cell // 2  # page 1: one padding slot
    assert p["kv_log_lines"] == [
        f"KV Cache is allocated. #tokens: {REST // cell}, K size: {p['k_size_bytes'] / GIB:.2f} GB, V size: {p['v_size_bytes'] / GIB:.2f} GB"
    ]
    assert out["engine"] == "sglang" and out["rules"] == "SGLang 0.5.6"


def test_page_size_rounds_down_and_pads(run_json) -> None:  # R4, R5
    out = run_json("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--sglang-version", "0.5.6", "--page-size", "64", *BUDGET)
    p = out["pool"]
    tokens = REST // 131072 // 64 * 64
    assert p["max_total_num_tokens"] == tokens and p["block_size"] == 64 and p["num_blocks"] == tokens // 64
    assert p["k_size_bytes"] == (tokens + 64) * 65536


def test_kv_cache_memory_is_k_plus_v(run_json) -> None:
    out = run_json("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--kv-cache-memory", "10GiB")
    p = out["pool"]
    assert p["max_total_num_tokens"] == 10 * GIB // 131072 - 1  # the padding slot fits too
    assert p["pool_bytes_per_gpu"] == p["k_size_bytes"] + p["v_size_bytes"] == 10 * GIB


def test_mla_is_not_divided_by_tp(run_json) -> None:  # R3
    out = run_json("size", "deepseek-v3", "--engine", "sglang", "--tp", "8", *BUDGET)
    assert out["pool"]["bytes_per_token"] == 61 * (512 + 64) * 2
    assert out["pool"]["v_size_bytes"] == 0
    assert "KV size:" in out["pool"]["kv_log_lines"][0] and "dtype: torch.bfloat16" in out["pool"]["kv_log_lines"][0]


def test_replicated_heads_and_fp8(run_json) -> None:
    # Llama-3.1-70B, TP 16: 8 KV heads -> one replicated head per rank; fp8: 1 B per element
    out = run_json("size", "llama-3.1-70b", "--engine", "sglang", "--tp", "16", "--kv-cache-dtype", "fp8_e4m3", *BUDGET)
    assert out["pool"]["bytes_per_token"] == 80 * 1 * 128 * 2 * 1


def test_dp_attention_shards_heads_over_tp_over_dp(run_json) -> None:
    plain = run_json("size", "llama-3.1-70b", "--engine", "sglang", "--tp", "8", *BUDGET)["pool"]
    dpa = run_json("size", "llama-3.1-70b", "--engine", "sglang", "--tp", "8", "--dp-size", "4", "--enable-dp-attention", *BUDGET)["pool"]
    assert plain["bytes_per_token"] == 80 * 1 * 128 * 2 * 2
    assert dpa["bytes_per_token"] == 80 * 4 * 128 * 2 * 2  # attention TP 8 / 4 = 2: 4 heads per rank
    assert dpa["deployment"]["gpus"] == 8 and dpa["dp_attention"] is True


def test_sliding_window_split_by_release(run_json) -> None:  # R8
    # Gemma-2-9B: 21 sliding + 21 full layers, 8 KV heads x 256 x 2 x 2 B = 8,192 B per layer
    g = run_json("size", "gemma-2-9b-it", "--engine", "sglang", "--sglang-version", "0.4.10", *BUDGET)["pool"]
    tokens = REST // (42 * 8192)
    full = int(tokens * 42 / (0.8 * 21 + 21))
    assert (g["max_total_num_tokens"], g["swa_tokens"]) == (full, int(full * 0.8))
    assert len(g["kv_log_lines"]) == 2
    # 0.5.1-0.5.6 disable the split for Gemma 2/3 and gpt-oss; 0.5.10 lists the architectures that split
    for v in ("0.5.3", "0.5.10"):
        g = run_json("size", "gemma-2-9b-it", "--engine", "sglang", "--sglang-version", v, *BUDGET)["pool"]
        assert g["swa_tokens"] is None and g["max_total_num_tokens"] == REST // (42 * 8192)
    # gpt-oss-20b: 12 sliding + 12 full layers, 8 KV heads x 64 x 2 x 2 B = 2,048 B per layer
    o = run_json("size", "gpt-oss-20b", "--engine", "sglang", "--sglang-version", "0.5.23", *BUDGET)["pool"]
    full = int(REST / (12 * 2048 + 0.8 * 12 * 2048))
    assert (o["max_total_num_tokens"], o["swa_tokens"]) == (full, int(full * 0.8))


def test_mamba_state_is_carved_out_first(run_json) -> None:  # R9
    p = run_json("size", "qwen3-next-80b-a3b-thinking", "--engine", "sglang", "--sglang-version", "0.5.10", *BUDGET)["pool"]
    state = p["mamba_state_bytes_per_request"]
    size = int(REST * 0.9 / 1.9) // state
    assert p["mamba_cache_size"] == size
    assert p["max_total_num_tokens"] == (REST - size * state) // p["bytes_per_token"]
    assert p["max_running_requests"] <= size // 3


def test_start_up_errors(run_json) -> None:  # R4
    args = ("llama-3.1-8b-instruct", "--engine", "sglang", "--free-before-weights", "20GiB", "--free-after-weights", "1GiB",
            "--mem-fraction-static", "0.9")
    p = run_json("size", *args, "--sglang-version", "0.5.23")["pool"]
    assert p["error"].startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.9")
    assert "Raise --mem-fraction-static above 0.950" in p["error"] and p["kv_log_lines"] == []
    p = run_json("size", *args, "--sglang-version", "0.4.6")["pool"]
    assert p["error"] == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert p["fits_max_model_len"] is False


def test_cap_and_context_length_alias(run_json) -> None:
    p = run_json("size", "llama-3.1-8b-instruct", "--engine", "sglang", "--max-total-tokens", "5000", "--context-length", "8192",
                 *BUDGET)["pool"]
    assert p["max_total_num_tokens"] == 5000 and p["context_len"] == 8192
    assert p["max_running_requests"] == 2048 and p["max_concurrency"] == 5000 / 8192


def test_pool_keys_are_the_same_for_both_engines(run_json) -> None:
    v = run_json("size", "llama-3.1-8b-instruct", "--gpu", "H100-80GB")["pool"]
    s = run_json("size", "llama-3.1-8b-instruct", "--gpu", "H100-80GB", "--engine", "sglang")["pool"]
    assert set(v) <= set(s)
    assert v["engine"] == "vllm" and s["engine"] == "sglang"


def test_other_engines_settings_are_noted(run_json) -> None:
    out = run_json("size", "llama-3.1-8b-instruct", "--gpu", "H100-80GB", "--engine", "sglang", "--gpu-memory-utilization", "0.8")
    assert any("--gpu-memory-utilization is a vLLM setting" in n for n in out["notes"])
    out = run_json("size", "llama-3.1-8b-instruct", "--gpu", "H100-80GB", "--mem-fraction-static", "0.8")
    assert any("--mem-fraction-static is an SGLang setting" in n for n in out["notes"])


def test_compare_and_fit_over_both_engines(run_json) -> None:
    rows = run_json("compare", "llama-3.1-8b-instruct", "--engine", "vllm,sglang", "--gpu", "H100-80GB")
    assert [r["pool"]["engine"] for r in rows] == ["vllm", "sglang"]
    fit = run_json("fit", "llama-3.1-8b-instruct", "--gpu", "H100-80GB", "-c", "2", "--engine", "any", "--max-gpus", "2")
    assert {d["engine"] for d in fit["deployments"]} == {"vllm", "sglang"}
    assert fit["sglang_version"] == "0.5.23"


def test_gate_key_engine(run, tmp_path) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text(
        "deployments:\n"
        "  - {name: sg, model: llama-3.1-8b-instruct, engine: sglang, gpu: H100-80GB, context_length: 32768,\n"
        "     sglang_version: '0.5.10', min_concurrency: 2}\n"
        "  - {name: vl, model: llama-3.1-8b-instruct, gpu: H100-80GB, max_model_len: 32768, min_concurrency: 2}\n"
    )
    code, out, err = run("gate", str(path), "--format", "json")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [r["rules"] for r in results] == ["SGLang 0.5.10", "vLLM 0.33"]


def test_compare_sweeps_mem_fraction_static(run_json) -> None:
    rows = run_json("compare", "qwen3-8b", "--engine", "sglang", "--mem-fraction-static", "0.8,0.9", "--gpu", "H100-80GB")
    assert [r["pool"]["mem_fraction_static"] for r in rows] == [0.8, 0.9]
    assert rows[0]["pool"]["pool_tokens"] < rows[1]["pool"]["pool_tokens"]


@pytest.mark.parametrize(
    ("model", "gpu", "version", "table"),
    [
        # Llama-3.1-8B: 131,072 positions x 128 rotary dims; bf16 up to 0.4.2, fp32 on CUDA from 0.4.2.post1
        ("llama-3.1-8b-instruct", "H100-80GB", "0.4.2", 131072 * 128 * 2),
        ("llama-3.1-8b-instruct", "H100-80GB", "0.4.2.post1", 131072 * 128 * 4),
        ("llama-3.1-8b-instruct", "H100-80GB", "0.5.10", 131072 * 128 * 4),
        # ROCm keeps the model dtype before 0.5.23
        ("llama-3.1-8b-instruct", "MI300X", "0.5.10", 131072 * 128 * 2),
        ("llama-3.1-8b-instruct", "MI300X", "0.5.23", 131072 * 128 * 4),
        # DeepSeek-V3 (MLA, deepseek_yarn): 4,096 original positions x factor 40 x qk_rope_head_dim 64, fp32
        ("deepseek-v3", "H200", "0.4.6", 4096 * 40 * 64 * 4),
        # Gemma 3: a local and a global table, 32,768 positions x head_dim 256, fp32
        ("gemma-3-1b-it", "H100-80GB", "0.5.10", 2 * 32768 * 256 * 4),
    ],
)
def test_rope_table_is_charged_to_the_estimated_load(run_json, model: str, gpu: str, version: str, table: int) -> None:
    """Given only the GPU, A = P - weights - the cos/sin table SGLang builds on the GPU while loading."""
    weights = 10 * 2**30
    base = ("size", model, "--engine", "sglang", "--sglang-version", version, "--gpu", gpu, "--weights-bytes", str(weights))
    pool = run_json(*base)["pool"]
    assert pool["free_before_weights_bytes"] - pool["free_after_weights_bytes"] == weights + table
    # given the logged figure after the weights, nothing is added
    given = run_json(*base, "--free-before-weights", "70GiB", "--free-after-weights", "55GiB")["pool"]
    assert given["free_after_weights_bytes"] == 55 * 2**30
