"""SGLang's pool against the real launch logs of tests/data/sglang-logs/ (INDEX.json).

SGLang prints free memory and pool sizes in GiB ("GB") rounded to 0.01, so the bytes it had
are within +-0.005 GiB of a printed figure. For each log below, the range of token counts
those two ends allow is derived here by hand from the logged figures and the model's shape
(bytes per token written out), never from kvcalc's output:

    rest = A - P x (1 - mem_fraction_static)        (GiB; A after, P before the weights)
    tokens = int(rest x 2^30) // bytes_per_token     (then the --max-total-tokens cap)

kvcalc is given the logged (rounded) figures and must land inside that range, and so must
the logged count; the K/V sizes it would log must equal the logged ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.core.sglang import parse_release, rules_for

LOGS = Path(__file__).parent / "data" / "sglang-logs"
INDEX = {e["file"]: e for e in json.loads((LOGS / "INDEX.json").read_text())}
GIB = 1 << 30
HALF = 0.005  # half of the last printed digit, GiB

# Qwen/QwQ-32B has no preset: its config (Qwen2.5-32B geometry), as on the Hub
QWQ_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 131072,
    "model_type": "qwen2", "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 152064,
}


def token_range(p: float, a: float, mfs: float, cell: int) -> tuple[int, int]:
    """The token counts the printed P and A (each +-0.005 GiB) allow."""
    lo = (a - HALF) - (p + HALF) * (1 - mfs)
    hi = (a + HALF) - (p - HALF) * (1 - mfs)
    return int(lo * GIB) // cell, int(hi * GIB) // cell


def gb(n: int) -> str:
    return f"{n / GIB:.2f}"


# file -> (model, extra flags, bytes per token per GPU by hand, K bytes per token, V bytes per token or None for MLA)
REPLAY = {
    # 64 layers x 2 KV heads per rank (8 / TP 4) x 128 x 2 (K, V) x 2 B
    "llms-in-clouds-qwq-32b-0.4.3.post4.log": ("QWQ", ["--tp", "4"], 64 * 2 * 128 * 2 * 2, 64 * 2 * 128 * 2),
    # 32 layers x 8 KV heads x 128 x 2 x 2 B
    "docs-sglang-send-request-llama-3.1-8b-instruct-dated-2025-01.log": (
        "llama-3.1-8b-instruct", [], 32 * 8 * 128 * 2 * 2, 32 * 8 * 128 * 2,
    ),
    # MLA: 61 layers x (512 latent + 64 rope) x 2 B, the same on every TP rank
    "amd-issues-kimi-k2.5-0.5.8.post1-rocm.log": ("kimi-k2-instruct", ["--tp", "8"], 61 * 576 * 2, 61 * 576 * 2),
}
# the version each log's rules follow when the log does not print it (INDEX.json says how it was dated)
VERSIONS = {
    "llms-in-clouds-qwq-32b-0.4.3.post4.log": "0.4.3.post4",
    "docs-sglang-send-request-llama-3.1-8b-instruct-dated-2025-01.log": "0.4.1.post6",  # K/V line, no #tokens
    "amd-issues-kimi-k2.5-0.5.8.post1-rocm.log": "0.5.8.post1",
}


@pytest.fixture()
def qwq(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWQ_CONFIG))
    return str(path)


def _model(name: str, qwq: str) -> str:
    return qwq if name == "QWQ" else name


def _logged_p_a(e: dict) -> tuple[float, float]:
    lg = e["logged"]
    p = lg.get("avail_mem_before_weights_min_over_ranks_gb", lg["avail_mem_before_weights_gb"])
    a = lg.get("avail_mem_after_weights_min_over_ranks_gb", lg["avail_mem_after_weights_gb"])
    return p, a


@pytest.mark.parametrize("file", sorted(REPLAY))
def test_tokens_from_logged_memory(file: str, run_json, qwq: str) -> None:
    e = INDEX[file]
    model, extra, cell, k_cell = REPLAY[file]
    p, a = _logged_p_a(e)
    mfs = e["settings"]["mem_fraction_static"]
    lo, hi = token_range(p, a, mfs, cell)
    logged = e["logged"].get("kv_tokens", e["logged"].get("max_total_num_tokens"))
    assert lo <= logged <= hi, "the hand rule itself must explain the log"
    out = run_json(
        "size", _model(model, qwq), "--engine", "sglang", "--sglang-version", VERSIONS[file], *extra,
        "--free-before-weights", f"{p}GiB", "--free-after-weights", f"{a}GiB", "--mem-fraction-static", str(mfs),
    )
    pool = out["pool"]
    assert pool["engine"] == "sglang" and pool["sglang_version"] == VERSIONS[file]
    assert pool["bytes_per_token"] == cell
    assert lo <= pool["max_total_num_tokens"] <= hi
    assert pool["pool_tokens"] == pool["max_total_num_tokens"]
    if "max_total_num_tokens" in e["logged"]:
        assert abs(pool["max_total_num_tokens"] - e["logged"]["max_total_num_tokens"]) <= hi - lo
    if "max_running_requests" in e["logged"]:
        assert pool["max_running_requests"] == e["logged"]["max_running_requests"]
    if "context_len" in e["logged"]:
        assert pool["context_len"] == e["logged"]["context_len"]
    # the size it would log is within the token window of the logged one (exact sizes: the geometry test)
    logged_gb = e["logged"].get("kv_size_gb", e["logged"].get("k_size_gb"))
    assert abs(pool["k_size_bytes"] / GIB - logged_gb) <= (hi - lo) * k_cell / GIB + HALF


def test_cap_wins_over_the_profiled_pool(run_json) -> None:
    """gpt-oss-20b (dummy weights), fp8_e5m2, --max-total-tokens 4096 at mem_fraction_static 0.12."""
    e = INDEX["pr-11024-gpt-oss-20b-dated-2025-09.log"]
    p, a = _logged_p_a(e)
    # rest = 91.91 - 94.63 x 0.88 = 8.64 GiB: far more than 4096 tokens of any layer count
    assert a - p * (1 - 0.12) > 8
    out = run_json(
        "size", "gpt-oss-20b", "--engine", "sglang", "--sglang-version", "0.5.3", "--kv-cache-dtype", "fp8_e5m2",
        "--max-total-tokens", "4096", "--mem-fraction-static", "0.12",
        "--free-before-weights", f"{p}GiB", "--free-after-weights", f"{a}GiB",
    )
    assert out["pool"]["max_total_num_tokens"] == e["logged"]["max_total_num_tokens"] == 4096
    assert out["pool"]["swa_tokens"] is None  # 0.5.1-0.5.6 disable the sliding-window pool for gpt-oss


# file -> (model, flags, K bytes per token per GPU by hand). Undated logs get a release of their
# date whose KV line has the logged format (no "dtype:" before 0.5.16).
GEOMETRY = {
    # Llama-3.1-8B, TP 1: 32 x 8 x 128 x 2 B
    "thesis-llama-3.1-8b-instruct-dated-2025-07.log": ("llama-3.1-8b-instruct", ["--sglang-version", "0.4.10"], 32 * 8 * 128 * 2),
    # Qwen3-235B-A22B, TP 4: 94 layers x 1 KV head per rank (4 / 4) x 128 x 2 B (bf16 KV for the FP8 checkpoint)
    "vllm-issue-21348-qwen3-235b-a22b-fp8-unknown.log": ("qwen3-235b-a22b", ["--tp", "4", "--sglang-version", "0.4.10"], 94 * 1 * 128 * 2),
    # Qwen3-32B, TP 4: 64 x 2 x 128 x 2 B
    "pr-22537-qwen3-b200-unknown.log": ("qwen3-32b", ["--tp", "4", "--sglang-version", "0.5.10"], 64 * 2 * 128 * 2),
    # Qwen3-Omni thinker = Qwen3-30B-A3B, TP 4: 48 x 1 x 128 x 2 B
    "pr-15909-qwen3-omni-30b-a3b-dated-2025-12.log": ("qwen3-30b-a3b", ["--tp", "4", "--sglang-version", "0.5.6"], 48 * 1 * 128 * 2),
    # Llama-3.x-70B, TP 8 (inferred from the bytes per token): 80 x 1 x 128 x 2 B
    "pr-11716-unknown-model-dated-2025-10.log": ("llama-3.1-70b", ["--tp", "8", "--sglang-version", "0.5.3"], 80 * 1 * 128 * 2),
    "llms-in-clouds-qwq-32b-0.4.3.post4.log": ("QWQ", ["--tp", "4", "--sglang-version", "0.4.3.post4"], 64 * 2 * 128 * 2),
    "docs-sglang-send-request-llama-3.1-8b-instruct-dated-2025-01.log": (
        "llama-3.1-8b-instruct", ["--sglang-version", "0.4.1.post6"], 32 * 8 * 128 * 2,
    ),
    # MLA: 61 x 576 x 2 B, one latent buffer ("KV size")
    "amd-issues-kimi-k2.5-0.5.8.post1-rocm.log": ("kimi-k2-instruct", ["--tp", "8", "--sglang-version", "0.5.8.post1"], 61 * 576 * 2),
    # granite-4.0-h-micro: 4 attention layers of 40 x 8 KV heads x 64 x 2 B (the PR branch taken as 0.5.10)
    "pr-18040-granite-4.0-h-micro-unknown.log": (
        "tests/data/vllm-budget/configs/granite-4.0-h-micro.json", ["--sglang-version", "0.5.10"], 4 * 8 * 64 * 2,
    ),
}


def test_granite_h_micro_mamba_state_pool(run_json) -> None:
    """R9 on the PR 18040 start: "Mamba Cache is allocated. max_mamba_cache_size: 38, conv_state size: 0.03GB,
    ssm_state size: 2.74GB". SGLang allocates max_mamba_cache_size + 1 slots (sglang==0.5.10:
    mem_cache/memory_pool.py:253-271), conv state in bf16 and the SSM state in float32 (configs/mamba_utils.py:
    47-96). By hand, per slot over the 36 Mamba-2 layers: conv 3 x (4096 + 2 x 128) x 2 B = 26,112 B and SSM
    64 heads x 64 x 128 x 4 B = 2,097,152 B; 39 slots: 0.034 GiB and 2.742 GiB, the logged figures."""
    e = INDEX["pr-18040-granite-4.0-h-micro-unknown.log"]["logged"]
    conv, ssm = 36 * 26_112, 36 * 2_097_152
    assert (gb(39 * conv), gb(39 * ssm)) == (f"{e['mamba_conv_state_gb']:.2f}", f"{e['mamba_ssm_state_gb']:.2f}")
    pool = run_json("size", "tests/data/vllm-budget/configs/granite-4.0-h-micro.json", "--engine", "sglang",
                    "--sglang-version", "0.5.10", "--free-before-weights", "15.24GiB", "--free-after-weights", "9.26GiB",
                    "--gpu-memory", "16GiB")["pool"]
    assert pool["mamba_state_bytes_per_request"] == conv + ssm


@pytest.mark.parametrize("file", sorted(GEOMETRY))
def test_logged_sizes_from_logged_tokens(file: str, run_json, qwq: str) -> None:
    """Given the logged #tokens (as a cap on a large pool), kvcalc's K and V sizes are the logged ones."""
    e = INDEX[file]
    model, flags, k_cell = GEOMETRY[file]
    tokens = e["logged"].get("kv_tokens", e["logged"].get("max_total_num_tokens"))
    logged_k = e["logged"].get("k_size_gb", e["logged"].get("kv_size_gb"))
    assert gb((tokens + 1) * k_cell) == f"{logged_k:.2f}"  # +1: the padding slot (page size 1)
    out = run_json(
        "size", _model(model, qwq), "--engine", "sglang", *flags, "--max-total-tokens", str(tokens),
        "--free-before-weights", "2000GiB", "--free-after-weights", "1900GiB", "--mem-fraction-static", "0.9",
    )
    pool = out["pool"]
    assert pool["max_total_num_tokens"] == tokens
    assert gb(pool["k_size_bytes"]) == f"{logged_k:.2f}"
    if "v_size_gb" in e["logged"]:
        assert gb(pool["v_size_bytes"]) == f"{e['logged']['v_size_gb']:.2f}"
    else:
        assert pool["v_size_bytes"] == 0
    log = (LOGS / file).read_text()
    for line in pool["kv_log_lines"]:  # the line kvcalc would print is in the log, verbatim
        assert line in log


