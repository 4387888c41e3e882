"""Speculative decoding in vLLM's KV cache (kvcalc.core.speculative, kvcalc.app.speculation): the drafter's
layers, a hybrid model's widened conv states and speculative state pages, the flag's parsing and its errors.

The real runs are public vLLM start-up logs (tests/data/vllm-logs/, sources in INDEX.json); every expected
figure is worked out by hand below from the model's config and the logged memory, under the rules of the
log's release (docs/vllm-releases.md section 12 cites each rule in vLLM's code).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app

APP = build_app(["probe"])
LOGS = Path(__file__).parent / "data" / "vllm-logs"
CONFIGS = LOGS / "configs"
INDEX = {e["file"]: e for e in json.loads((LOGS / "INDEX.json").read_text())}
GIB = 1 << 30
Q27 = str(CONFIGS / "qwen3.6-27b-nvfp4.json")
Q35 = str(CONFIGS / "qwen3.6-35b-a3b-nvfp4.json")


def ends(gib: str) -> tuple[int, int]:
    v = Decimal(gib)
    return math.ceil((v - Decimal("0.005")) * GIB), math.floor((v + Decimal("0.005")) * GIB)


def probe(model: str, log: str) -> dict:
    result = CliRunner().invoke(APP, ["probe", model, "--from-vllm-log", str(LOGS / log), "--vllm-version",
                                      INDEX[log]["vllm_version"], "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def rows(report: dict) -> dict[str, dict]:
    return {m["what"]: m for m in report["checks"][0]["measurements"]}


def agrees(model: str, log: str, lo: int, hi: int, logged: int) -> dict[str, dict]:
    """The probe's token range for ``log`` is [lo, hi] and agrees with the logged count; its rows."""
    m = rows(probe(model, log))
    size = m["GPU KV cache size"]
    assert (size["predicted_min"], size["predicted_max"], size["measured"], size["verdict"]) == (lo, hi, logged, "agree")
    return m


def gdn_page(k_heads: int, v_heads: int, head: int, k: int, tp: int) -> int:
    """A gated-delta-net layer's state page on one rank: conv (2 x key + value channels) x (kernel 4 - 1 + K)
    positions in bf16, and the fp32 temporal state (the config's mamba_ssm_dtype) v_heads x head x head."""
    conv = (2 * k_heads * head + v_heads * head) // tp * (4 - 1 + k) * 2
    return conv + v_heads // tp * head * head * 4


