"""`kvcalc probe --from-vllm-log`: real vLLM start-up logs from vLLM's issue tracker, copied
verbatim into tests/data/vllm_logs/ with their URL in the first line.

- https://github.com/vllm-project/vllm/issues/10517 (comment of 2024-12-02):
  meta-llama/Llama-3.1-8B-Instruct on one RTX 3090, V0 engine, two runs (20k and 29k).
- https://github.com/vllm-project/vllm/issues/21348: Qwen3-235B-A22B-FP8, TP 4, V1 engine.

These releases predate 0.33, so the tests pass --vllm-version 0.20 (the oldest rules kvcalc
has; V0 sized the pool the same way: available // bytes_per_block, concurrency = blocks /
blocks per request). vLLM prints the memory rounded to 0.01 GiB, so the bytes it had are
within +-0.005 GiB of the printed figure; each expectation below is the range the two ends
give, derived by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvcalc.cli import build_app
from kvcalc.probe.vllm_log import memory_range, parse_log

APP = build_app(["probe"])
LOGS = Path(__file__).parent / "data" / "vllm_logs"
GIB = 1 << 30
# Llama-3.1-8B: 32 layers x 16 tokens x 8 KV heads x (128 + 128) x 2 B = 2,097,152 B per block
LLAMA_8B_BLOCK = 32 * 16 * 8 * 256 * 2


def probe(*args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(APP, ["probe", *args, "--format", "json"])
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result.exit_code, out, result.stderr


def rows(report: dict) -> dict[str, dict]:
    return {m["what"]: m for m in report["checks"][0]["measurements"]}


def test_issue_10517_llama_29k_v0():
    # kv_cache_size=2.89GiB -> [2.885, 2.895] GiB / 2 MiB per block = [1477.1, 1482.2] -> 1477..1482 blocks;
    # logged "# GPU blocks: 1478". Concurrency: cdiv(29000, 16) = 1813 blocks per request,
    # 1477 / 1813 = 0.8147 -> 0.81, 1482 / 1813 = 0.8174 -> 0.82; logged 0.82x.
    # The log also shows vLLM refusing max_model_len 29000: 1813 blocks do not fit in 1478.
    code, r, err = probe("llama-3.1-8b-instruct", "--from-vllm-log", str(LOGS / "issue-10517-llama-3.1-8b-instruct-29k.log"),
                         "--vllm-version", "0.20")
    assert code == 0, err
    m = rows(r)
    assert LLAMA_8B_BLOCK == 2 * 1024 * 1024
    blocks = m["GPU blocks (# GPU blocks)"]
    assert (blocks["predicted_min"], blocks["predicted_max"], blocks["measured"]) == (1477, 1482, 1478)
    conc = m["Maximum concurrency for 29,000 tokens"]
    assert (conc["predicted_min"], conc["predicted_max"], conc["measured"]) == (0.81, 0.82, 0.82)
    assert m["fits max_model_len (1 yes, 0 no)"]["verdict"] == "agree"
    assert r["checks"][0]["engine"] == "vLLM 0.20 rules (--vllm-version 0.20)"


def test_issue_10517_llama_20k_v0():
    # kv_cache_size=3.81GiB -> [3.805, 3.815] x 512 blocks per GiB = [1948.2, 1953.3] -> 1948..1953;
    # logged "GPU blocks: 1952". 20000 / 16 = 1250 blocks per request: 1948 / 1250 = 1.5584 and
    # 1953 / 1250 = 1.5624, both 1.56; logged 1.56x.
    code, r, err = probe("meta-llama/Llama-3.1-8B-Instruct", "--from-vllm-log",
                         str(LOGS / "issue-10517-llama-3.1-8b-instruct-20k.log"), "--vllm-version", "0.20")
    assert code == 0, err
    m = rows(r)
    blocks = m["GPU blocks (# GPU blocks)"]
    assert (blocks["predicted_min"], blocks["predicted_max"], blocks["measured"]) == (1948, 1953, 1952)
    conc = m["Maximum concurrency for 20,000 tokens"]
    assert (conc["predicted_min"], conc["predicted_max"], conc["measured"]) == (1.56, 1.56, 1.56)
    assert r["model"] == "llama-3.1-8b-instruct"  # the Hub id resolved to the bundled preset


def test_issue_21348_qwen3_235b_tp4_disagrees():
    # Qwen3-235B-A22B at TP 4: 4 KV heads / 4 = 1 per rank, 94 layers, head 128, bf16 KV (the FP8
    # checkpoint has no KV scheme): 94 x 16 x 1 x 256 x 2 B = 770,048 B per block.
    # 8.11 GiB -> [8.105, 8.115] GiB = [8,702,677,484, 8,713,414,901] B -> 11,301..11,315 blocks;
    # max_model_len 40960 = 2560 blocks, so tokens = blocks x 16 = 180,816..181,040.
    # The log says 178,880 tokens (11,180 blocks, 8.02 GiB): outside the range, so the probe
    # reports a disagreement (exit 1) and explains that with TP > 1 vLLM keeps the smallest
    # worker's block count while the log shows one worker's memory.
    code, r, err = probe("qwen3-235b-a22b", "--from-vllm-log", str(LOGS / "issue-21348-qwen3-235b-a22b-fp8-tp4.log"),
                         "--tp", "4", "--max-model-len", "40960", "--vllm-version", "0.20")
    assert code == 1, err
    tokens = rows(r)["GPU KV cache size"]
    assert 94 * 16 * 256 * 2 == 770_048
    assert (tokens["predicted_min"], tokens["predicted_max"], tokens["measured"]) == (180_816, 181_040, 178_880)
    assert tokens["verdict"] == "disagree" and r["verdict"] == "disagree"
    assert any("smallest block count" in e for e in r["checks"][0]["explanation"])


def test_memory_range_is_half_a_hundredth_of_a_gib():
    lo, mid, hi = memory_range("2.89")
    assert lo == -(-2885 * GIB // 1000)  # ceil(2.885 GiB)
    assert hi == 2895 * GIB // 1000  # floor(2.895 GiB)
    assert mid == 289 * GIB // 100


def test_parse_033_one_line_format():
    # the 0.33 format string, vllm/v1/core/kv_cache_utils.py of the 0.33.0 wheel:
    #   "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
    fmt = "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
    line = fmt % ("GPU", f"{123456:,}", f"{32768:,}", 3.7676)  # noqa: UP031 - vLLM's own %-format
    log = parse_log("Available KV cache memory: 12.5 GiB\n" + line)
    assert (log.tokens, log.max_model_len, log.concurrency, log.one_line) == (123456, 32768, 3.77, True)
    assert log.available_gib == ["12.5"]


def test_log_without_figures_is_a_usage_error(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("INFO starting\n")
    code, _r, err = probe("qwen3-0.6b", "--from-vllm-log", str(path))
    assert code == 2 and "Available KV cache memory" in err


def test_missing_log_file(tmp_path):
    code, _r, err = probe("qwen3-0.6b", "--from-vllm-log", str(tmp_path / "nope.log"))
    assert code == 2 and "no file" in err


def test_max_model_len_must_match_the_log():
    code, _r, err = probe("llama-3.1-8b-instruct", "--from-vllm-log",
                          str(LOGS / "issue-10517-llama-3.1-8b-instruct-29k.log"), "--max-model-len", "4096")
    assert code == 2 and "29,000" in err


def test_log_check_needs_no_torch():
    # the log check works anywhere: it must not import torch or transformers
    import subprocess
    import sys

    log = LOGS / "issue-10517-llama-3.1-8b-instruct-20k.log"
    code = (
        "import sys, io, contextlib\n"
        "from kvcalc.cli import main\n"
        "buf = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stdout(buf):\n"
        f"        main(['probe', 'llama-3.1-8b-instruct', '--from-vllm-log', {str(log)!r}, '--vllm-version', '0.20',"
        " '--format', 'json'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_a_short_cold_compile_points_at_inductors_own_cache():
    # tests/data/vllm-budget/set32-clawd-...log (j33bs/clawd @ee73837): vLLM's cache missed ("Cache the graph of compile
    # range (1, 2048) for later use") and the compile took 2.53 s, as the log prints; the note names the figure and the
    # setting that fits a graph Inductor's own FX cache returned.
    log = Path(__file__).parent / "data" / "vllm-budget" / "set32-clawd-rtx3090-qwen2.5-14b-awq-coder-seqs6-0.15.1.log"
    config = Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen2.5-14b-instruct-awq.reconstructed.json"
    code, r, err = probe(str(config), "--from-vllm-log", str(log), "--gpu", "RTX-3090")
    assert code == 0, err
    notes = " ".join(r["checks"][0]["explanation"])
    assert "the compile took 2.53 s" in notes and "--compile-cache warm" in notes