def test_index_covers_the_suite() -> None:
    """Every log is accounted for: replayed, size-checked, or listed with why it cannot be."""
    not_checkable = {
        "issue-4161-deepseek-v3-dated-2025-03.log": "no pre-load figure nor mem_fraction_static",
        "issue-7691-deepseek-r1-0.4.8.post1-rocm.log": "negative profiled value not explained by the rule (ROCm, DP attention)",
        "issue-29575-unknown-model-unknown.log": "scheduler line only, model unknown",
        "pr-18039-mimo-v2-flash-unknown.log": "no preset for MiMo-V2-Flash",
        "pr-15464-mimo-v2-flash-unknown.log": "no preset for MiMo-V2-Flash",
        "inferencex-2128-deepseek-v4-pro-unknown.log": "DeepSeek-V4 multi-pool: not modelled",
        "issue-4330-error-0.4.3.post2.log": "no memory figures",
        "kvcached-198-gpt-oss-20b-dated-2025-10.log": "crashed before the pool",
        "ktransformers-1870-qwen3.5-moe-dated-2026-02.log": "model id and pre-load figure not logged",
    }
    covered = set(REPLAY) | set(GEOMETRY) | set(not_checkable) | set(HELDOUT) | {"pr-11024-gpt-oss-20b-dated-2025-09.log"}
    assert covered == set(INDEX)
    assert len(INDEX) >= 15