def block_for(state_page: int, token_bytes: int) -> int:
    """vLLM's attention block: the smallest multiple of 16 tokens whose page holds a state page."""
    return -(-state_page // (token_bytes * 16)) * 16


def hybrid(kv_heads: int, v_heads: int, k: int, tp: int) -> tuple[int, int, int]:
    """A Qwen3.6 rank's fp8 attention bytes per token and layer (KV heads x 256 x K and V x 1 B), its GDN state
    page (16 key heads of 128) and the attention block that page asks for."""
    token = kv_heads // tp * 256 * 2 * 1
    page = gdn_page(16, v_heads, 128, k=k, tp=tp)
    return token, page, block_for(page, token)


# --------------------------------------------------------------- MTP on Qwen3.6 hybrids, three real starts


def test_qwen3_6_27b_mtp_tp1_0_23_1():
    # nvidia/Qwen3.6-27B-NVFP4 with its MTP module, 2 draft tokens, fp8 KV, prefix caching ('align'), 262,144.
    # 16 full-attention layers + 1 MTP layer (full attention, the target's 4 KV heads x 256): 17 against 48 GDN
    # layers -> groups of 17 (48 >= 1.5 x 17), GDN in cdiv(48, 17) = 3 groups ("Add 3 padding layers").
    token, page, block = hybrid(4, 48, k=2, tp=1)
    assert page == 10240 * 5 * 2 + 48 * 128 * 128 * 4 == 3_248_128
    assert block == 1600  # the log: "Setting attention block size to 1600 tokens"
    lo, hi = (b // (17 * block * token) for b in ends("48.6"))
    assert lo == hi == 936
    # per request: 164 attention blocks + 3 GDN groups x (2 'align' pages + 2 speculative)
    need = -(-262144 // block) + 3 * (2 + 2)
    assert need == 176
    tokens = int(936 / need * 262144)  # 0.23: int(concurrency x max_model_len)
    assert (tokens, round(936 / need, 2)) == (1_394_129, 5.32)  # the log's figures
    m = agrees(Q27, "qwen3.6-27b-nvfp4-mtp2-tp1-0.23.1rc1.log", tokens, tokens, 1_394_129)
    assert m["Maximum concurrency for 262,144 tokens"]["verdict"] == "agree"


def test_qwen3_6_27b_mtp_tp2_0_23_0():
    # the same shape at TP 2 (2 KV heads and half the GDN channels per rank), 3 draft tokens, prefix caching off
    # (0.23's default for hybrids: 1 + 3 state pages per request), 65,535 tokens, rank 0's 2.04 GiB
    token, page, block = hybrid(4, 48, k=3, tp=2)
    assert (page, block) == (5120 * 6 * 2 + 24 * 128 * 128 * 4, 1600)  # "Setting attention block size to 1600 tokens"
    lo, hi = (b // (17 * block * token) for b in ends("2.04"))
    assert lo == hi == 78
    need = -(-65535 // block) + 3 * (1 + 3)
    tokens = int(78 / need * 65535)
    assert (need, tokens, round(78 / need, 2)) == (53, 96_447, 1.47)
    agrees(Q27, "p2pbench-qwen3.6-27b-nvfp4-mtp3-tp2-0.23.0.log", tokens, tokens, 96_447)


def test_qwen3_6_35b_a3b_mtp_tp1_0_20_0():
    # Qwen3.6-35B-A3B: 10 full-attention layers (2 KV heads x 256) + 1 MTP layer against 30 GDN layers (32 value
    # heads) -> groups of 11, GDN in 3 groups; 2 draft tokens, 'align', fp8_e4m3, 262,144
    token, page, block = hybrid(2, 32, k=2, tp=1)
    assert (page, block) == (8192 * 5 * 2 + 32 * 128 * 128 * 4, 2128)  # "Setting attention block size to 2128 tokens"
    lo, hi = (b // (11 * block * token) for b in ends("66.37"))
    assert (lo, hi) == (2972, 2973)
    need = -(-262144 // block) + 3 * (2 + 2)
    assert need == 136 and round(2973 / need, 2) == 21.86 and round(2972 / need, 2) == 21.85
    # 0.20.0 prints blocks // groups x block size: 2973 // 4 x 2128 = 1,581,104 (2972 gives the same)
    assert 2973 // 4 * block == 2972 // 4 * block == 1_581_104
    m = agrees(Q35, "qwen3.6-35b-a3b-nvfp4-mtp2-tp1-0.20.0.log", 1_581_104, 1_581_104, 1_581_104)
    assert m["Maximum concurrency for 262,144 tokens"]["verdict"] == "agree"


@pytest.mark.parametrize(
    ("log", "k", "block", "gib", "mml", "blocks", "need", "tokens"),
    [
        # K = 3: the conv state keeps 3 + 3 positions, a page of 3,268,608 B -> 1600-token blocks, "Padding mamba
        # page size by 0.25%" (3,276,800 / 3,268,608); 131,072 tokens: 82 + 3 x (2 + 3) = 97 blocks a request
        ("sakamakismile-qwen3.6-27b-text-nvfp4-mtp3-0.20.0.log", 3, 1600, "6.56", 131072, 126, 97, 126 // 4 * 1600),
        # K = 1: 3 + 1 positions, 3,227,648 B -> 1584-token blocks, padded by 0.51 %; 65,536: 42 + 3 x (2 + 1) = 51
        ("sakamakismile-qwen3.6-27b-text-nvfp4-mtp1-eager-0.20.0.log", 1, 1584, "4.8", 65536, 93, 51, 93 // 4 * 1584),
    ],
)
def test_one_checkpoint_two_draft_token_counts_0_20_0(log, k, block, gib, mml, blocks, need, tokens):
    # the same Qwen3.6-27B MTP checkpoint, TP 1, fp8, 'align', started twice on vLLM 0.20.0 with 3 and 1 draft tokens:
    # K moves the attention block and the pages a request holds (0.20.0 prints blocks // 4 groups x block size)
    token, page, b = hybrid(4, 48, k=k, tp=1)
    assert (page, b) == (10240 * (3 + k) * 2 + 48 * 128 * 128 * 4, block)
    lo, hi = (x // (17 * block * token) for x in ends(gib))
    assert lo == hi == blocks and -(-mml // block) + 3 * (2 + k) == need
    logged = INDEX[log]["logged"]
    assert (tokens, round(blocks / need, 2)) == (logged["gpu_kv_cache_tokens"], logged["max_concurrency"])
    m = agrees(Q27, log, tokens, tokens, tokens)
    assert m[f"Maximum concurrency for {mml:,} tokens"]["verdict"] == "agree"


def test_qwen3_6_35b_a3b_without_speculation_0_24_0():
    # club-3090#612 runs the same shape without a drafter (a check of the config): 10 full against 30 GDN
    # layers -> groups of 10; GDN conv keeps 3 positions; 'align' = 2 pages; 131,072 tokens, 5.98 GiB
    token, page, block = hybrid(2, 32, k=0, tp=1)
    assert (page, block) == (2_146_304, 2096)
    lo, hi = (b // (10 * block * token) for b in ends("5.98"))
    assert (lo, hi) == (298, 299)
    need = -(-131072 // block) + 3 * 2
    assert need == 69 and int(299 / need * 131072) == 567_978
    agrees(Q35, "club-3090-612-qwen3.6-35b-a3b-nvfp4-0.24.0.log", int(298 / need * 131072), 567_978, 567_978)


# --------------------------------------------------------------- the drafter's layers, by method


def test_mtp_adds_the_checkpoints_modules_with_the_targets_geometry(run_json):
    # DeepSeek-V3: 61 MLA layers of 576 elements (kv_lora_rank 512 + rope 64) in bf16 = 70,272 B per token;
    # its one MTP module (num_nextn_predict_layers 1) is a 62nd MLA layer: 62 x 1,152 = 71,424
    plain = run_json("size", "deepseek-v3", "--tokens", "1000")
    spec = run_json("size", "deepseek-v3", "--tokens", "1000", "--speculative-config",
                    '{"method": "deepseek_mtp", "num_speculative_tokens": 1}')
    assert (plain["bytes_per_token"], spec["bytes_per_token"]) == (61 * 576 * 2, 62 * 576 * 2)
    assert "speculative" not in plain["model"] and spec["model"]["speculative"] == {
        "method": "mtp", "num_speculative_tokens": 1, "draft_layers": 1, "draft_model": None}
    assert spec["model"]["num_layers"] == 61 and spec["model"]["layer_groups"][0]["layers"] == 62
    assert any("1 MTP layer with its own KV" in n for n in spec["notes"])
    assert not any("add their own cache only with speculative decoding" in n for n in spec["notes"])
    # 3 draft tokens still build one module (steps beyond reuse it)
    k3 = run_json("size", "deepseek-v3", "--tokens", "1000", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    assert k3["bytes_per_token"] == 62 * 576 * 2


def test_ngram_adds_no_layer_but_a_hybrids_state_grows(run_json):
    # Llama-3.1-8B: 32 x 8 x 128 x 2 x 2 B = 131,072 B per token with or without n-gram drafting
    plain = run_json("size", "llama-3.1-8b", "--tokens", "1000")
    ngram = run_json("size", "llama-3.1-8b", "--tokens", "1000", "--speculative-config",
                     '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')
    assert plain["bytes_per_token"] == ngram["bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    # Qwen3-Next-80B (48 layers: 12 full + 36 GDN; 16 key / 32 value heads of 128; conv kernel 4), TP 1, bf16:
    # n-gram drafting with 2 tokens widens every GDN conv state by 2 positions and holds 1 + 2 state pages
    state = run_json("size", "qwen3-next-80b-a3b-thinking", "--tokens", "1000", "--vllm-version", "0.20.0",
                     "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}')
    gdn = next(g for g in state["model"]["layer_groups"] if g["kind"] == "mamba")
    conv = (2 * 16 * 128 + 32 * 128) * (3 + 2) * 2
    temporal = 32 * 128 * 128 * 2
    assert gdn["state_bytes_per_request_per_layer"] == (conv + temporal) * (1 + 2)
    assert gdn["layers"] == 36 and state["bytes_per_token"] == 12 * 2 * 256 * 2 * 2


def test_a_draft_models_layers_are_counted_at_the_targets_tp(run_json, tmp_path):
    # an EAGLE-3 head written for this test: one Llama layer of 8 KV heads x 128 (the shape of Llama-3.1-8B's
    # heads); it joins Llama-3.1-8B's group: 33 layers x 8 x 128 x 2 x 2 B per token at TP 1, 33 x 2 x ... at TP 4
    path = Path(_eagle3_head(tmp_path))
    flag = json.dumps({"method": "eagle3", "model": str(path), "num_speculative_tokens": 3})
    r = run_json("size", "llama-3.1-8b", "--tokens", "1000", "--speculative-config", flag)
    assert r["bytes_per_token"] == 33 * 8 * 128 * 2 * 2
    assert any("1 draft layer of" in n for n in r["notes"])
    tp4 = run_json("size", "llama-3.1-8b", "--tokens", "1000", "--tp", "4", "--speculative-config", flag)
    assert tp4["bytes_per_token_per_rank"] == 33 * 2 * 128 * 2 * 2
    # a draft whose repo name says EAGLE-3 is one, as vLLM detects it (method left out: a draft model)
    named = tmp_path / "my-eagle3-head"
    named.mkdir()
    (named / "config.json").write_text((path / "config.json").read_text())
    auto = run_json("size", "llama-3.1-8b", "--tokens", "1000", "--speculative-config",
                    json.dumps({"model": str(named), "num_speculative_tokens": 2}))
    assert auto["bytes_per_token"] == 33 * 8 * 128 * 2 * 2 and any("(eagle3, 2 draft tokens)" in n for n in auto["notes"])


def test_drafter_layers_sit_on_the_last_pp_stage(run_json):
    # Qwen3-Next's MTP layer at PP 2: 24 + 24 layers, stage 0 holds 6 full-attention layers, stage 1 the other 6
    # and the MTP layer (vLLM builds the drafter on the last PP rank)
    r = run_json("size", "qwen3-next-80b-a3b-thinking", "--tokens", "1000", "--pp", "2", "--speculative-config",
                 '{"method": "mtp", "num_speculative_tokens": 1}')
    per_layer = 2 * 256 * 2 * 2
    assert [x["bytes_per_token"] for x in r["ranks"]] == [6 * per_layer, 7 * per_layer]


def test_speculative_state_pages_count_from_0_15():
    # vLLM 0.11.1-0.14 allocates the K speculative state pages but leaves them out of the pool's sizing
    # (MambaSpec.max_memory_usage_bytes: one page); from 0.15 'none' counts 1 + K
    from kvcalc.app.service import evaluate
    from kvcalc.app.settings import Settings
    from kvcalc.sources.resolve import resolve

    spec = resolve("qwen3-next-80b-a3b-thinking").spec
    flag = '{"method": "mtp", "num_speculative_tokens": 2}'
    old = evaluate(spec, Settings(tokens=1, vllm_version="0.13.0", kv_cache_memory="20GiB", speculative_config=flag))
    new = evaluate(spec, Settings(tokens=1, vllm_version="0.15.1", kv_cache_memory="20GiB", speculative_config=flag))
    assert any("leaves them out of the pool's sizing" in n for n in old.notes)
    assert any("1 + 2 speculative state pages" in n for n in new.notes)
    # one request: cdiv(max_model_len, block) attention blocks + 3 GDN groups x pages (1 before 0.15, 3 from it)
    assert new.pool.blocks_per_request - old.pool.blocks_per_request == 3 * 2


def test_cuda_graph_sizes_grow_with_the_draft_tokens():
    # from 0.13 the largest captured size is min(2 x max_num_seqs x (1 + K), 512): 2 x 64 x 3 = 384
    from kvcalc.core.budget_device import capture_sizes

    assert max(capture_sizes(64, 8192)) == 128
    assert max(capture_sizes(64, 8192, query_len=3)) == 384
    assert max(capture_sizes(256, 8192, query_len=3)) == 512


def test_mtp_weights_join_the_last_stage(run_json):
    # Qwen3-Next-80B's MTP module at TP 4 in bf16, by hand: attention (gated q 2048 x 16 x 256 x 2, k/v 2 x 2048 x
    # 2 x 256, o 16 x 256 x 2048) + 512 experts x 3 x 2048 x 512 + the shared expert 3 x 2048 x 512 + the router
    # 2048 x 512, over 4 ranks, + fc 2 x 2048 x 2048 / 4 + norms; the estimate counts a decoder layer as the
    # target's (its two layer norms, allocator rounding), so it may differ by a few MiB
    attn = 2048 * 16 * 256 * 2 + 2 * 2048 * 2 * 256 + 16 * 256 * 2048
    moe = 512 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048 * 512
    hand = (attn + moe) // 4 * 2 + (2 * 2048 * 2048 // 4 + 3 * 2048) * 2
    args = ("size", "qwen3-next-80b-a3b-thinking", "--tp", "4", "--gpu", "H100-80GB", "--vllm-version", "0.28.0", "--tokens", "1000")
    plain = run_json(*args)["pool"]["budget"][0][2]
    spec = run_json(*args, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')["pool"]["budget"][0][2]
    assert plain["term"].startswith("- weights") and "1 MTP module" in spec["source"]
    assert abs((spec["bytes"] - plain["bytes"]) - hand) < 4 << 20


# --------------------------------------------------------------- the flag, as vLLM reads it


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ('{"method": "eagle3", "num_speculative_tokens": 3}', "needs 'model'"),
        ('{"method": "ngram"}', "needs 'num_speculative_tokens'"),
        ('{"method": "lookahead", "num_speculative_tokens": 3}', "valid: "),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "from 1 to 64"),
        ('{"method": "mtp", "num_spec_tokens": 2}', "'num_spec_tokens'"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 3}', "1 or the target's --tp"),
        ('[1, 2]', "takes vLLM's JSON"),
    ],
)
def test_bad_speculative_configs_are_one_line(run, flag, said):
    code, out, err = run("size", "qwen3-8b", "--tokens", "100", "--speculative-config", flag)
    assert code == 2 and said in err and "--speculative-config" in err and len(err.strip().splitlines()) == 1


def test_methods_outside_their_release_and_models_without_mtp_are_refused(run, tmp_path):
    code, _, err = run("size", "llama-3.1-8b", "--tokens", "100", "--speculative-config", '{"method": "mtp"}')
    assert code == 2 and "does not know where llama keeps MTP modules" in err
    code, _, err = run("size", "qwen3-8b", "--tokens", "100", "--vllm-version", "0.19.1", "--speculative-config",
                       '{"method": "dflash", "model": "x/y-dflash", "num_speculative_tokens": 3}')
    assert code == 2 and "'dflash' is not in vLLM 0.19.1 (it is from 0.20)" in err
    # Kimi-K2 (model_type kimi_k2) has no MTP class in vLLM; a DeepSeek-V3 config with 0 modules has none to build
    code, _, err = run("size", "kimi-k2-instruct", "--tokens", "100", "--speculative-config", '{"method": "mtp"}')
    assert code == 2 and "does not know where kimi_k2 keeps MTP modules" in err
    cfg = json.loads((Path(__file__).parents[1] / "presets" / "deepseek-v3.json").read_text())["config"]
    cfg["num_nextn_predict_layers"] = 0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run("size", str(tmp_path / "config.json"), "--tokens", "100", "--speculative-config", '{"method": "mtp"}')
    assert code == 2 and "declares no MTP modules" in err


def test_the_log_parser_turns_the_engine_line_into_the_flag():
    from kvcalc.probe.vllm_log_parse import speculative_json

    assert json.loads(speculative_json("SpeculativeConfig(method='mtp', model='~/m', num_spec_tokens=3)")) == {
        "method": "mtp", "num_speculative_tokens": 3}
    assert json.loads(speculative_json("{'method': 'eagle3', 'model': 'org/head', 'num_speculative_tokens': 2}")) == {
        "method": "eagle3", "model": "org/head", "num_speculative_tokens": 2}
    assert speculative_json("{'prompt_lookup_max': 4}") is None
    assert speculative_json("__import__('os').system('x')") is None


def test_a_draft_that_cannot_be_read_is_one_line_and_a_log_keeps_going(run, tmp_path):
    code, _, err = run("size", "llama-3.1-8b", "--tokens", "100", "--speculative-config",
                       json.dumps({"method": "eagle3", "model": str(tmp_path / "no-head"), "num_speculative_tokens": 3}))
    assert code == 2 and err.startswith("kvcalc: error: --speculative-config model ") and len(err.strip().splitlines()) == 1
    # a log whose drafter kvcalc cannot read (not here): its figures are still checked, and a note says what is left out
    log = tmp_path / "eagle.log"
    log.write_text(
        "INFO Initializing a V1 LLM engine (v0.11.0) with config: model='m', speculative_config=SpeculativeConfig("
        f"method='eagle3', model='{tmp_path / 'no-head'}', num_spec_tokens=3), tokenizer='m'\n"
        "INFO Available KV cache memory: 10.00 GiB\nINFO GPU KV cache size: 81,920 tokens\n"
    )
    result = CliRunner().invoke(APP, ["probe", "llama-3.1-8b", "--from-vllm-log", str(log), "--max-model-len", "8192",
                                      "--format", "json"])
    notes = " ".join(json.loads(result.stdout)["checks"][0]["explanation"])
    assert "its drafter cannot be read" in notes and "give --speculative-config" in notes


@pytest.mark.parametrize(
    ("log", "version"),
    [
        ("club-3090-91-qwen3.6-27b-autoround-int4-tp2-0.20.1.log", "0.20.1"),
        ("club-3090-294-qwen3.6-27b-autoround-int4-tp2-p2poff-0.22.log", "0.22.0"),
        ("club-3090-295-qwen3.6-27b-autoround-int4-tp2-p2pon-0.22.log", "0.22.0"),
    ],
)
def test_three_logs_without_the_memory_line_fit_the_drafters_pages(log, version):
    # club-3090's Qwen3.6-27B (AutoRound int4) at TP 2, fp8_e5m2 KV, prefix caching ('align'), MTP with 3 draft
    # tokens, 262,144: the logs print tokens = int(blocks / per-request x 262,144) but no memory. By hand, a request
    # holds cdiv(262,144, 1600) = 164 attention blocks + 3 GDN groups x (2 + 3) pages = 179; the logged tokens are
    # then a whole number of blocks (423, 425, 424), which the 170 without the drafter's pages never give
    from kvcalc.app.service import evaluate
    from kvcalc.app.settings import Settings
    from kvcalc.probe.vllm_log_parse import parse_runs
    from kvcalc.sources.resolve import resolve

    (run,) = parse_runs((LOGS / log).read_text())
    per_request = -(-262144 // 1600) + 3 * (2 + 3)
    blocks = round(run.tokens * per_request / 262144)
    assert int(blocks / per_request * 262144) == run.tokens and blocks in (423, 424, 425)
    assert all(int(b / 170 * 262144) != run.tokens for b in range(380, 440))
    s = Settings(tokens=1, tp=2, kv_dtype="fp8_e5m2", enable_prefix_caching=True, max_model_len=262144, vllm_version=version,
                 kv_cache_memory="4GiB", speculative_config='{"method": "mtp", "num_speculative_tokens": 3}')
    pool = evaluate(resolve(Q27).spec, s).pool
    assert (pool.block_size, pool.blocks_per_request) == (1600, per_request)


def test_a_checkpoints_mtp_tensors_count_only_with_the_drafter(tmp_path):
    # a DeepSeek-V3-shaped local checkpoint whose headers hold decoder layer 0 (4 KiB), its layer 61 = the MTP module
    # (2 KiB, past num_hidden_layers 61) and, Qwen-style, an 'mtp.fc.weight' (1 KiB): vLLM loads 61's and mtp.* only
    # with an MTP drafter (models/deepseek_v2.py skips spec layers, qwen3_5.py maps 'mtp.' to None)
    import struct

    from kvcalc.app.service import evaluate
    from kvcalc.app.settings import Settings
    from kvcalc.sources.resolve import resolve

    header = {
        "model.layers.0.mlp.down_proj.weight": {"dtype": "BF16", "shape": [32, 64], "data_offsets": [0, 4096]},
        "model.layers.61.mlp.down_proj.weight": {"dtype": "BF16", "shape": [16, 64], "data_offsets": [4096, 6144]},
        "mtp.fc.weight": {"dtype": "BF16", "shape": [8, 64], "data_offsets": [6144, 7168]},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 7168)
    cfg = json.loads((Path(__file__).parents[1] / "presets" / "deepseek-v3.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = resolve(str(tmp_path))
    assert (r.checkpoint["bytes"], r.checkpoint["mtp_bytes"], r.checkpoint["layer_bytes"]) == (7168, 1024, {"0": 4096, "61": 2048})
    base = dict(tokens=1, gpu="H200", max_model_len=4096, vllm_version="0.20.0")
    plain = evaluate(r.spec, Settings(**base), checkpoint=r.checkpoint).pool.inputs.terms[0][2]
    mtp = evaluate(r.spec, Settings(**base, speculative_config='{"method": "mtp", "num_speculative_tokens": 1}'),
                   checkpoint=r.checkpoint).pool.inputs.terms[0][2]
    assert (plain.bytes, mtp.bytes) == (4096, 7168)
    assert "less 3 KiB of MTP modules" in plain.source and "with its MTP modules" in mtp.source


def test_an_eagle3_heads_weights(run_json, tmp_path):
    # the EAGLE-3 head of the test above on Llama-3.1-8B, TP 1, bf16, by hand (vLLM's Eagle3LlamaForCausalLM):
    # qkv with a 2h-wide input 2 x 4096 x (32 + 2 x 8) x 128, o 4096 x 4096, MLP 3 x 4096 x 14336, four norms (input,
    # hidden, post-attention, final), fc 3 x 4096 -> 4096, an LM head of 32,000 rows; the embedding is the target's.
    # Its RoPE parameters differ from Llama-3.1's (no llama3 scaling), so vLLM builds it a table of its own:
    # 131,072 positions x 128 x 2 B
    h = 4096
    params = 2 * h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * 14336 + 4 * h + 3 * h * h + 32000 * h
    hand = params * 2 + 131072 * 128 * 2
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1, "intermediate_size": 14336,
            "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(head))
    args = ("size", "llama-3.1-8b", "--gpu", "H100-80GB", "--vllm-version", "0.28.0", "--tokens", "1000")
    plain = run_json(*args)["pool"]["budget"][0][2]["bytes"]
    term = run_json(*args, "--speculative-config", json.dumps({"method": "eagle3", "model": str(tmp_path),
                                                                "num_speculative_tokens": 3}))["pool"]["budget"][0][2]
    assert term["bytes"] - plain == hand and "the target's embedding" in term["source"]


def test_hostile_and_yaml_forms_of_the_flag(run, tmp_path):
    # a deeply nested or oversized document is one line, exit 2 (json would recurse; vLLM's config is a few keys)
    for text in ("[" * 5000 + "]" * 5000, '{"method": "ngram", "x": "' + "a" * 20000 + '"}'):
        code, _, err = run("size", "qwen3-8b", "--tokens", "10", "--speculative-config", text)
        assert code == 2 and "takes vLLM's JSON object (at most 16,384 characters)" in err and len(err.strip().splitlines()) == 1
    # a gate file may write it as a YAML mapping, as it may --limit-mm-per-prompt
    gate = tmp_path / "gate.yaml"
    gate.write_text("deployments:\n  - name: mtp\n    model: deepseek-v3\n    tp: 8\n    gpu: H200\n    max_model_len: 32768\n"
                    "    speculative_config: {method: mtp, num_speculative_tokens: 1}\n    min_concurrency: 1\n")
    code, out, err = run("gate", str(gate), "--format", "json")
    assert code == 0, err
    bad = tmp_path / "bad.yaml"
    bad.write_text(gate.read_text().replace("{method: mtp, num_speculative_tokens: 1}", "[mtp]"))
    code, _, err = run("gate", str(bad))
    assert code == 2 and "speculative_config must be a mapping or its JSON text" in err


def test_the_budget_check_counts_the_drafter_as_size_does(tmp_path):
    # probe --from-vllm-log compares logged terms with budget_check.predict: it must see the drafter's weights, as
    # `kvcalc size` does (held-out set 39 found it did not)
    from kvcalc.app.budget_check import predict
    from kvcalc.app.service import evaluate
    from kvcalc.app.settings import Settings
    from kvcalc.sources.resolve import resolve

    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1, "intermediate_size": 14336,
            "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048, "torch_dtype": "float16"}
    (tmp_path / "config.json").write_text(json.dumps(head))
    spec = resolve("llama-3.1-8b-instruct").spec
    base = Settings(gpu="A100-40GB", vllm_version="0.24.0", max_model_len=8192, tokens=1)
    with_head = base.with_(speculative_config=json.dumps({"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 5}))
    plain, _ = predict(spec, base)
    drafted, srcs = predict(spec, with_head)
    assert drafted["weights"] > plain["weights"] and "draft" in srcs["weights"]
    assert drafted["weights"] == evaluate(spec, with_head).pool.inputs.weights_bytes_per_stage[0]


def test_an_eagle3_heads_layer_in_a_real_log():
    # held-out set 39's start (tests/data/vllm-budget/set39-...log): Llama-3.1-8B-Instruct with the EAGLE-3 head
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (one layer of 8 KV heads x 128), fp8 KV, 8,192, vLLM 0.24.0, 16.5 GiB.
    # By hand: 33 layers x 8 x 128 x 2 x 1 B = 67,584 B a token, 16-token blocks; 512 blocks a request
    log = Path(__file__).parent / "data" / "vllm-budget" / "set39-manoj-l31-8b-eagle3-fp8kv-a100-40.log"
    head = Path(__file__).parent / "data" / "vllm-budget" / "configs" / "eagle3-llama3.1-instruct-8b.reconstructed.json"
    lo, hi = (b // (33 * 8 * 128 * 2 * 16) for b in ends("16.5"))
    tokens = (int(lo / 512 * 8192), int(hi / 512 * 8192))
    assert tokens[0] <= 262_096 <= tokens[1]  # the logged "GPU KV cache size: 262,096 tokens"
    # without the head's layer, 32 layers: at least 270,240 tokens, not what vLLM printed
    assert int(ends("16.5")[0] // (32 * 8 * 128 * 2 * 16) / 512 * 8192) > 262_096
    flag = json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 5})
    result = CliRunner().invoke(APP, ["probe", "llama-3.1-8b-instruct", "--from-vllm-log", str(log),
                                      "--speculative-config", flag, "--format", "json"])
    m = rows(json.loads(result.stdout))["GPU KV cache size"]
    assert (m["predicted_min"], m["predicted_max"], m["measured"], m["verdict"]) == (*tokens, 262_096, "agree")


def test_the_eagle3_heads_pass_in_the_profile_run(run_json):
    # model runner V2 (vLLM 0.24 for Llama) runs the head inside the dummy run over max_num_batched_tokens (8,192):
    # by hand, its layer's MLP (gate_up 2 x 14,336 + activation 14,336) and hidden/residual (2 x 4,096), plus six
    # 4,096-wide states held (the target's output, its three auxiliary states, the head's fc output and its input
    # embeddings), all fp16: set 39's start, whose log leaves 16.5 GiB (kvcalc +0.02 with this term, +0.39 without)
    tokens, h = 8192, 4096
    hand = tokens * (3 * 14336 + 2 * h) * 2 + 6 * tokens * h * 2
    head = Path(__file__).parent / "data" / "vllm-budget" / "configs" / "eagle3-llama3.1-instruct-8b.reconstructed.json"
    r = run_json("size", "llama-3.1-8b-instruct", "--gpu", "A100-40GB", "--vllm-version", "0.24.0", "--max-model-len",
                 "8192", "--max-num-batched-tokens", "8192", "--dtype", "float16", "--kv-dtype", "fp8", "--enforce-eager",
                 "--tokens", "10", "--speculative-config",
                 json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 5}))
    peak = r["pool"]["budget"][0][3]
    assert peak["bytes"] == hand and "the drafter's pass over 8192 tokens" in peak["source"]


def test_a_full_vocabulary_eagle3_head_shares_the_targets_lm_head(run_json):
    # held-out set 40's Qwen3-8B start with the author's EAGLE-3 head (speculators format, draft_vocab_size = the
    # target's 151,936): the log prints "Detected EAGLE model with lm_head identical to the target model. Sharing
    # ..." and "Model loading took 15.78 GiB". By hand, the head alone: qkv with a 2h-wide input 2 x 4096 x (32 + 2 x 8)
    # x 128, o 4096 x 4096, MLP 3 x 4096 x 12288, four norms, fc 3 x 4096 -> 4096, no embedding, no LM head; and its
    # own RoPE table (rope_theta 10,000 against Qwen3's 1,000,000): 40,960 positions x 128 x 2 B, all bf16
    h = 4096
    params = 2 * h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * 12288 + 4 * h + 3 * h * h
    hand = params * 2 + 40960 * 128 * 2
    head = Path(__file__).parent / "data" / "vllm-budget" / "configs" / "eagle3-qwen3-8b-dishantghai.json"
    args = ("size", "qwen3-8b", "--gpu", "H100-80GB", "--vllm-version", "0.20.0", "--tokens", "10")
    plain = run_json(*args)["pool"]["budget"][0][2]["bytes"]
    term = run_json(*args, "--speculative-config", json.dumps({"method": "eagle3", "model": str(head),
                                                                "num_speculative_tokens": 2}))["pool"]["budget"][0][2]
    # the estimate also books PyTorch's allocator blocks for the head's tensors (docs/vllm-budget.md 2.2): up to 2 MiB
    assert 0 <= term["bytes"] - plain - hand <= 2 << 20 and "the target's LM head" in term["source"]
    assert round(term["bytes"] / GIB, 2) == 15.78  # the log's "Model loading took 15.78 GiB"


def test_methods_model_runner_v2_does_not_run_fall_back_to_v1():
    # vLLM's _get_v2_model_runner_unsupported_features: draft_model on 0.27.1 (held-out set 40's H200 log: "Model
    # Runner V2 does not yet support speculative method 'draft_model'; using the V1 model runner instead"), n-gram
    # before 0.32, suffix on 0.33; EAGLE-3 stays on V2
    from kvcalc.app.runner import model_runner_v2
    from kvcalc.app.settings import Settings
    from kvcalc.core.speculative import v2_takes
    from kvcalc.core.vllm_rules import rules_for
    from kvcalc.sources.resolve import resolve

    assert not v2_takes((0, 27, 1), "draft_model") and v2_takes((0, 31, 0), "draft_model")
    assert not v2_takes((0, 31, 0), "ngram") and v2_takes((0, 32, 0), "ngram") and not v2_takes((0, 33, 0), "suffix")
    assert not v2_takes((0, 23, 0), "dflash") and v2_takes((0, 24, 0), "dflash") and v2_takes((0, 22, 0), "eagle3")
    qwen = resolve("qwen3-8b").spec
    for version, flag, v2 in (
        ("0.27.1", '{"method": "draft_model", "model": "qwen3-0.6b", "num_speculative_tokens": 3}', False),
        ("0.33.0", '{"method": "suffix", "num_speculative_tokens": 3}', False),
        ("0.33.0", '{"method": "ngram", "num_speculative_tokens": 3}', True),
        ("0.27.1", None, True),
    ):
        s = Settings(vllm_version=version, speculative_config=flag)
        from kvcalc.app.service import engine_model

        assert bool(model_runner_v2(rules_for(version)[0], engine_model(qwen, s), s)) is v2, (version, flag)


def test_v1_runs_the_rejection_samplers_dry_run(run_json):
    # model runner V1 dry-runs the rejection sampler after the dummy sampler when a drafter is set: at its peak the bf16
    # [2R, V] random logits (4 B per R x V element), the bonus logits' copy (2) and six fp32 [R, V] tensors (24): 30 B
    # against the plain sampler's 14 (vllm==0.20.0: rejection_sampler.py, sampler.py). Set 40's Qwen3-8B start on an
    # H100 (0.20.0, V1): 1,024 rows x 151,936 x 30 B + 8,192 retained hidden states x 4,096 x 2 B + the Triton
    # top-k/top-p buffer 132 SMs x 151,936 x 4 B; its log leaves 51.73 GiB (kvcalc -0.02 with this term, +2.30 without)
    hand = 1024 * 151936 * 30 + 8192 * 4096 * 2 + 132 * 151936 * 4
    head = Path(__file__).parent / "data" / "vllm-budget" / "configs" / "eagle3-qwen3-8b-dishantghai.json"
    r = run_json("size", "qwen3-8b", "--gpu", "H100-80GB", "--vllm-version", "0.20.0", "--tokens", "10",
                 "--speculative-config", json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 2}))
    peak = r["pool"]["budget"][0][3]
    assert peak["bytes"] == hand and "rejection sampler's dry run" in peak["source"]
    plain = run_json("size", "qwen3-8b", "--gpu", "H100-80GB", "--vllm-version", "0.20.0", "--tokens", "10")
    assert plain["pool"]["budget"][0][3]["bytes"] == 1024 * 151936 * 14 + 8192 * 4096 * 2 + 132 * 151936 * 4


def test_fit_takes_the_drafter(run_json):
    # the MTP layer's KV and weights leave less room: every plan fit finds serves fewer requests with it
    args = ("fit", "qwen3-next-80b-a3b-thinking", "--gpu", "H100-80GB", "--concurrency", "4", "--max-model-len", "131072")
    plain = {(d["tp"], d["pp"]): d["max_concurrency"] for d in run_json(*args)["deployments"]}
    drafted = {(d["tp"], d["pp"]): d["max_concurrency"] for d in run_json(
        *args, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')["deployments"]}
    shared = set(plain) & set(drafted)
    assert shared and all(drafted[k] < plain[k] for k in shared)


def _eagle3_head(tmp_path: Path) -> str:
    """An EAGLE-3 head written for these tests: one Llama layer of 8 KV heads x 128 (Llama-3.1-8B's head shape)."""
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1, "intermediate_size": 14336,
            "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    path = tmp_path / "eagle3-head"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(head))
    return str(path)


def test_a_drafters_own_kv_cache_dtype_from_0_26(run, run_json, tmp_path):
    # vLLM 0.26+ builds the drafter's layers with the speculative config's kv_cache_dtype ('auto': the model dtype,
    # bf16), while the target's 32 layers keep --kv-cache-dtype fp8: per token 32 x 2 x 8 x 128 x 1 B + 1 x 2 x 8 x
    # 128 x 2 B. One KV cache group of one type (UniformTypeKVCacheSpecs): a block holds every layer's page, 16 tokens.
    head = _eagle3_head(tmp_path)

    def flag(**extra: str) -> str:
        return json.dumps({"method": "eagle3", "model": head, "num_speculative_tokens": 3, **extra})

    base = ("size", "llama-3.1-8b", "--tokens", "1000", "--kv-dtype", "fp8", "--gpu", "H100-80GB")
    own = run_json(*base, "--vllm-version", "0.26.0", "--speculative-config", flag(kv_cache_dtype="auto"))
    assert own["bytes_per_token"] == 32 * 2 * 8 * 128 * 1 + 2 * 8 * 128 * 2 == 69632
    assert own["pool"]["bytes_per_block"] == 16 * 69632
    drafter = [g for g in own["model"]["layer_groups"] if g.get("drafter_kv_dtype")]
    assert [(g["layers"], g["drafter_kv_dtype"], g["bytes_per_token_per_layer"]) for g in drafter] == [(1, "bfloat16", 4096)]
    # unset, or the target's own dtype under another name (fp8_e4m3 is fp8's storage): all 33 layers in fp8
    for extra in ({}, {"kv_cache_dtype": "fp8_e4m3"}):
        same = run_json(*base, "--vllm-version", "0.26.0", "--speculative-config", flag(**extra))
        assert same["bytes_per_token"] == 33 * 2 * 8 * 128 == 67584
        assert not any("drafter_kv_dtype" in g for g in same["model"]["layer_groups"])
    # before 0.26 the key does not exist and vLLM's config refuses extra keys; a name vLLM does not know is refused
    code, _, err = run(*base, "--vllm-version", "0.25.0", "--speculative-config", flag(kv_cache_dtype="auto"))
    assert code == 2 and "'kv_cache_dtype' is in vLLM's SpeculativeConfig from 0.26.0" in err
    code, _, err = run(*base, "--vllm-version", "0.26.0", "--speculative-config", flag(kv_cache_dtype="fp9"))
    assert code == 2 and err.count("\n") == 1 and "--speculative-config 'kv_cache_dtype': 'fp9' is not known" in err


def test_0_31s_v2_draft_model_keeps_the_targets_kv_dtype(run_json, tmp_path):
    # 0.31's model runner V2 draft-model speculator builds the draft with the target's cache config: a bf16 request
    # has no effect there (33 layers x 2 x 8 x 128 x 1 B); 0.32's standalone speculator takes it again
    head = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2, "intermediate_size": 8192,
            "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "head_dim": 64}
    path = tmp_path / "small-draft"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(head))
    flag = json.dumps({"method": "draft_model", "model": str(path), "num_speculative_tokens": 3, "kv_cache_dtype": "auto"})
    base = ("size", "llama-3.1-8b", "--tokens", "1000", "--kv-dtype", "fp8", "--speculative-config", flag)
    v31 = run_json(*base, "--vllm-version", "0.31.0")
    assert v31["bytes_per_token"] == 32 * 2 * 8 * 128 + 2 * 2 * 8 * 64
    assert any("kv_cache_dtype has no effect" in n for n in v31["notes"])
    v32 = run_json(*base, "--vllm-version", "0.32.0")
    assert v32["bytes_per_token"] == 32 * 2 * 8 * 128 + 2 * 2 * 8 * 64 * 2
