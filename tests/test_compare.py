"""`kvcalc compare`: attention variants (docs/design.md section 3), docs/design.md's TP figures, rows kept
with their reason, several models side by side, sweeps. Every expected number is derived by
hand below from the models' config.json files (the bundled presets) and docs/design.md's formulas."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_app(["compare"]), ["compare", *args])
    return result.exit_code, result.stdout, result.stderr


def rows(*args: str) -> list[dict]:
    code, out, err = run(*args, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, list)
    return data


@pytest.fixture
def seed_model(tmp_path):
    """The seed's section-3 example: N_q = 16, D = 64, and a GQA of N_kv = 4. Built from the
    real Qwen3-0.6B config (28 layers, bf16) with head_dim 64 and 4 KV heads."""
    from kvcalc.sources import presets

    cfg = dict(presets.find("qwen3-0.6b").load()["config"])
    cfg.update(head_dim=64, num_key_value_heads=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_seed_section3_table_b2_t128_nq16_d64(seed_model):
    data = rows(seed_model, "--attention", "mha,gqa,mqa", "--batch", "2", "--tokens", "128")
    assert [r["variant"]["key"] for r in data] == ["mha", "gqa", "mqa"]
    # docs/design.md section 3: Q always [2,128,16,64]; K/V [2,128,N_kv,64]; one KV head serves N_q / N_kv Q heads
    expected = {"mha": (16, 16 // 16), "gqa": (4, 16 // 4), "mqa": (1, 16 // 1)}
    for r in data:
        v = r["variant"]
        n_kv, per = expected[v["key"]]
        assert v["num_query_heads"] == 16
        assert v["num_kv_heads"] == n_kv
        assert v["q_shape"] == [2, 128, 16, 64]
        assert v["k_shape"] == [2, 128, n_kv, 64]
        assert v["v_shape"] == [2, 128, n_kv, 64]
        assert v["query_heads_per_kv_head"] == per
        # C_KV per token = 2 L N_kv D e = 2 x 28 x N_kv x 64 x 2 (bf16)
        assert r["bytes_per_token"] == 2 * 28 * n_kv * 64 * 2
        # B x T = 2 x 128 = 256 cached positions, block size 16 divides 128: nothing rounded
        assert r["effective_bytes"] == 256 * 2 * 28 * n_kv * 64 * 2
        assert r["block_rounded_bytes"] == r["effective_bytes"]
        assert r["model"]["num_kv_heads"] == n_kv
        assert r["error"] is None
    # the config's own 4 KV heads is the real model; MHA and MQA are hypothetical
    assert [r["variant"]["hypothetical"] for r in data] == [True, False, True]
    # payload 16 : 4 : 1
    assert data[0]["variant"]["payload_ratio"] == "16:4:1"

    code, out, _ = run(seed_model, "--attention", "mha,gqa,mqa", "--batch", "2", "--tokens", "128")
    assert code == 0
    for shape in ("[2,128,16,64]", "[2,128,4,64]", "[2,128,1,64]"):
        assert shape in out
    assert "hypothetical" in out
    assert "capacity ratio is not a speed ratio" in out


def test_qwen3_06b_mha_gqa_mqa_ratio_16_8_1():
    # Qwen3-0.6B: 28 layers, 16 query heads, 8 KV heads, head_dim 128, bf16 (its config.json)
    data = rows("qwen3-0.6b", "--attention", "mha,gqa,mqa", "--batch", "2", "--tokens", "128")
    bpt = {n_kv: 2 * 28 * n_kv * 128 * 2 for n_kv in (16, 8, 1)}  # 229376, 114688, 14336
    assert [r["bytes_per_token"] for r in data] == [bpt[16], bpt[8], bpt[1]]
    assert [r["variant"]["payload_part"] for r in data] == [16, 8, 1]
    assert {r["variant"]["payload_ratio"] for r in data} == {"16:8:1"}
    assert [r["variant"]["payload_vs_mha"] for r in data] == [1.0, 8 / 16, 1 / 16]
    assert [r["variant"]["query_heads_per_kv_head"] for r in data] == [1, 2, 16]
    assert [r["variant"]["hypothetical"] for r in data] == [True, False, True]
    assert data[1]["variant"]["k_shape"] == [2, 128, 8, 128]
    code, out, _ = run("qwen3-0.6b", "--attention", "mha,gqa,mqa", "--tokens", "128")
    assert "MHA:GQA:MQA = 16:8:1" in out


def test_gqa_with_count_and_invalid_counts():
    data = rows("qwen3-0.6b", "--attention", "gqa:4,gqa:3", "--tokens", "16")
    assert data[0]["variant"]["num_kv_heads"] == 4
    assert data[0]["bytes_per_token"] == 2 * 28 * 4 * 128 * 2
    assert data[1]["error"] and "gqa:3" in data[1]["error"] and "gqa:2, gqa:4, gqa:8" in data[1]["error"]
    # a syntax error aborts: one line, exit 2
    code, out, err = run("qwen3-0.6b", "--attention", "mla")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--attention" in err


def test_mla_model_has_no_variants():
    data = rows("deepseek-v3", "qwen3-0.6b", "--attention", "mha", "--tokens", "16")
    assert "MLA" in data[0]["error"] and data[0]["variant"]["key"] == "mha"
    assert data[1]["error"] is None
    # every row impossible -> the comparison is bad input
    code, _, err = run("deepseek-v3", "--attention", "mha,mqa")
    assert code == 2 and "MLA" in err and err.count("\n") == 1


def test_seed_tp_table_112_56_28_14_14():
    data = rows("qwen3-0.6b", "--tp", "1,2,4,8,16", "--tokens", "1")
    # 2 x 28 layers x (8 / TP) KV heads x 128 x 2 B; at TP 16 > 8 KV heads one replicated head per rank
    per_rank_heads = {1: 8, 2: 4, 4: 2, 8: 1, 16: 1}
    assert [r["parallel"]["tp"] for r in data] == [1, 2, 4, 8, 16]
    got = [r["bytes_per_token_per_rank"] for r in data]
    assert got == [2 * 28 * per_rank_heads[tp] * 128 * 2 for tp in (1, 2, 4, 8, 16)]
    assert got == [112 * KIB, 56 * KIB, 28 * KIB, 14 * KIB, 14 * KIB]  # docs/design.md section 4
    replicated = [any(x["kv_heads_replicated"] for x in r["ranks"]) for r in data]
    assert replicated == [False, False, False, False, True]
    assert [r["label"] for r in data] == [f"qwen3-0.6b tp={tp}" for tp in (1, 2, 4, 8, 16)]
    code, out, _ = run("qwen3-0.6b", "--tp", "1,2,4,8,16", "--tokens", "1")
    assert code == 0 and "1 (replicated)" in out and "112 KiB" in out and "14 KiB" in out


def test_invalid_tp_row_is_kept_with_its_reason():
    data = rows("qwen3-0.6b", "--tp", "1,3,2")
    assert len(data) == 3
    assert data[0]["error"] is None and data[2]["error"] is None
    assert "--tp 3" in data[1]["error"] and "16 attention heads" in data[1]["error"]
    assert data[1]["sweep"] == {"tp": 3}
    code, out, _ = run("qwen3-0.6b", "--tp", "1,3")
    assert code == 0 and "--tp 3 does not divide" in out
    # a list that cannot be parsed is bad input, not a row
    code, out, err = run("qwen3-0.6b", "--tp", "1,x")
    assert code == 2 and out == "" and "--tp" in err


def test_several_models_side_by_side():
    models = ["qwen3-8b", "llama-3.1-8b", "mistral-7b-v0.1", "gemma-2-9b"]
    data = rows(*models, "--tokens", "32768")
    assert [r["label"] for r in data] == models  # as given
    t = 32768
    # Qwen3-8B: 36 layers, 8 KV heads, head_dim 128, bf16
    qwen = 2 * 36 * 8 * 128 * 2
    # Llama-3.1-8B: 32 layers, 8 KV heads, 128 (4096 hidden / 32 heads)
    llama = 2 * 32 * 8 * 128 * 2
    # Mistral-7B-v0.1: the same shape, every layer a 4096-token sliding window
    mistral = 2 * 32 * 8 * 128 * 2
    # Gemma-2-9B: 42 layers (21 sliding 4096 + 21 global), 8 KV heads, head_dim 256
    gemma_layer = 2 * 8 * 256 * 2
    gemma = 42 * gemma_layer
    assert [r["bytes_per_token"] for r in data] == [qwen, llama, mistral, gemma]
    assert [r["model"]["attention"] for r in data] == ["GQA", "GQA", "GQA + sliding", "GQA + sliding"]
    eff = [r["effective_bytes"] for r in data]
    assert eff[0] == t * qwen and eff[1] == t * llama
    assert eff[2] == 4096 * mistral  # only the window is held
    assert eff[3] == 21 * gemma_layer * t + 21 * gemma_layer * 4096
    # 32768 and 4096 are multiples of 16 and the windows start on block boundaries: no rounding
    assert [r["block_rounded_bytes"] for r in data] == eff
    # --sort bytes_per_token: smallest first, ties kept in the given order
    data = rows(*models, "--tokens", "32768", "--sort", "bytes_per_token")
    assert [r["label"] for r in data] == ["llama-3.1-8b", "mistral-7b-v0.1", "qwen3-8b", "gemma-2-9b"]
    code, _, err = run("qwen3-8b", "--sort", "speed")
    assert code == 2 and "--sort" in err


def test_sweep_is_a_cartesian_product():
    data = rows("llama-3.1-70b", "--tp", "4,8", "--kv-dtype", "bfloat16,fp8", "--tokens", "1000")
    combos = [(r["parallel"]["tp"], r["kv_dtype"]) for r in data]
    assert combos == [(4, "bfloat16"), (4, "fp8"), (8, "bfloat16"), (8, "fp8")]
    # Llama-3.1-70B: 80 layers, 8 KV heads, 128; per rank 8 / TP heads; fp8 is 1 B per element
    expected = [2 * 80 * (8 // tp) * 128 * (2 if dt == "bfloat16" else 1) for tp, dt in combos]
    assert [r["bytes_per_token_per_rank"] for r in data] == expected
    # 1000 tokens in blocks of 16 and 32: 63 x 16 = 1008 and 32 x 32 = 1024 slots
    data = rows("qwen3-0.6b", "--block-size", "16,32", "--tokens", "1000")
    assert [r["allocated_tokens"] for r in data] == [63 * 16, 32 * 32]


def test_pool_figures_per_variant():
    # a fixed 1 GiB pool: vLLM cuts it into blocks of 16 tokens x every layer's page:
    # num_blocks = 1 GiB // (28 layers x 16 x 2 x N_kv x 128 x 2 B); max concurrency at
    # max_model_len 40960 = num_blocks / (40960 / 16) blocks per request
    data = rows("qwen3-0.6b", "--attention", "mha,gqa,mqa", "--kv-cache-memory", "1GiB", "--tokens", "4096")
    for r, n_kv in zip(data, (16, 8, 1)):
        blocks = GIB // (28 * 16 * 2 * n_kv * 128 * 2)
        assert r["pool"]["num_blocks"] == blocks
        assert r["pool"]["pool_tokens"] == blocks * 16
        assert r["pool"]["max_concurrency"] == pytest.approx(blocks / (40960 // 16))
    code, out, _ = run("qwen3-0.6b", "--attention", "mha,gqa,mqa", "--kv-cache-memory", "1GiB", "--tokens", "4096",
                       "--sort", "pool_tokens")
    assert code == 0 and "pool tokens" in out and "max concurrency" in out
    lines = [ln for ln in out.splitlines() if "(hypothetical)" in ln or "(the model's own)" in ln]
    assert [ln.split()[0] for ln in lines[:3]] == ["MQA", "GQA", "MHA"]  # most tokens first


def test_markdown_format():
    code, out, _ = run("qwen3-0.6b", "--tp", "1,2", "--tokens", "16", "--format", "markdown")
    assert code == 0
    assert "| model | tp |" in out and "| qwen3-0.6b | 2 |" in out