def test_mimo_swa_split_by_hand() -> None:
    """PR 18039 (page 64, ratio 0.8): swa_layer_tokens = page_floor(full x 0.8)."""
    e = INDEX["pr-18039-mimo-v2-flash-unknown.log"]["logged"]
    full = e["full_layer_tokens"]
    assert int(full * 0.8) // 64 * 64 == e["swa_layer_tokens"]


@pytest.mark.parametrize(
    ("text", "line"),
    [("0.4.3.post4", "0.4.3.post4"), ("0.4.3.post2", "0.4.1.post6"), ("0.4.1.post5", "0.4.0"), ("v0.5.8.post1", "0.5.6"), ("0.5.10rc1", "0.5.10"),
     ("0.4.8.post1", "0.4.6"), ("0.5.23", "0.5.23"), ("0.6.0", "0.5.23")],
)
def test_release_lines(text: str, line: str) -> None:
    got, why = rules_for(text)
    assert got.label == line
    assert ("newer than the newest" in why) == (parse_release(text) > parse_release("0.5.23"))


# Held-out logs (tests/data/sglang-logs/HELDOUT.md): collected after the rules were written. mem_fraction_static
# is 0.88 in all of them: SGLang's default for TP 1 on these cards (sglang==0.4.0: python/sglang/srt/server_args.py:
# 158-168; 0.4.3 :195-205, unchanged for <= 80 GiB in 0.4.6) where server_args is not printed, the logged value
# where it is (the second batch).
LLAMA8_CELL = 32 * 8 * 128 * 2 * 2  # 32 layers x 8 KV heads x 128 x (K, V) x 2 B
QWEN7_CELL = 28 * 4 * 128 * 2 * 2  # Qwen2-7B geometry (DeepSeek-R1-Distill-Qwen-7B): 28 x 4 KV heads x 128
LLAMA1_CELL = 16 * 8 * 64 * 2 * 2  # Llama-3.2-1B: 16 layers x 8 KV heads x 64
HELDOUT = {
    # file -> (model, release, P as (GiB, +- GiB), A GiB, GPU for the estimate-only case, bytes per token)
    # PR 4760 has no pre-load line: P = A + the logged "mem usage" of the load, each +-0.005
    "pr-4760-llama-3.1-8b-instruct-dated-2025-03.log":
        ("llama-3.1-8b-instruct", "0.4.4", (63.48 + 15.11, 2 * HALF), 63.48, "H100-80GB", LLAMA8_CELL),
    # a 0.3.x build (Oct 2024); kvcalc's oldest line, 0.4.0, has the same rule for a dense TP-1 model
    "llm-tracker-mi300x-llama-3-8b-instruct-dated-2024-10.log":
        ("llama-3.1-8b-instruct", "0.4.0", (191.33, HALF), 176.33, "MI300X", LLAMA8_CELL),
    # second batch
    # its server_args fields are exactly sglang==0.4.2.post1's: enable_hierarchical_cache (absent in 0.4.2) is
    # printed, lora_backend (added in 0.4.2.post2: python/sglang/srt/server_args.py) is not
    "my-deepseek-r1-distill-qwen-7b-rtx3090-dated-2025-02.log":
        ("qwen2.5-7b", "0.4.2.post1", (22.76, HALF), 8.37, "RTX-3090", QWEN7_CELL),
    "docs-openai-api-llama-3.1-8b-instruct-dated-2024-11.log":  # a 0.3.x build, as above
        ("llama-3.1-8b-instruct", "0.4.0", (78.59, HALF), 63.50, "H100-80GB", LLAMA8_CELL),
    "docs-native-api-llama-3.2-1b-instruct-dated-2024-12.log":
        ("llama-3.2-1b", "0.4.1", (78.81, HALF), 76.39, "H100-80GB", LLAMA1_CELL),
}
# (b) misses. The RTX 3090 run missed when measured (+9.7 %, HELDOUT.md); with the RTX 3090 catalog total now
# vLLM's own 23.58 GiB reading and the fp32 RoPE table SGLang builds on the GPU while loading (0.4.2.post1+)
# it is inside the 0.25 GiB bound (HELDOUT.md keeps the before-figure as the held-out result).
HELDOUT_B_MISSES: set[str] = set()


