"""`kvcalc probe --from-sglang-log` / `--from-log`: the receipt for real SGLang launch logs
(tests/data/sglang-logs/, sources in INDEX.json). Expected ranges are derived by hand from
the printed figures (+-0.005 GiB) and the model's bytes per token."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvcalc.cli import build_app
from kvcalc.probe.sglang_log import looks_like_sglang, parse_sglang_log

APP = build_app(["probe"])
LOGS = Path(__file__).parent / "data" / "sglang-logs"
VLLM_LOGS = Path(__file__).parent / "data" / "vllm_logs"
GIB = 1 << 30


def probe(*args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(APP, ["probe", *args, "--format", "json"])
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.exit_code, out, result.stderr


def rows(report: dict) -> dict[str, dict]:
    return {m["what"]: m for m in report["checks"][0]["measurements"]}


def test_docs_llama_8b_log() -> None:
    # rest = [63.715 - 78.815 x 0.12, 63.725 - 78.805 x 0.12] GiB = [54.2572, 54.2684] GiB;
    # / 131,072 B per token (32 layers x 8 heads x 128 x 2 x 2 B) -> 444,474..444,566; logged 444,500
    code, r, err = probe("llama-3.1-8b-instruct", "--from-sglang-log", str(LOGS / "docs-sglang-send-request-llama-3.1-8b-instruct-dated-2025-01.log"))
    assert code == 0, err
    m = rows(r)
    t = m["max_total_num_tokens"]
    assert (t["predicted_min"], t["predicted_max"], t["measured"]) == (444474, 444566, 444500)
    assert m["K size (GB = GiB, 2 decimals)"]["measured"] == 27.13
    assert m["K size (GB = GiB, 2 decimals)"]["verdict"] == "agree"
    assert m["max_running_requests"]["predicted"] == 2049 == m["max_running_requests"]["measured"]
    assert r["checks"][0]["engine"].startswith("SGLang 0.4.1.post6 rules")


def test_kimi_mla_log_min_over_ranks() -> None:
    # P = 283.53 (TP3), A = 209.96 (TP2/TP3), mfs 0.8260405859375; 70,272 B per token (61 x 576 x 2 B)
    lo = int(((209.96 - 0.005) - (283.53 + 0.005) * (1 - 0.8260405859375)) * GIB) // 70272
    hi = int(((209.96 + 0.005) - (283.53 - 0.005) * (1 - 0.8260405859375)) * GIB) // 70272
    code, r, err = probe("kimi-k2-instruct", "--from-log", str(LOGS / "amd-issues-kimi-k2.5-0.5.8.post1-rocm.log"),
                         "--sglang-version", "0.5.8.post1")
    assert code == 0, err
    t = rows(r)["#tokens (KV Cache is allocated)"]
    assert abs(t["predicted_min"] - lo) <= 1 and abs(t["predicted_max"] - hi) <= 1
    assert t["measured"] == 2454421 and t["verdict"] == "agree"
    assert rows(r)["KV size (GB = GiB, 2 decimals)"]["verdict"] == "agree"


def test_sizes_only_when_no_memory_lines() -> None:
    # Qwen3-32B TP 4 (the TP0..TP3 prefixes of the source; this excerpt shows TP0..TP1): 2,206,208 tokens x 32,768 B (64 x 2 x 128 x 2) -> 67.33 GiB
    code, r, err = probe("qwen3-32b", "--from-sglang-log", str(LOGS / "pr-22537-qwen3-b200-unknown.log"), "--sglang-version", "0.5.10",
                         "--tp", "4")
    assert code == 0, err
    assert rows(r)["K size (GB = GiB, 2 decimals)"]["predicted"] == 67.33


def test_from_log_detects_the_engine() -> None:
    assert looks_like_sglang((LOGS / "llms-in-clouds-qwq-32b-0.4.3.post4.log").read_text())
    assert not looks_like_sglang((VLLM_LOGS / "issue-10517-llama-3.1-8b-instruct-29k.log").read_text())
    code, r, err = probe("llama-3.1-8b-instruct", "--from-log", str(VLLM_LOGS / "issue-10517-llama-3.1-8b-instruct-29k.log"),
                         "--vllm-version", "0.20")
    assert code == 0, err
    assert r["checks"][0]["check"] == "vllm-log"


def test_parse_server_args_and_ranks() -> None:
    log = parse_sglang_log((LOGS / "amd-issues-kimi-k2.5-0.5.8.post1-rocm.log").read_text())
    assert log.server_args["tp_size"] == 8
    assert log.server_args["mem_fraction_static"] == 0.8260405859375
    assert log.server_args["enable_dp_attention"] is False
    assert min(log.before_gib) == "283.53" and min(log.after_gib) == "209.96"
    assert log.tokens == 2454421


def test_missing_file_is_one_line() -> None:
    code, _r, err = probe("llama-3.1-8b-instruct", "--from-sglang-log", "/nonexistent.log")
    assert code == 2
    assert "--from-sglang-log: no file" in err


def test_log_without_kv_line_gets_0_4_0_rules() -> None:
    # held-out docs run (2024-12-29): no K/V line -> before sglang==0.4.1.post6 (memory_pool.py:221)
    # rest = [76.385 - 78.815 x 0.12, 76.395 - 78.805 x 0.12] GiB / 32,768 B (16 x 8 x 64 x 2 x 2) -> 2,193,070..2,193,437
    code, r, err = probe("llama-3.2-1b", "--from-sglang-log", str(LOGS / "docs-native-api-llama-3.2-1b-instruct-dated-2024-12.log"))
    assert code == 0, err
    t = rows(r)["max_total_num_tokens"]
    assert (t["predicted_min"], t["predicted_max"], t["measured"]) == (2193070, 2193437, 2193171)
    assert t["verdict"] == "agree"
    assert r["checks"][0]["engine"].startswith("SGLang 0.4.0 rules")
