"""Real vLLM start-up logs (tests/data/vllm-logs/, sources in INDEX.json) run as a suite (issue 13).

Each log is checked with ``--vllm-version <its own release string>`` and its own logged
memory. Every expected range below is worked out by hand from the logged figures and the
model's shape under the rules of that release (docs/vllm-releases.md), never copied from
kvcalc: vLLM prints the memory with 2 decimals, so it had [x - 0.005, x + 0.005] GiB and each
figure may lie anywhere in what the two ends give.
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
GIB = 1 << 30
INDEX = {e["file"]: e for e in json.loads((LOGS / "INDEX.json").read_text())}


def ends(gib: str) -> tuple[int, int]:
    """The bytes that print as ``gib`` with 2 decimals."""
    v = Decimal(gib)
    return math.ceil((v - Decimal("0.005")) * GIB), math.floor((v + Decimal("0.005")) * GIB)


def probe(model: str, log: str, *args: str) -> tuple[int, dict | None, str]:
    release = INDEX[log]["vllm_version"]
    extra = ("--vllm-version", release) if release else ()
    result = CliRunner().invoke(APP, ["probe", model, "--from-vllm-log", str(LOGS / log), *extra, *args, "--format", "json"])
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.exit_code, out, result.stderr


def rows(report: dict) -> dict[str, dict]:
    return {m["what"]: m for m in report["checks"][0]["measurements"]}


def expect(row: dict, lo, hi, measured) -> None:
    assert (row["predicted_min"], row["predicted_max"], row["measured"]) == (lo, hi, measured), row
    assert row["verdict"] == "agree"


def gib2(n: int) -> float:
    return round(n / GIB, 2)


# ---------------------------------------------------------------- started: blocks, tokens, concurrency


@pytest.mark.parametrize(
    ("log", "gib", "blocks_logged", "tokens_logged", "conc_logged"),
    [
        ("dennislee22-qwen2-7b-instruct-gmu0.25-0.10.1.1.log", "5.01", 5867, 93872, 5.73),
        ("dennislee22-qwen2-7b-instruct-gmu0.5-0.10.1.1.log", "24.83", 29053, 464848, 28.37),
    ],
)
def test_qwen2_7b_tp1_0_10_1_1(log, gib, blocks_logged, tokens_logged, conc_logged):
    # Qwen2-7B (shape of the qwen2.5-7b preset): 28 layers x 16 tokens x 4 KV heads x 256 x 2 B per block.
    # 0.10.1.1: tokens = blocks // 1 group x 16; concurrency = blocks / cdiv(16384, 16).
    bpb = 28 * 16 * 4 * 256 * 2
    lo, hi = (b // bpb for b in ends(gib))
    code, r, err = probe("qwen2.5-7b", log)
    assert code == 0, err
    m = rows(r)
    expect(m["GPU blocks (# GPU blocks)"], lo, hi, blocks_logged)
    expect(m["GPU KV cache size"], lo * 16, hi * 16, tokens_logged)
    expect(m["Maximum concurrency for 16,384 tokens"], round(lo / 1024, 2), round(hi / 1024, 2), conc_logged)
    assert m["fits max_model_len (1 yes, 0 no)"]["measured"] == 1


@pytest.mark.parametrize(
    ("log", "gib", "blocks_logged", "tokens_logged", "conc_logged"),
    [
        ("dennislee22-qwen2-7b-instruct-tp2-0.10.1.1.log", "31.83", 74510, 1192160, 72.76),
        ("dennislee22-qwen2-7b-instruct-tp2-gmu0.25-0.10.1.1.log", "12.02", 28137, 450192, 27.48),
    ],
)
def test_qwen2_7b_tp2_each_worker_logs_its_pair(log, gib, blocks_logged, tokens_logged, conc_logged):
    # TP 2: 2 KV heads per rank -> 28 x 16 x 2 x 256 x 2 B per block; before 0.11.1 the engine core
    # logs one size/concurrency pair per worker (two pairs), each checked.
    bpb = 28 * 16 * 2 * 256 * 2
    lo, hi = (b // bpb for b in ends(gib))
    code, r, err = probe("qwen2.5-7b", log)
    assert code == 0, err
    m = rows(r)
    assert r["checks"][0]["details"]["settings_from_log"]["tp"] == 2  # from the non-default args dict
    expect(m["GPU blocks (# GPU blocks)"], lo, hi, blocks_logged)
    for line in (1, 2):
        expect(m[f"GPU KV cache size (line {line} of 2)"], lo * 16, hi * 16, tokens_logged)
        expect(m[f"Maximum concurrency for 16,384 tokens (line {line} of 2)"], round(lo / 1024, 2), round(hi / 1024, 2),
               conc_logged)


def test_gpt_oss_120b_tp4_hybrid_groups_0_10_1_1():
    # gpt-oss-120b at TP 4: 36 layers (18 sliding, window 128 + 18 full), 8 KV heads / 4 = 2 per rank,
    # head 64: page 16 x 2 x 128 x 2 B = 8192. 0.10.x groups: min(18, 18) = 18 layers -> 2 groups,
    # 18 x 8192 B per block. Tokens: blocks // 2 groups x 16. Concurrency: blocks / cdiv(need, page)
    # = 1024 full blocks + cdiv(min(127 + 2048, 16384), 16) + 1 = 137 sliding blocks -> 1161.
    bpb = 18 * 8192
    lo, hi = (b // bpb for b in ends("45.32"))
    per_request = 16384 // 16 + math.ceil((127 + 2048) / 16) + 1
    assert per_request == 1161
    code, r, err = probe("gpt-oss-120b", "dennislee22-gpt-oss-120b-tp4-0.10.1.1.log")
    assert code == 0, err
    m = rows(r)
    for line in range(1, 5):
        expect(m[f"GPU KV cache size (line {line} of 4)"], lo // 2 * 16, hi // 2 * 16, 2_640_144)
        expect(m[f"Maximum concurrency for 16,384 tokens (line {line} of 4)"], round(lo / per_request, 2),
               round(hi / per_request, 2), 284.25)


def test_qwen3_30b_a3b_tp2_0_10_2():
    # 48 layers x 16 x 2 KV heads per rank x 256 x 2 B; version from the `vllm --version` line; 32K = 32768
    bpb = 48 * 16 * 2 * 256 * 2
    lo, hi = (b // bpb for b in ends("25.91"))
    code, r, err = probe("qwen3-30b-a3b", "tim-roethig-qwen3-30b-a3b-instruct-2507-fp8-tp2-0.10.2.log")
    assert code == 0, err
    m = rows(r)
    expect(m["GPU KV cache size"], lo * 16, hi * 16, 566_016)
    expect(m["Maximum concurrency for 32,768 tokens"], round(lo / 2048, 2), round(hi / 2048, 2), 17.27)


def test_gemma_4_31b_two_layer_geometries_0_23_0():
    # Gemma-4-31B-it (configs/gemma-4-31b-it.json), TP 1, bf16. Sliding layers (50): 16 KV heads x 256, window 1024;
    # full-attention layers (10): num_global_key_value_heads 4 x global_head_dim 512 (attention_k_eq_v), K and V both
    # stored. Pages at block 16: sliding 16 x 16 x 256 x 2 x 2 B = 262,144; full 16 x 4 x 512 x 2 x 2 B = 131,072, so
    # the full layers' block becomes 32 (262,144). Groups: 10 layers (10 < 1.5 x 50 fails) -> 5 sliding + 1 full;
    # one block of the pool = 10 x 262,144 B. Per request at 32,768 tokens with 8192 batched tokens: full
    # cdiv(32768, 32) = 1024 blocks, each sliding group cdiv(1023 + 8192, 16) + 1 = 577 -> 1024 + 5 x 577 = 3909.
    # Tokens: int(concurrency x 32768) (0.23).
    bpb = 10 * 262_144
    per_request = 32768 // 32 + 5 * (math.ceil((1023 + 8192) / 16) + 1)
    assert per_request == 3909
    lo, hi = (b // bpb for b in ends("28.41"))
    code, r, err = probe(str(CONFIGS / "gemma-4-31b-it.json"), "kaggle-gemma-4-31b-it-0.23.0.log")
    assert code == 0, err
    m = rows(r)
    expect(m["GPU KV cache size"], int(lo / per_request * 32768), int(hi / per_request * 32768), 97_541)
    expect(m["Maximum concurrency for 32,768 tokens"], round(lo / per_request, 2), round(hi / per_request, 2), 2.98)


def test_qwen3_14b_0_10_2():
    # Qwen3-14B (configs/qwen3-14b.json): 40 layers x 16 x 8 KV heads x 256 x 2 B per block
    bpb = 40 * 16 * 8 * 256 * 2
    lo, hi = (b // bpb for b in ends("6.51"))
    code, r, err = probe(str(CONFIGS / "qwen3-14b.json"), "lmcache-1739-qwen3-14b-0.10.2.log")
    assert code == 0, err
    m = rows(r)
    expect(m["GPU KV cache size"], lo * 16, hi * 16, 42_656)
    expect(m["Maximum concurrency for 32,768 tokens"], round(lo / 2048, 2), round(hi / 2048, 2), 1.3)


# ---------------------------------------------------------------- refused: needed GiB, memory, estimate


def test_llama_70b_tp8_0_8_2_refusal_in_gb():
    # 0.8.2: per-layer need cdiv(116160, 16) = 7260 blocks x 80 layers x (16 x 1 KV head x 256 x 2 B)
    # printed as "GB" (bytes / 2**30); no Available line: the memory is the refusal's 3.48.
    need = 80 * 7260 * 16 * 1 * 256 * 2
    code, r, err = probe("llama-3.1-70b", "issue-15617-deepseek-r1-distill-llama-70b-tp8-0.8.2.log", "--tp", "8")
    assert code == 0, err
    m = rows(r)
    expect(m["KV cache needed for one request (GB)"], gib2(need), gib2(need), 4.43)
    expect(m["available KV cache memory in the refusal (GB)"], 3.48, 3.48, 3.48)
    expect(m["fits max_model_len (1 yes, 0 no)"], 0, 0, 0)


def test_gpt_oss_120b_0_11_0_refusal_sums_layers():
    # 0.11.0 checks the per-layer sum: 18 full x 8192 blocks + 18 sliding x (cdiv(min(127 + 1024, L), 16) + 1)
    # = 73 blocks, each 16 x 8 KV heads x 128 x 2 B = 32768 B (max_num_batched_tokens 1024 from the command line)
    need = 18 * 32768 * (131072 // 16) + 18 * 32768 * (math.ceil((127 + 1024) / 16) + 1)
    code, r, err = probe("gpt-oss-120b", "issue-27508-gpt-oss-120b-h100-0.11.0.log")
    assert code == 0, err
    m = rows(r)
    expect(m["KV cache needed for one request (GiB)"], gib2(need), gib2(need), 4.54)
    expect(m["available KV cache memory in the refusal (GiB)"], 1.71, 1.71, 1.71)
    expect(m["fits max_model_len (1 yes, 0 no)"], 0, 0, 0)


@pytest.mark.parametrize(
    ("model", "log", "layers", "page", "L", "gib", "needed", "estimated"),
    [
        # 0.14-0.16: the whole model (all PP stages) against the smallest worker's memory
        ("glm-4.7", "issue-32105-glm-4.7-fp8-pp8-0.15.0rc1.log", 92, 16 * 8 * 256 * 2, 202752, "28.57", 71.16, 81392),
        ("qwen3-30b-a3b", "issue-34076-qwen3-coder-30b-a3b-fp8-pp2-0.15.2rc1.log", 48, 16 * 4 * 256 * 2, 262144, "3.18",
         24.0, 34736),
        # 0.17: one worker, one group
        ("qwen3-8b", "xorbits-4926-qwen3-vl-8b-instruct-0.17.log", 36, 16 * 8 * 256 * 2, 262144, "6.94", 36.0, 50512),
    ],
)
def test_refusals_0_14_to_0_17(model, log, layers, page, L, gib, needed, estimated):
    bpb = layers * page
    need = bpb * (L // 16)
    lo, hi = ends(gib)
    code, r, err = probe(model, log)
    assert code == 0, err
    m = rows(r)
    expect(m["KV cache needed for one request (GiB)"], gib2(need), gib2(need), needed)
    expect(m["available KV cache memory in the refusal (GiB)"], gib2(lo), gib2(hi), float(gib))
    expect(m["estimated maximum model length"], lo // bpb * 16, hi // bpb * 16, estimated)


def test_minimax_m2_tp2_0_29_refusal_less_the_null_block():
    # 62 layers x 16 x 4 KV heads per rank x 256 x 2 B; 0.29 compares available - one block (the null block)
    bpb = 62 * 16 * 4 * 256 * 2
    need = bpb * (196608 // 16)
    lo, hi = ends("22.5")
    code, r, err = probe(str(CONFIGS / "minimax-m2.json"), "spark-vllm-docker-396-minimax-m2.7-awq-tp2-gmu0.80-0.29.1rc1.log",
                         "--tp", "2")
    assert code == 0, err
    m = rows(r)
    expect(m["KV cache needed for one request (GiB)"], gib2(need), gib2(need), 23.25)
    expect(m["available KV cache memory in the refusal (GiB)"], gib2(lo - bpb), gib2(hi - bpb), 22.5)
    expect(m["estimated maximum model length"], (lo - bpb) // bpb * 16, (hi - bpb) // bpb * 16, 190272)


def test_negative_memory_refuses():
    # -2.14 GiB available: vLLM cannot start (the excerpt shows "EngineCore failed to start")
    code, r, err = probe("gpt-oss-120b", "issue-23278-gpt-oss-120b-h100-0.10.1.1.log")
    assert code == 0, err
    fit = rows(r)["fits max_model_len (1 yes, 0 no)"]
    assert (fit["predicted"], fit["measured"], fit["verdict"]) == (0, 0, "agree")


# ---------------------------------------------------------------- what the suite cannot check


def test_unknown_release_log_keeps_its_documented_disagreement():
    # INDEX.json: 178,880 tokens = 11,180 blocks while 8.11 GiB gives about 11,300 (release not in the log)
    bpb = 94 * 16 * 1 * 256 * 2
    lo, hi = (b // bpb for b in ends("8.11"))
    code, r, _ = probe("qwen3-235b-a22b", "issue-21348-qwen3-235b-a22b-fp8-tp4-unknown.log", "--max-model-len", "40960",
                       "--vllm-version", "0.10.0")
    assert code == 1
    tokens = rows(r)["GPU KV cache size"]
    assert (tokens["predicted_min"], tokens["predicted_max"], tokens["verdict"]) == (lo * 16, hi * 16, "disagree")


@pytest.mark.parametrize(
    ("log", "why"),
    [
        ("issue-19125-qwen2.5-0.5b-instruct-0.9.0.log", "no 'Available KV cache memory"),
        ("spark-vllm-docker-396-minimax-m2.7-awq-tp2-gmu0.85-0.29.1rc1.log", "no 'Available KV cache memory"),
    ],
)
def test_logs_without_the_memory_get_one_line(log, why):
    code, _r, err = probe("qwen3-0.6b", log)
    assert code == 2 and why in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("log", "tokens", "conc", "version"),
    [
        ("club-3090-91-qwen3.6-27b-autoround-int4-tp2-0.20.1.log", 619_479, 2.36, "0.20.1"),
        ("club-3090-294-qwen3.6-27b-autoround-int4-tp2-p2poff-0.22.log", 622_408, 2.37, None),
        ("club-3090-295-qwen3.6-27b-autoround-int4-tp2-p2pon-0.22.log", 620_944, 2.37, None),
        ("club-3090-612-qwen3.6-35b-a3b-nvfp4-0.24.0.log", 567_978, 4.33, "0.24.0"),
    ],
)
def test_hybrid_qwen36_logs_are_read(log, tokens, conc, version):
    # shape unknown to kvcalc (no config in the project): the figures and settings are read, not sized
    from kvcalc.probe.vllm_log_parse import parse_runs

    (run,) = parse_runs((LOGS / log).read_text())
    assert (run.tokens, run.concurrency, run.version) == (tokens, conc, version)
    assert run.settings["max_num_batched_tokens"] == 8192 and run.settings["kv_dtype"].startswith("fp8")


def test_speculative_decoding_in_a_log_is_named():
    # club-3090#294's non-default args carry 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}
    from kvcalc.probe.vllm_log_parse import parse_runs

    (run,) = parse_runs((LOGS / "club-3090-294-qwen3.6-27b-autoround-int4-tp2-p2poff-0.22.log").read_text())
    assert "'method': 'mtp'" in run.settings["speculative"] and "'num_speculative_tokens': 3" in run.settings["speculative"]
    # the engine-config line's form, and None, which is no speculative decoding
    (spec,) = parse_runs("INFO Initializing a V1 LLM engine (v0.11.0) with config: model='m', speculative_config="
                         "SpeculativeConfig(method='eagle3', model='d', num_spec_tokens=3), tokenizer='m'\n"
                         "INFO Available KV cache memory: 10.00 GiB\n")
    assert spec.settings["speculative"].startswith("SpeculativeConfig(method='eagle3'")
    (plain,) = parse_runs("INFO Initializing a V1 LLM engine (v0.11.0) with config: model='m', speculative_config=None, "
                          "tokenizer='m'\nINFO Available KV cache memory: 10.00 GiB\n")
    assert "speculative" not in plain.settings


# ---------------------------------------------------------------- files: several runs, flags, bad input


def test_a_file_with_two_runs_is_split_and_each_checked(tmp_path):
    both = tmp_path / "two-runs.log"
    both.write_text((LOGS / "dennislee22-qwen2-7b-instruct-gmu0.25-0.10.1.1.log").read_text()
                    + (LOGS / "dennislee22-qwen2-7b-instruct-gmu0.5-0.10.1.1.log").read_text())
    result = CliRunner().invoke(APP, ["probe", "qwen2.5-7b", "--from-vllm-log", str(both), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    checks = json.loads(result.stdout)["checks"]
    assert [c["title"] for c in checks] == [f"vLLM log two-runs.log (run {i} of 2)" for i in (1, 2)]
    measured = [{m["what"]: m["measured"] for m in c["measurements"]}["GPU KV cache size"] for c in checks]
    assert measured == [93_872, 464_848] and all(c["verdict"] == "agree" for c in checks)


def test_cli_flags_of_the_command_line_are_read(tmp_path):
    # qwen2.5-7b at TP 2 with fp8 KV: 28 x 16 x 2 KV heads x 256 x 1 B = 229,376 B per block
    bpb = 28 * 16 * 2 * 256
    lo, hi = (b // bpb for b in ends("3.00"))
    log = tmp_path / "flags.log"
    log.write_text(
        "$ vllm serve Qwen/Qwen2.5-7B-Instruct -tp 2 --kv-cache-dtype fp8 --max-model-len 8192 "
        "--max-num-batched-tokens=4096\n"
        "INFO [gpu_worker.py:440] Available KV cache memory: 3.0 GiB\n"
        "INFO [gpu_worker.py:440] Available KV cache memory: 3.0 GiB\n"
        f"INFO [kv_cache_utils.py:1708] GPU KV cache size: {int(lo / 512 * 8192):,} tokens\n"
        f"INFO [kv_cache_utils.py:1709] Maximum concurrency for 8,192 tokens per request: {lo / 512:.2f}x\n"
    )
    result = CliRunner().invoke(APP, ["probe", "qwen2.5-7b", "--from-vllm-log", str(log), "--vllm-version", "0.20.1",
                                      "--format", "json"])
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["checks"][0]
    got = check["details"]["settings_from_log"]
    assert (got["tp"], got["kv_dtype"], got["max_num_batched_tokens"]) == (2, "fp8", 4096)
    row = {m["what"]: m for m in check["measurements"]}["GPU KV cache size"]
    assert (row["predicted_min"], row["predicted_max"]) == (int(lo / 512 * 8192), int(hi / 512 * 8192))


def test_the_receipt_table_lists_every_figure():
    result = CliRunner().invoke(APP, ["probe", "glm-4.7", "--from-vllm-log", str(LOGS / "issue-32105-glm-4.7-fp8-pp8-0.15.0rc1.log")])
    assert result.exit_code == 0, result.stderr
    for needle in ("KV cache needed for one request", "available KV cache memory in the refusal",
                   "estimated maximum model length", "fits max_model_len", "rules of 0.14.0–0.16.x"):
        assert needle in result.stdout


@pytest.mark.parametrize("content", [b"\x00\x01\x02binary", b"just some text\nnothing from vllm\n", b""])
def test_bad_or_unrelated_files_get_one_line(tmp_path, content):
    path = tmp_path / "x.log"
    path.write_bytes(content)
    result = CliRunner().invoke(APP, ["probe", "qwen3-0.6b", "--from-vllm-log", str(path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_a_folder_gets_one_line(tmp_path):
    result = CliRunner().invoke(APP, ["probe", "qwen3-0.6b", "--from-vllm-log", str(tmp_path)])
    assert result.exit_code == 2 and "folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_log_without_memory_takes_kv_cache_memory(tmp_path):
    # releases before 0.9.1 print no Available line: --kv-cache-memory 1.05GiB (2 decimals, as if
    # logged) gives the range [1.045, 1.055] GiB; Qwen3-0.6B 0.9.0: tokens = blocks x 16
    bpb = 28 * 16 * 8 * 256 * 2
    lo, hi = (b // bpb for b in ends("1.05"))
    log = tmp_path / "old.log"
    log.write_text(f"INFO [kv_cache_utils.py:637] GPU KV cache size: {lo * 16:,} tokens\n"
                   f"INFO [kv_cache_utils.py:640] Maximum concurrency for 4,096 tokens per request: {lo * 16 / 4096:.2f}x\n")
    result = CliRunner().invoke(APP, ["probe", "qwen3-0.6b", "--from-vllm-log", str(log), "--vllm-version", "0.9.0",
                                      "--kv-cache-memory", "1.05GiB", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    m = {r["what"]: r for r in json.loads(result.stdout)["checks"][0]["measurements"]}
    expect(m["GPU KV cache size"], lo * 16, hi * 16, lo * 16)


@pytest.mark.parametrize("log", sorted(e for e in INDEX if INDEX[e]["vllm_version"]))
def test_logs_are_dated_by_banner_or_logger_line(log):
    # without --vllm-version the probe reads the banner, else the logger's line numbers
    # (kv_cache_utils.py / gpu_worker.py, docs/vllm-releases.md section 6): the release INDEX.json
    # names (inferred there by hand), or one of the same rule line
    from kvcalc.core.vllm_rules import rules_for
    from kvcalc.probe.vllm_log import rules_version
    from kvcalc.probe.vllm_log_parse import parse_runs

    for run in parse_runs((LOGS / log).read_text()):
        if not run.has_figures:
            continue
        release, _why = rules_version(run, None)
        assert rules_for(release)[0] == rules_for(INDEX[log]["vllm_version"])[0], (release, INDEX[log]["vllm_version"])


def test_before_0_11_1_each_worker_pair_is_read_with_its_own_memory(tmp_path):
    # TP 2 on 0.10.2, workers with 31.83 and 31.79 GiB: each logs its own pair before the minimum
    bpb = 28 * 16 * 2 * 256 * 2
    (a, _), (b, _) = ((x // bpb for x in ends(g)) for g in ("31.83", "31.79"))
    log = tmp_path / "tp2.log"
    log.write_text(
        "INFO [gpu_worker.py:298] Available KV cache memory: 31.83 GiB\n"
        "INFO [gpu_worker.py:298] Available KV cache memory: 31.79 GiB\n"
        f"INFO [kv_cache_utils.py:864] GPU KV cache size: {a * 16:,} tokens\n"
        f"INFO [kv_cache_utils.py:868] Maximum concurrency for 16,384 tokens per request: {a / 1024:.2f}x\n"
        f"INFO [kv_cache_utils.py:864] GPU KV cache size: {b * 16:,} tokens\n"
        f"INFO [kv_cache_utils.py:868] Maximum concurrency for 16,384 tokens per request: {b / 1024:.2f}x\n"
    )
    result = CliRunner().invoke(APP, ["probe", "qwen2.5-7b", "--from-vllm-log", str(log), "--tp", "2", "--format", "json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    check = json.loads(result.stdout)["checks"][0]
    assert check["engine"].startswith("vLLM 0.10.2 rules (no banner; the logger line kv_cache_utils.py:864")
    assert all(m["verdict"] in ("agree", "info") for m in check["measurements"])
