"""Every worked number of docs/design.md (the design's worked examples), reproduced with kvcalc.

Each expected value is a figure of docs/design.md, or its arithmetic written out here."""

from __future__ import annotations

KIB, MIB = 1024, 1024**2


def test_per_token_qwen3_0_6b(run_json):
    # docs/design.md section 2: 2 x 28 layers x 8 KV heads x 128 head_dim x 2 B (BF16) = 114688 B = 112 KiB
    d = run_json("size", "qwen3-0.6b", "--tokens", "4096")
    assert d["model"]["num_layers"] == 28 and d["model"]["num_kv_heads"] == 8 and d["model"]["head_dim"] == 128
    assert d["bytes_per_token"] == 2 * 28 * 8 * 128 * 2 == 114688 == 112 * KIB
    # 4096 tokens -> 448 MiB
    assert d["effective_bytes"] == 4096 * 114688 == 448 * MIB


def test_tp_table(run_json):
    # docs/design.md section 4: per-rank KV heads 8/4/2/1/1 (replicated at 16) -> 112/56/28/14/14 KiB per token
    expected = {1: (8, 112), 2: (4, 56), 4: (2, 28), 8: (1, 14), 16: (1, 14)}
    for tp, (heads, kib) in expected.items():
        d = run_json("size", "qwen3-0.6b", "--tokens", "1", "--tp", str(tp))
        assert d["ranks"][0]["kv_heads"] == heads
        assert d["bytes_per_token_per_rank"] == 2 * 28 * heads * 128 * 2 == kib * KIB
        assert d["ranks"][0]["kv_heads_replicated"] is (tp == 16)


def test_tp4_pp2_block16_per_rank(run_json):
    # seed kv_bytes(layers=28, tokens=4096, kv_heads=8, head_dim=128, tp=4, pp=2, block_size=16)
    d = run_json("size", "qwen3-0.6b", "--tokens", "4096", "--tp", "4", "--pp", "2", "--block-size", "16")
    assert {r["layers"][1] - r["layers"][0] for r in d["ranks"]} == {14}
    assert {r["kv_heads"] for r in d["ranks"]} == {2}
    assert d["block_rounded_bytes_per_rank"] == 2 * 14 * 4096 * 2 * 128 * 2 == 56 * MIB


def test_requests_17_and_32(run_json):
    # docs/design.md section 5: block 16, requests of 17 and 32 tokens: 2 + 2 blocks, 64 slots, 15 empty
    d = run_json("size", "qwen3-0.6b", "--requests", "17,32", "--block-size", "16")
    assert d["tokens"] == 17 + 32 == 49
    assert d["allocated_tokens"] == (2 + 2) * 16 == 64
    assert d["empty_slots"] == 15
    assert d["effective_bytes"] == 49 * 112 * KIB == 5488 * KIB
    assert d["block_rounded_bytes"] == 64 * 112 * KIB == 7 * MIB
    assert d["empty_slot_bytes"] == 15 * 112 * KIB  # ~1.64 MiB
    assert round(d["empty_slot_bytes"] / MIB, 2) == 1.64


def test_dp2_tp4_rank5(run_json):
    # seed: DP=2, TP=4 -> groups [0..3] and [4..7]; global rank 5 is TP rank 1, not 5
    d = run_json("ranks", "qwen3-0.6b", "--tp", "4", "--dp", "2")
    r5 = next(r for r in d["ranks"] if r["global_rank"] == 5)
    assert (r5["dp_rank"], r5["tp_rank"]) == (1, 1)
    assert [r["global_rank"] for r in d["ranks"] if r["dp_rank"] == 0] == [0, 1, 2, 3]


def test_dp_replicas_do_not_share(run_json):
    # DP copies the serving instance: a request's KV is not split across replicas
    one = run_json("size", "qwen3-0.6b", "--tokens", "4096")
    two = run_json("size", "qwen3-0.6b", "--tokens", "4096", "--dp", "2")
    assert two["effective_bytes_per_rank"] == one["effective_bytes_per_rank"] == 448 * MIB
    assert two["deployment"]["gpus"] == 2


def test_prompt_gen_caches_p_plus_g_minus_1(run_json):
    # docs/design.md section 1: P=4, G=5 -> the cache path processes P + (G - 1) = 8 positions
    d = run_json("size", "qwen3-0.6b", "--prompt", "4", "--gen", "5")
    assert d["tokens"] == 4 + 5 - 1 == 8
    assert d["effective_bytes"] == 8 * 114688
    cont = run_json("size", "qwen3-0.6b", "--prompt", "4", "--gen", "5", "--continuation")
    assert cont["tokens"] == 4 + 5  # a continuation keeps the last output's KV