def _heldout_range(file: str) -> tuple[int, int]:
    _model, _rel, (p, dp), a, _gpu, cell = HELDOUT[file]
    lo = (a - HALF) - (p + dp) * (1 - 0.88)
    hi = (a + HALF) - (p - dp) * (1 - 0.88)
    return int(lo * GIB) // cell, int(hi * GIB) // cell


@pytest.mark.parametrize("file", sorted(HELDOUT))
def test_heldout_tokens_from_logged_memory(file: str, run_json) -> None:
    """Acceptance (a) on the held-out logs: inside the range the printed figures allow."""
    lg = INDEX[file]["logged"]
    model, release, (p, _dp), a, _gpu, cell = HELDOUT[file]
    assert p == lg.get("avail_mem_before_weights_gb", lg["avail_mem_after_weights_gb"] + lg.get("weights_mem_usage_gb", 0))
    assert a == lg["avail_mem_after_weights_gb"]
    lo, hi = _heldout_range(file)
    logged = lg.get("kv_tokens", lg.get("max_total_num_tokens"))
    assert lo <= logged <= hi, "the hand rule itself must explain the log"
    out = run_json(
        "size", model, "--engine", "sglang", "--sglang-version", release,
        "--free-before-weights", f"{p:.2f}GiB", "--free-after-weights", f"{a}GiB", "--mem-fraction-static", "0.88",
    )
    pool = out["pool"]
    assert pool["bytes_per_token"] == cell
    assert lo <= pool["max_total_num_tokens"] <= hi
    if "k_size_gb" in lg:  # (tokens + 1 padding slot) x K bytes per token, 2 decimals
        assert gb((pool["max_total_num_tokens"] + 1) * cell // 2) == f"{lg['k_size_gb']:.2f}"


def _logged_kv_bytes(file: str) -> float:
    lg = INDEX[file]["logged"]
    if "k_size_gb" in lg:
        return (lg["k_size_gb"] + lg["v_size_gb"]) * GIB
    # no KV line in this build: the logged token count's buffers (+1 padding slot)
    return (lg["max_total_num_tokens"] + 1) * HELDOUT[file][5]


def _kv_from_gpu_only(file: str, run_json) -> float:
    model, release, _p, _a, gpu, _cell = HELDOUT[file]
    pool = run_json("size", model, "--engine", "sglang", "--sglang-version", release, "--gpu", gpu)["pool"]
    return pool["k_size_bytes"] + pool["v_size_bytes"]


@pytest.mark.parametrize("file", sorted(set(HELDOUT) - HELDOUT_B_MISSES))
def test_heldout_kv_size_from_gpu_only(file: str, run_json) -> None:
    """Acceptance (b): given only GPU, model and settings, within max(2 %, 0.25 GiB) of the logged KV size."""
    logged = _logged_kv_bytes(file)
    assert abs(_kv_from_gpu_only(file, run_json) - logged) <= max(0.02 * logged, 0.25 * GIB)


def test_heldout_b_share(run_json) -> None:
    """Acceptance (b) asks for >= 80 %; the known misses are misses (not hidden) and the share holds."""
    within = {}
    for file in HELDOUT:
        logged = _logged_kv_bytes(file)
        within[file] = abs(_kv_from_gpu_only(file, run_json) - logged) <= max(0.02 * logged, 0.25 * GIB)
    assert {f for f, ok in within.items() if not ok} == HELDOUT_B_MISSES
    assert sum(within.values()) / len(within) >= 0.8


def test_kv_line_starts_at_0_4_1_post6(run_json) -> None:
    """The 2024-12-29 docs run (a 0.4.1 .. 0.4.1.post5 build) prints no K/V line; sglang==0.4.1.post6 is the
    first release with one (python/sglang/srt/mem_cache/memory_pool.py:221). Same pool either way."""
    file = "docs-native-api-llama-3.2-1b-instruct-dated-2024-12.log"
    assert "KV Cache is allocated" not in (LOGS / file).read_text()
    args = ("--free-before-weights", "78.81GiB", "--free-after-weights", "76.39GiB", "--mem-fraction-static", "0.88")
    old = run_json("size", "llama-3.2-1b", "--engine", "sglang", "--sglang-version", "0.4.1", *args)["pool"]
    new = run_json("size", "llama-3.2-1b", "--engine", "sglang", "--sglang-version", "0.4.1.post6", *args)["pool"]
    assert old["kv_log_lines"] == []
    # (tokens + 1) x 16 x 8 x 64 x 2 B per buffer, 2 decimals
    k = gb((new["max_total_num_tokens"] + 1) * 16 * 8 * 64 * 2)
    assert new["kv_log_lines"] == [f"KV Cache is allocated. K size: {k} GB, V size: {k} GB."]
    assert old["max_total_num_tokens"] == new["max_total_num_tokens"]


# Acceptance (b) on the in-repo logs that name (or imply) their GPU and whose model kvcalc has: file -> (model, flags).
# The logged KV size is K + V (or the MLA KV size) as printed; the bound is max(2 %, 0.25 GiB) of it.
IN_REPO_B = {
    # 4x L4 (stated); mem_fraction_static 0.85 from server_args
    "llms-in-clouds-qwq-32b-0.4.3.post4.log": ("QWQ", ["--tp", "4", "--sglang-version", "0.4.3.post4", "--gpu", "L4",
                                                       "--mem-fraction-static", "0.85"]),
    # 80 GB card implied by 78.81 GiB free (docs CI: H100); 0.88 from server_args
    "docs-sglang-send-request-llama-3.1-8b-instruct-dated-2025-01.log": (
        "llama-3.1-8b-instruct", ["--sglang-version", "0.4.1.post6", "--gpu", "H100-80GB", "--mem-fraction-static", "0.88"],
    ),
    # B200 (backend warning), TP 4 from the prefixes; release and mem_fraction_static not logged: 0.5.10's default
    "pr-22537-qwen3-b200-unknown.log": ("qwen3-32b", ["--tp", "4", "--sglang-version", "0.5.10", "--gpu", "B200"]),
    # 4x H100 (stated), FP8 checkpoint, 0.93 on the command line; release not logged (KV line with #tokens, 2025-07)
    "vllm-issue-21348-qwen3-235b-a22b-fp8-unknown.log": (
        "qwen3-235b-a22b", ["--tp", "4", "--sglang-version", "0.4.6", "--gpu", "H100-80GB", "--quantization", "fp8",
                            "--mem-fraction-static", "0.93"],
    ),
}
# no pre-load or post-load figure is logged for it, so the +8 % cannot be attributed (docs/sglang-rules.md, accuracy)
IN_REPO_B_MISSES = {"vllm-issue-21348-qwen3-235b-a22b-fp8-unknown.log"}


def _in_repo_b(file: str, run_json, qwq: str) -> tuple[float, float]:
    lg = INDEX[file]["logged"]
    logged = (lg["k_size_gb"] + lg["v_size_gb"]) * GIB
    model, flags = IN_REPO_B[file]
    pool = run_json("size", _model(model, qwq), "--engine", "sglang", *flags)["pool"]
    return pool["k_size_bytes"] + pool["v_size_bytes"], logged


@pytest.mark.parametrize("file", sorted(IN_REPO_B))
def test_in_repo_kv_size_from_gpu_only(file: str, run_json, qwq: str) -> None:
    """Acceptance (b) on the in-repo logs: the known misses stay misses, the others are within the bound."""
    predicted, logged = _in_repo_b(file, run_json, qwq)
    assert (abs(predicted - logged) <= max(0.02 * logged, 0.25 * GIB)) == (file not in IN_REPO_B_MISSES)


def test_rtx3090_log_is_0_4_2_post1() -> None:
    """Its server_args print enable_hierarchical_cache (first in sglang==0.4.2.post1) and no lora_backend (added in
    0.4.2.post2): the release whose rules (the fp32 RoPE table, R13) the held-out estimate uses."""
    args = (LOGS / "my-deepseek-r1-distill-qwen-7b-rtx3090-dated-2025-02.log").read_text().split("server_args=ServerArgs(", 1)[1]
    assert "enable_hierarchical_cache=" in args and "lora_backend=" not in args
    assert HELDOUT["my-deepseek-r1-distill-qwen-7b-rtx3090-dated-2025-02.log"][1] == "0.4.2.post1"
