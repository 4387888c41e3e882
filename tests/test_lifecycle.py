"""`kvcalc lifecycle`: beams, speculative tokens, prefix caching, CPU offload.

Every expected number is derived by hand below from the model's config values:
qwen3-0.6b (Qwen/Qwen3-0.6B config.json): 28 layers, 8 KV heads, head_dim 128, bfloat16 ->
  one layer's page at block 16 = 16 tokens x 8 heads x (128 + 128) x 2 B = 65536 B,
  bytes per token = 2 x 28 x 8 x 128 x 2 = 114688 B (112 KiB, docs/design.md section 2).
gemma-2-9b (google/gemma-2-9b-it config.json): 42 layers alternating sliding (window 4096)
  and full, 8 KV heads, head_dim 256, bfloat16 -> page = 16 x 8 x 512 x 2 = 131072 B.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app
from kvcalc.core import lifecycle as lc
from kvcalc.core.footprint import StageSpecs
from kvcalc.core.model import LayerArch
from kvcalc.core.specs import AttentionSpec, MambaSpec, SlidingWindowSpec, StateTensor

QWEN_PAGE = 16 * 8 * (128 + 128) * 2  # 65536 B: one block of one layer, TP 1
QWEN_LAYERS = 28
GEMMA_PAGE = 16 * 8 * (256 + 256) * 2  # 131072 B


def run(*args: str) -> dict:
    res = CliRunner().invoke(build_app(["lifecycle"]), ["lifecycle", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def run_fail(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(build_app(["lifecycle"]), ["lifecycle", *args, "--format", "json"])
    return res.exit_code, res.output


# ------------------------------------------------------------------------------------ beams


def test_beams_qwen3_the_briefs_example():
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--beams", "4", "--block-size", "16")
    b = out["beams"]
    # each beam caches 100 + 20 - 1 = 119 positions -> cdiv(119, 16) = 8 blocks per layer
    # the prompt's full blocks: floor(100 / 16) = 6, stored once with reference count 4
    # each beam's own: 8 - 6 = 2 (the partial prompt block 6 holds positions 96..99 + its first
    # generated tokens, so it is already the beam's own; block 7 holds 112..118)
    # the group: 6 + 4 x 2 = 14 blocks per layer, instead of 4 x 8 = 32
    (g,) = b["stages"][0]["groups"]
    assert g["kind"] == "full" and g["layers"] == 28 and g["page_bytes"] == QWEN_PAGE
    assert g["shared_blocks"] == 100 // 16 == 6
    assert g["own_blocks"] == [8 - 6] * 4
    assert g["blocks"] == 6 + 4 * 2 == 14
    assert g["unshared_blocks"] == 4 * 8 == 32
    assert g["refcounts"] == [{"refcount": 4, "blocks": 6}]
    assert b["bytes_per_rank"] == 14 * 28 * 65536 == 25690112
    assert b["unshared_bytes_per_rank"] == 32 * 28 * 65536 == 58720256
    assert b["saved_bytes_per_rank"] == (32 - 14) * 28 * 65536
    assert b["bytes_per_replica"] == b["bytes_per_rank"]  # TP 1, PP 1


def test_beams_tp2_halves_the_page_and_doubles_the_replica():
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--beams", "4", "--tp", "2")
    b = out["beams"]
    page = 16 * (8 // 2) * 256 * 2  # 4 KV heads per rank -> 32768 B
    assert b["stages"][0]["groups"][0]["page_bytes"] == page
    assert b["bytes_per_rank"] == 14 * 28 * page
    assert b["bytes_per_replica"] == 2 * 14 * 28 * page


def test_beams_pp2_splits_the_layers():
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--beams", "4", "--pp", "2")
    b = out["beams"]
    # 28 layers / 2 stages = 14 each
    assert [s["groups"][0]["layers"] for s in b["stages"]] == [14, 14]
    assert b["bytes_per_rank"] == 14 * 14 * QWEN_PAGE
    assert b["bytes_per_replica"] == 2 * 14 * 14 * QWEN_PAGE


def test_beams_with_batch_count_every_group():
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--beams", "4", "--batch", "3")
    assert out["beams"]["copies"] == 3
    assert out["beams"]["bytes_per_rank"] == 3 * 14 * 28 * QWEN_PAGE


def test_beams_sliding_window_gemma2():
    out = run("gemma-2-9b", "--prompt", "5000", "--gen", "20", "--beams", "4")
    sliding, full = out["beams"]["stages"][0]["groups"]
    t = 5000 + 20 - 1  # 5019 positions per beam
    assert sliding["kind"] == "sliding" and full["kind"] == "full"
    assert sliding["layers"] == full["layers"] == 21
    # full layers: cdiv(5019, 16) = 314 blocks, 5000 // 16 = 312 shared, 2 own per beam
    assert full["shared_blocks"] == 312 and full["own_blocks"] == [314 - 312] * 4
    # sliding layers hold only blocks from (5019 - 4096) // 16 = 57 on: blocks 57..313 = 257
    # of them; the shared ones are 57..311 = 255; 2 own per beam
    assert (t - 4096) // 16 == 57
    assert sliding["shared_blocks"] == 312 - 57 == 255
    assert sliding["own_blocks"] == [2] * 4
    assert sliding["unshared_blocks"] == 4 * (314 - 57)
    per_rank = 21 * GEMMA_PAGE * (255 + 8) + 21 * GEMMA_PAGE * (312 + 8)
    assert out["beams"]["bytes_per_rank"] == per_rank


def test_beams_need_prompt_and_gen():
    code, output = run_fail("qwen3-0.6b", "--tokens", "100", "--beams", "4")
    assert code == 2 and "--beams needs --prompt and --gen" in output


def test_no_lifecycle_flag_is_an_error():
    code, output = run_fail("qwen3-0.6b", "--tokens", "100")
    assert code == 2 and "--beams" in output and "--offload" in output


# ----------------------------------------------------------------------------- prefix cache


def test_prefix_cache_three_requests():
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--batch", "3", "--prefix-cache", "64")
    (g,) = out["prefix_cache"]["stages"][0]["groups"]
    # common prefix 64 tokens = 4 full blocks, stored once (refcount 3);
    # each request holds cdiv(119, 16) = 8 blocks, 8 - 4 = 4 of them its own
    assert g["shared_blocks"] == 64 // 16 == 4
    assert g["refcounts"] == [{"refcount": 3, "blocks": 4}]
    assert g["own_blocks"] == [4, 4, 4]
    assert g["blocks"] == 4 + 3 * 4 == 16
    assert g["unshared_blocks"] == 3 * 8 == 24
    assert out["prefix_cache"]["bytes_per_rank"] == 16 * 28 * QWEN_PAGE


def test_prefix_cache_partial_block_is_per_request():
    # prefix 70 = 4 full blocks (64) + 6 tokens in a partial block: only the 4 are shared
    out = run("qwen3-0.6b", "--prompt", "100", "--gen", "20", "--batch", "2", "--prefix-cache", "70")
    (g,) = out["prefix_cache"]["stages"][0]["groups"]
    assert g["shared_blocks"] == 70 // 16 == 4
    assert g["own_blocks"] == [8 - 4, 8 - 4]


def test_prefix_cache_whole_prompt_loses_its_last_block():
    # two prompts of 32 tokens, both the common prefix. The first request computes and holds
    # blocks 0 and 1. The second may reuse at most 32 - 1 = 31 tokens (vLLM computes the last
    # prompt token for its logits): floor(31 / 16) = 1 block; it computes block 1 again.
    out = run("qwen3-0.6b", "--tokens", "32", "--batch", "2", "--prefix-cache", "32")
    (g,) = out["prefix_cache"]["stages"][0]["groups"]
    assert g["refcounts"] == [{"refcount": 2, "blocks": 1}, {"refcount": 1, "blocks": 1}]
    assert g["shared_blocks"] == 2
    assert g["own_blocks"] == [0, 1]
    assert g["blocks"] == 3 and g["unshared_blocks"] == 4


def test_prefix_longer_than_prompt_is_an_error():
    code, output = run_fail("qwen3-0.6b", "--requests", "17,32", "--prefix-cache", "20")
    assert code == 2 and "--prefix-cache 20" in output and "17" in output


# ------------------------------------------------------------------------- speculative tokens


def test_spec_tokens_cross_a_block_boundary():
    # 127 cached positions: a decode step writes position 127 -> 128 slots = 8 blocks;
    # verifying 3 drafts writes 127..130 -> 131 slots = cdiv(131, 16) = 9 blocks: 1 more
    out = run("qwen3-0.6b", "--tokens", "127", "--spec-tokens", "3")
    s = out["spec_decode"]
    (g,) = s["stages"][0]["groups"]
    assert (g["decode_blocks"], g["verify_blocks"], g["extra_blocks"]) == (8, 9, 1)
    assert s["extra_slots_per_request"] == 3
    assert s["extra_bytes_per_rank"] == 1 * 28 * QWEN_PAGE == 1835008
    # at most cdiv(3, 16) = 1 block per layer per request
    assert s["worst_extra_bytes_per_request_per_rank"] == 28 * QWEN_PAGE


def test_spec_tokens_within_a_block_need_nothing_more():
    # 100 positions: 101 slots = 7 blocks; 104 slots = 7 blocks
    out = run("qwen3-0.6b", "--tokens", "100", "--spec-tokens", "3")
    assert out["spec_decode"]["extra_bytes_per_rank"] == 0


def test_spec_lookahead_adds_slots():
    # 100 positions, 3 drafts + 3 lookahead: 101 + 6 = 107 slots... still 7 blocks;
    # with 10 drafts + 10 lookahead: 121 slots = 8 blocks -> 1 more; worst cdiv(20, 16) = 2
    out = run("qwen3-0.6b", "--tokens", "100", "--spec-tokens", "10", "--spec-lookahead", "10")
    s = out["spec_decode"]
    assert s["extra_slots_per_request"] == 20
    assert s["stages"][0]["groups"][0]["extra_blocks"] == 1
    assert s["stages"][0]["groups"][0]["worst_extra_blocks_per_request"] == 2


def test_spec_capped_at_max_model_len():
    # 127 positions at max_model_len 128: the slots stop at 128 -> no 9th block
    out = run("qwen3-0.6b", "--tokens", "127", "--spec-tokens", "3", "--max-model-len", "128")
    assert out["spec_decode"]["extra_bytes_per_rank"] == 0


def test_spec_on_state_layers_core():
    # a synthetic stage: one full layer (2 heads x 4 dims, 2 B) and one state layer of 1000 B
    full = AttentionSpec(block_size=4, num_kv_heads=2, head_size=4, head_size_v=4, dtype_bytes=2)
    mamba = MambaSpec(block_size=4, tensors=(StateTensor((10, 50), 2),))  # 10 x 50 x 2 = 1000 B
    stage = StageSpecs(0, (0, 2), ((LayerArch(0, "full"), full), (LayerArch(1, "mamba"), mamba)), 2, False)
    r = lc.speculative([stage], tp=1, requests=[6], spec_tokens=2)
    fg, mg = r.stages[0]
    # full: 7 slots = cdiv(7, 4) = 2 blocks; 9 slots = 3 blocks; page 4 x 2 x 8 x 2 = 128 B
    assert (fg.decode_blocks, fg.verify_blocks, fg.page_bytes) == (2, 3, 128)
    # state: 1 block without drafts, 1 + 2 speculative state blocks with them
    assert (mg.decode_blocks, mg.verify_blocks, mg.page_bytes) == (1, 3, 1000)
    assert r.per_rank("extra_bytes") == 128 + 2 * 1000


# ------------------------------------------------------------------------------ shared core


def test_share_spec_sliding_window_core():
    # block 4, window 4, two sharers of 10 positions sharing 8: the window is 6..9 -> blocks
    # (10 - 4) // 4 = 1 .. cdiv(10, 4) - 1 = 2, i.e. 2 blocks; shared blocks [0, 8 // 4 = 2)
    # intersect [1, 3) = block 1; own = block 2 each
    spec = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=2, head_size_v=2, dtype_bytes=1, window=4)
    shared, own, unshared, refs = lc.share_spec(spec, [lc.Sharer(10, 8), lc.Sharer(10, 8)])
    assert (shared, own, unshared, refs) == (1, (1, 1), 4, ((2, 1),))


def test_share_spec_mixed_lengths_refcounts_core():
    # block 4, full attention, sharers of 20, 9 and 3 positions, all with a 12-token prefix:
    # prefix blocks [0, 3); the 20-token one holds 0..4, the 9-token one 0..2, the 3-token one 0
    # -> block 0 refcount 3, blocks 1-2 refcount 2; own: 5-3=2, 3-3=0, 1-1=0
    spec = AttentionSpec(block_size=4, num_kv_heads=1, head_size=2, head_size_v=2, dtype_bytes=1)
    shared, own, unshared, refs = lc.share_spec(spec, [lc.Sharer(20, 12), lc.Sharer(9, 12), lc.Sharer(3, 12)])
    assert refs == ((3, 1), (2, 2))
    assert shared == 3 and own == (2, 0, 0) and unshared == 5 + 3 + 1


# ----------------------------------------------------------------------------------- offload


def test_offload_qwen3_10gib():
    out = run("qwen3-0.6b", "--tokens", "100", "--offload", "10GiB")
    off = out["offload"]
    block = 16 * 114688  # one block of all 28 layers on the one rank = 1835008 B = 448 x 4096
    assert off["block_bytes_per_rank"] == block and block % 4096 == 0
    assert off["blocks"] == (10 * 2**30) // block == 5851  # 5851 x 1835008 = 10736631808 <= 10 GiB
    assert off["tokens"] == 5851 * 16 == 93616


def test_offload_rounds_chunks_to_the_host_page():
    # int8_per_token_head: per (token, head) 128 + 128 bytes + 8 B of scales = 264 B;
    # per token 28 x 8 x 264 = 59136 B; block size 1 -> 59136 B = 14.4 host pages -> 15 x 4096 = 61440
    out = run("qwen3-0.6b", "--tokens", "100", "--offload", "10MiB", "--kv-dtype", "int8_per_token_head",
              "--block-size", "1")
    off = out["offload"]
    assert off["bytes_per_token_per_rank"] == 28 * 8 * 264 == 59136
    assert off["chunk_bytes"] == 15 * 4096 == 61440
    assert off["tokens"] == (10 * 2**20) // 61440 == 170  # not 10 MiB // 59136 = 177


def test_offload_tp_divides_the_tier():
    # TP 2: each rank's block is half (4 heads); the tier is summed over 2 ranks -> same tokens
    one = run("qwen3-0.6b", "--tokens", "100", "--offload", "10GiB")["offload"]
    two = run("qwen3-0.6b", "--tokens", "100", "--offload", "10GiB", "--tp", "2")["offload"]
    assert two["block_bytes_per_rank"] == one["block_bytes_per_rank"] // 2
    assert two["cpu_bytes_per_rank"] == 5 * 2**30
    assert two["tokens"] == one["tokens"]


def test_offload_bad_size():
    code, output = run_fail("qwen3-0.6b", "--tokens", "100", "--offload", "lots")
    assert code == 2 and "--offload" in output


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_lifecycle_renders_for_people(fmt):
    res = CliRunner().invoke(
        build_app(["lifecycle"]),
        ["lifecycle", "qwen3-0.6b", "--prompt", "100", "--gen", "20", "--beams", "4", "--spec-tokens", "3",
         "--prefix-cache", "64", "--offload", "1GiB", "--format", fmt],
    )
    assert res.exit_code == 0, res.output
    for words in ("Beam search", "Speculative decoding", "prefix caching", "CPU offload", "6 x ref 4"):
        assert words in res.stdout
