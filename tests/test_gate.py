"""`kvcalc gate`: exit codes, every promise, the nearest passing setting, JUnit, the GitHub
summary and annotations, and every way a gate file can be wrong.

Expected numbers are derived by hand from the Qwen3-0.6B config (presets/qwen3-0.6b.json,
from Qwen/Qwen3-0.6B config.json: 28 layers, 8 KV heads, head_dim 128, bfloat16):
    bytes per token        = 2 (K and V) x 28 x 8 x 128 x 2 B = 114,688 B
    bytes per block (16)   = 16 x 114,688 = 1,835,008 B
and from vLLM 0.33's pool rules (docs/vllm-releases.md, line 0.33):
num_blocks = memory // bytes_per_block (null block included), the fit check leaves one
block out, max concurrency = num_blocks / blocks per request of max_model_len.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.app.gate import evaluate_gate
from kvcalc.app.gate_schema import GateFileError, load_gate_text
from kvcalc.cli import build_app
from kvcalc.sources.gatefile import EXAMPLE

ROOT = Path(__file__).resolve().parents[1]

BPT = 2 * 28 * 8 * 128 * 2  # Qwen3-0.6B bytes per token = 114,688
BPB = 16 * BPT  # bytes per block of 16 tokens = 1,835,008
POOL_1000 = 1000 * BPB  # a kv_cache_memory of exactly 1000 blocks = 1,835,008,000 B


@pytest.fixture(autouse=True)
def _no_github(monkeypatch):
    """Tests run outside GitHub Actions unless a test sets these itself."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(scope="module")
def gate_app():
    return build_app(["gate"])


@pytest.fixture()
def gate(gate_app, tmp_path):
    """Write YAML to a file, run `kvcalc gate FILE ARGS...`; returns (exit code, stdout, stderr)."""
    runner = CliRunner()

    def _run(yaml_text: str | None, *args: str, name: str = "capacity.yaml"):
        argv = ["gate"]
        if yaml_text is not None:
            path = tmp_path / name
            path.write_text(textwrap.dedent(yaml_text), encoding="utf-8")
            argv.append(str(path))
        result = runner.invoke(gate_app, argv + list(args))
        return result.exit_code, result.stdout, result.stderr

    return _run


def gate_json(gate, yaml_text: str, code: int):
    rc, out, err = gate(yaml_text, "--format", "json")
    assert rc == code, (out, err)
    return json.loads(out)


def results(payload) -> dict[tuple[str, str], dict]:
    return {(r["deployment"], r["promise"]): r for r in payload["results"]}


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kvcalc: error: ")]


# ------------------------------------------------------------------ promises without a pool


def test_bytes_per_token_per_rank_passes_at_the_limit_and_fails_one_byte_below(gate):
    payload = gate_json(
        gate,
        f"""
        deployments:
          - name: at-limit
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT}
          - name: one-below
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT - 1}
          - name: tp2
            model: qwen3-0.6b
            tp: 2
            max_bytes_per_token_per_rank: 56KiB     # 8 KV heads / 2 ranks: 2 x 28 x 4 x 128 x 2 = 57,344 = 56 KiB
        """,
        1,
    )
    r = results(payload)
    assert r["at-limit", "max_bytes_per_token_per_rank"]["actual"] == 114688
    assert r["at-limit", "max_bytes_per_token_per_rank"]["status"] == "pass"
    assert r["at-limit", "max_bytes_per_token_per_rank"]["margin"] == 0
    assert r["one-below", "max_bytes_per_token_per_rank"]["status"] == "fail"
    assert r["one-below", "max_bytes_per_token_per_rank"]["margin"] == -1
    assert r["tp2", "max_bytes_per_token_per_rank"]["actual"] == 2 * 28 * 4 * 128 * 2
    assert r["tp2", "max_bytes_per_token_per_rank"]["status"] == "pass"
    assert payload["summary"] == {"deployments": 3, "promises": 3, "passed": 2, "failed": 1, "errors": 0}
    assert payload["exit_code"] == 1 and payload["result"] == "fail"


def test_max_kv_bytes_per_rank_is_block_rounded_for_the_traffic(gate):
    # batch 3 x 100 tokens: each request holds ceil(100 / 16) = 7 blocks = 112 token slots
    rounded = 3 * 112 * BPT  # 38,535,168 B
    # requests [17, 32]: 17 -> 2 blocks (32 slots), 32 -> 2 blocks (32 slots)
    listed = (32 + 32) * BPT  # 7,340,032 B = 7 MiB
    payload = gate_json(
        gate,
        f"""
        deployments:
          - name: batch-pass
            model: qwen3-0.6b
            batch: 3
            tokens: 100
            max_kv_bytes_per_rank: {rounded}
          - name: batch-fail
            model: qwen3-0.6b
            batch: 3
            tokens: 100
            max_kv_bytes_per_rank: {rounded - 1}
          - name: requests-list
            model: qwen3-0.6b
            requests: [17, 32]
            max_kv_bytes_per_rank: 7MiB
          - name: requests-text
            model: qwen3-0.6b
            requests: "17,32"
            max_kv_bytes_per_rank: 7340031
        """,
        1,
    )
    r = results(payload)
    assert r["batch-pass", "max_kv_bytes_per_rank"]["actual"] == rounded
    assert r["batch-pass", "max_kv_bytes_per_rank"]["status"] == "pass"
    assert r["batch-fail", "max_kv_bytes_per_rank"]["status"] == "fail"
    assert r["requests-list", "max_kv_bytes_per_rank"]["actual"] == listed
    assert r["requests-list", "max_kv_bytes_per_rank"]["status"] == "pass"
    assert r["requests-text", "max_kv_bytes_per_rank"]["status"] == "fail"
    # the failure names what is needed and what is allowed, and a setting that passes:
    # TP 2 halves the KV heads per rank (3 x 112 x 57,344 B fits under rounded - 1)
    fail = r["batch-fail", "max_kv_bytes_per_rank"]
    assert "more than" in fail["message"] and "allowed" in fail["message"]
    assert {"key": "tp", "value": 2, "actual": 3 * 112 * BPT // 2} in fail["suggestions"]


# ------------------------------------------------------------------ pool promises


POOL_DEPLOYMENT = f"""
defaults:
  model: qwen3-0.6b
  kv_cache_memory: {POOL_1000}    # exactly 1000 blocks of 1,835,008 B
  max_model_len: 4096             # 4096 / 16 = 256 blocks per request
deployments:
"""


def test_pool_promises_at_their_limits(gate):
    # 1000 blocks x 16 = 16,000 pool tokens; concurrency 1000 / 256 = 3.90625;
    # kv_cache_size_tokens = int(3.90625 x 4096) = 16,000
    # traffic 4 x 1000 tokens: 4 x ceil(1000 / 16) = 4 x 63 = 252 blocks -> headroom 1 - 252/1000 = 0.748
    payload = gate_json(
        gate,
        POOL_DEPLOYMENT
        + """
  - name: at-limits
    batch: 4
    tokens: 1000
    min_concurrency: 3.90625
    min_max_tokens: 16000
    min_kv_cache_size_tokens: 16000
    fits_max_model_len: true
    min_headroom: 0.74
  - name: just-over
    batch: 4
    tokens: 1000
    min_concurrency: 3.91
    min_max_tokens: 16001
    min_kv_cache_size_tokens: 16001
    min_headroom: 75%
""",
        1,
    )
    r = results(payload)
    assert r["at-limits", "min_concurrency"]["actual"] == 1000 / 256
    assert r["at-limits", "min_max_tokens"]["actual"] == 16000
    assert r["at-limits", "min_kv_cache_size_tokens"]["actual"] == 16000
    assert r["at-limits", "min_headroom"]["actual"] == pytest.approx(1 - 252 / 1000)
    assert r["at-limits", "fits_max_model_len"]["actual"] is True
    assert all(x["status"] == "pass" for (d, _), x in r.items() if d == "at-limits")
    over = [x for (d, _), x in r.items() if d == "just-over"]
    assert len(over) == 4 and all(x["status"] == "fail" for x in over)
    assert r["just-over", "min_headroom"]["required"] == 0.75
    assert r["just-over", "min_max_tokens"]["margin"] == -1


def test_concurrency_failure_names_need_availability_and_nearest_settings(gate):
    payload = gate_json(
        gate,
        POOL_DEPLOYMENT
        + """
  - name: wants-4x
    min_concurrency: 4
""",
        1,
    )
    fail = results(payload)["wants-4x", "min_concurrency"]
    assert fail["status"] == "fail"
    msg = fail["message"]
    assert "4.00x concurrency at max_model_len 4,096 is needed" in msg
    assert "1,000 blocks of 16 tokens" in msg and "holds 3.91x" in msg
    # largest max_model_len with 1000 / cdiv(L, 16) >= 4: cdiv(L, 16) <= 250 -> L = 4000 (4.00x)
    # smallest larger TP: TP 2 halves the page per rank -> 2000 blocks -> 2000 / 256 = 7.8125x
    # fp8 KV halves the page too -> 7.8125x; gpu_memory_utilization does not apply (kv_cache_memory set)
    assert fail["suggestions"] == [
        {"key": "max_model_len", "value": 4000, "actual": 4.0},
        {"key": "tp", "value": 2, "actual": 2000 / 256},
        {"key": "kv_dtype", "value": "fp8", "actual": 2000 / 256},
    ]
    assert "max_model_len <= 4,000" in msg and "tp 2" in msg and "kv_dtype fp8" in msg


def test_fits_max_model_len_counts_the_null_block_as_vllm_033_does(gate):
    # 1000 blocks, of which 0.33's fit check leaves one out (the null block): 999 x 16 = 15,984
    # tokens fit, 16,000 do not. vLLM 0.20 checked the whole 1000 blocks: 16,000 fits there.
    payload = gate_json(
        gate,
        POOL_DEPLOYMENT
        + """
  - name: fits-15984
    max_model_len: 15984
    fits_max_model_len: true
  - name: needs-16000
    max_model_len: 16000
    fits_max_model_len: true
  - name: needs-16000-on-0.20
    max_model_len: 16000
    vllm_version: 0.20            # YAML's number 0.2, read as "0.20"
    fits_max_model_len: true
""",
        1,
    )
    r = results(payload)
    assert r["fits-15984", "fits_max_model_len"]["status"] == "pass"
    assert r["needs-16000-on-0.20", "fits_max_model_len"]["status"] == "pass"
    fail = r["needs-16000", "fits_max_model_len"]
    assert fail["status"] == "fail" and fail["actual"] is False
    assert fail["margin"] == 15984 - 16000
    assert {"key": "max_model_len", "value": 15984, "actual": True} in fail["suggestions"]
    assert "max seq len (16000)" in fail["message"]  # vLLM's own start-up error, then the nearest settings
    assert "estimated maximum model length is 15984" in fail["message"]


def test_gpu_memory_utilization_needed_is_searched(gate):
    # gpu_memory = 2000 blocks; every other budget term 0, so KV memory = ceil(total x util).
    # At util 0.5: 1000 blocks = 16,000 tokens < 24,000 wanted (1500 blocks).
    # Smallest util k/1000 with ceil(3,670,016,000 x k / 1000) >= 1500 x 1,835,008 = 2,752,512,000:
    # k = 750 (k = 749 gives 2,748,841,984 B = 1498 blocks).
    payload = gate_json(
        gate,
        f"""
        deployments:
          - name: util
            model: qwen3-0.6b
            gpu_memory: {2000 * BPB}
            gpu_memory_utilization: 0.5
            weights_bytes: 0
            activation_bytes: 0
            overhead_bytes: 0
            cudagraph_bytes: 0
            max_model_len: 4096
            min_max_tokens: 24000
        """,
        1,
    )
    fail = results(payload)["util", "min_max_tokens"]
    assert fail["actual"] == 16000
    assert fail["suggestions"] == [
        {"key": "tp", "value": 2, "actual": 32000},  # half the page per rank: 2000 blocks
        {"key": "gpu_memory_utilization", "value": 0.75, "actual": 1500 * 16},
        {"key": "kv_dtype", "value": "fp8", "actual": 32000},
    ]
    assert "gpu_memory_utilization >= 0.750" in fail["message"]


def test_defaults_are_overridden_per_deployment(gate):
    payload = gate_json(
        gate,
        f"""
        defaults:
          model: qwen3-0.6b
          tp: 2
          max_bytes_per_token_per_rank: {BPT // 2}    # 57,344 B: passes at TP 2, fails at TP 1
        deployments:
          - name: inherits-tp2
          - name: overrides-tp1
            tp: 1
          - name: overrides-limit
            tp: 1
            max_bytes_per_token_per_rank: 112KiB
        """,
        1,
    )
    r = results(payload)
    assert r["inherits-tp2", "max_bytes_per_token_per_rank"]["actual"] == BPT // 2
    assert r["inherits-tp2", "max_bytes_per_token_per_rank"]["status"] == "pass"
    assert r["overrides-tp1", "max_bytes_per_token_per_rank"]["actual"] == BPT
    assert r["overrides-tp1", "max_bytes_per_token_per_rank"]["status"] == "fail"
    assert r["overrides-limit", "max_bytes_per_token_per_rank"]["status"] == "pass"


def test_every_promise_is_evaluated_after_a_failure(gate):
    code, out, err = gate(
        POOL_DEPLOYMENT
        + f"""
  - name: first-fails
    max_bytes_per_token_per_rank: 1
    min_max_tokens: 16000
  - name: second-passes
    max_bytes_per_token_per_rank: {BPT}
"""
    )
    assert code == 1, err
    # one table: every promise, failed or not, with required / actual / margin / result
    lines = [line for line in out.splitlines() if "first-fails" in line or "second-passes" in line]
    table = [line for line in lines if "FAIL" in line or "PASS" in line]
    assert len(table) == 3
    assert any("min_max_tokens" in line and "PASS" in line for line in table)
    assert "Failures" in out


def test_a_fully_passing_file_exits_0(gate):
    code, out, err = gate(
        f"""
        - name: bare-list
          model: qwen3-0.6b
          max_bytes_per_token_per_rank: {BPT}
        """
    )
    assert code == 0, err
    assert "PASSED" in out and err == ""


# ------------------------------------------------------------------ reports


def test_junit_xml_parses_and_counts_failures(gate, tmp_path):
    junit = tmp_path / "report.xml"
    code, _, err = gate(
        f"""
        deployments:
          - name: a
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT}       # pass
            max_kv_bytes_per_rank: 1                  # fail
          - name: b
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT - 1}   # fail
        """,
        "--junit",
        str(junit),
    )
    assert code == 1, err
    root = ET.fromstring(junit.read_text(encoding="utf-8"))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 3
    assert len(root.findall("./testsuite/testcase/failure")) == 2
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert suites["a"].get("failures") == "1" and suites["b"].get("failures") == "1"
    failed = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert failed == {("kvcalc.app.gate.a", "max_kv_bytes_per_rank"), ("kvcalc.app.gate.b", "max_bytes_per_token_per_rank")}
    assert all(c.get("line") for c in cases)  # each points at the line of its promise
    # written atomically: no temporary file left next to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capacity.yaml", "report.xml"]


def test_junit_for_a_wrong_file_lists_each_problem_as_an_error(gate, tmp_path):
    junit = tmp_path / "report.xml"
    code, _, _ = gate("deployments:\n  - name: a\n    modle: x\n    tp: zero\n", "--junit", str(junit))
    assert code == 2
    root = ET.fromstring(junit.read_text(encoding="utf-8"))
    assert root.get("errors") == str(len(root.findall(".//testcase/error")))
    assert int(root.get("errors")) >= 2


def test_markdown_file_and_github_step_summary(gate, tmp_path, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    md = tmp_path / "summary.md"
    code, out, _ = gate(
        f"""
        deployments:
          - name: small
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT - 1}
        """,
        "--markdown",
        str(md),
    )
    assert code == 1
    text = md.read_text(encoding="utf-8")
    assert "| deployment | promise | required | actual | margin | result |" in text
    # not a whole KiB: shown in exact bytes, so the limit does not read as the actual 112 KiB
    assert "| small | max_bytes_per_token_per_rank | <= 114,687 B | 112 KiB | -1 B | FAIL |" in text
    appended = summary.read_text(encoding="utf-8")
    assert appended.startswith("earlier step\n")  # appended, not replaced
    assert text in appended
    assert "::error" not in out  # annotations only under GITHUB_ACTIONS


def test_github_annotations(gate, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, _ = gate(
        POOL_DEPLOYMENT
        + """
  - name: tight
    batch: 4
    tokens: 1000
    min_headroom: 0.9
    max_bytes_per_token_per_rank: 1KiB
    min_max_tokens: 16000
""",
    )
    assert code == 1
    notes = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(notes) == 2  # the two failing promises, not the passing one
    assert all(",title=kvcalc gate%3A tight " in n for n in notes)  # ':' escaped in a property
    assert all("file=" in n and ",line=" in n for n in notes)
    headroom = next(n for n in notes if "min_headroom" in n)
    assert "90.0%25 of the pool" in headroom  # '%' escaped in the message
    # with --format json the annotations go to stderr and stdout stays JSON
    code, out, err = gate(POOL_DEPLOYMENT + "  - name: j\n    min_max_tokens: 16001\n", "--format", "json")
    assert code == 1
    json.loads(out)
    assert "::error " in err


def test_github_annotations_for_a_wrong_file(gate, monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, err = gate("deployments:\n  - name: a\n    model: qwen3-0.6b\n    max_kv_bytes: 1GiB\n")
    assert code == 2
    path = str(tmp_path / "capacity.yaml").replace(":", "%3A").replace(",", "%2C")
    assert out.splitlines() == [
        f"::error file={path},line=4,title=kvcalc gate%3A wrong gate file::{tmp_path / 'capacity.yaml'}:4: "
        "deployment 'a': unknown key 'max_kv_bytes'; did you mean 'max_kv_bytes_per_rank'?"
    ]
    assert len(error_lines(err)) == 1


def test_null_drops_a_default_setting(gate):
    # defaults give 8 x 4096 tokens; this deployment lists its requests instead: 2 x 16 slots
    code, out, err = gate(
        f"""
        defaults:
          batch: 8
          tokens: 4096
        deployments:
          - name: listed
            model: qwen3-0.6b
            batch: null
            tokens: null
            requests: [16, 16]
            max_kv_bytes_per_rank: {32 * BPT}
        """
    )
    assert code == 0, err
    code, _, err = gate("- name: a\n  model: qwen3-0.6b\n  tp: null\n  max_kv_bytes_per_rank: 1GiB\n")
    assert code == 2 and "tp must be an integer >= 1, got nothing (null)" in err
    code, _, err = gate("- name: a\n  model: qwen3-0.6b\n  max_kv_bytes_per_rank:\n")
    assert code == 2 and "max_kv_bytes_per_rank must be a size" in err  # an empty promise never passes


# ------------------------------------------------------------------ wrong files: exit 2, one line per problem


def test_unknown_key_with_did_you_mean(gate, tmp_path):
    code, out, err = gate(
        """\
        deployments:
          - name: chat
            model: qwen3-0.6b
            min_concurency: 4
            kv-cache-dtype: fp8
        """
    )
    assert code == 2 and out == ""
    # one line, at the key's line (4); vLLM's long flag names are accepted ('-' or '_')
    assert err.splitlines() == [
        f"kvcalc: error: {tmp_path / 'capacity.yaml'}:4: deployment 'chat': unknown key 'min_concurency'; "
        "did you mean 'min_concurrency'?"
    ]


def test_wrong_types_missing_model_and_more_each_on_its_own_line(gate):
    code, out, err = gate(
        """
        defaults:
          gpu_memory_utilization: 1.5
        deployments:
          - name: a
            model: qwen3-0.6b
            tp: two
            max_kv_bytes_per_rank: 80 gigs
            fits_max_model_len: "yes"
          - name: b
            max_bytes_per_token_per_rank: 1MiB
          - name: a
            model: qwen3-0.6b
          - 7
        """
    )
    assert code == 2 and out == ""
    lines = error_lines(err)
    assert len(lines) == len(err.splitlines()) == 8
    joined = "\n".join(lines)
    assert "defaults: gpu_memory_utilization must be a fraction of the GPU's memory" in joined
    assert "deployment 'a': tp must be an integer >= 1, got text 'two'" in joined
    assert "deployment 'a': max_kv_bytes_per_rank must be a size like 80GiB" in joined
    assert "deployment 'a': fits_max_model_len must be true" in joined
    assert "deployment 'b': missing required key 'model'" in joined
    assert "deployment 'a': the name is used twice" in joined
    assert "deployment 'a': no promise to check" in joined
    assert "deployment #4: must be a mapping" in joined


def test_pool_promise_without_a_pool_is_a_file_error(gate):
    code, _, err = gate(
        """
        deployments:
          - name: no-gpu
            model: qwen3-0.6b
            min_concurrency: 1
        """
    )
    assert code == 2
    assert "deployment 'no-gpu': min_concurrency needs the KV pool; give gpu, gpu_memory" in err


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("deployments:\n  - name: a\n    model: [1, 2\n", ":4: column 1: invalid YAML: while parsing a flow sequence (opened on line 3)"),
        ("deployments:\n  - name: a\n   model: x\n", ":3: column 4: invalid YAML"),
        ("deployments:\n\t- name: a\n", ":2: column 1: invalid YAML"),
        ("", ": is empty; start from `kvcalc gate --init`"),
        ("   \n\n", ": is empty"),
        ("# only a comment\n", ": holds no YAML document"),
        ("deployments: []\n", ": lists no deployments"),
        ("- name: a\n  model: qwen3-0.6b\n  fits_max_model_len: false\n", ":1: deployment 'a': no promise to check"),
        ("defaults: {tp: 2}\n", "top level: no 'deployments:' list"),
        ("name: a\nmodel: qwen3-0.6b\n", "top level: unknown key 'name'; a deployment's keys go in a list under 'deployments:'"),
        ("deployment:\n  - name: a\n", "top level: unknown key 'deployment'; did you mean 'deployments'?"),
        ("just text\n", "must hold a list of deployments or a mapping with 'deployments:', got text"),
        ("deployments:\n  - name: a\n    tp: 1\n    tp: 2\n", ":4: key 'tp' is given twice (lines 3 and 4)"),
    ],
)
def test_bad_files_exit_2_with_a_located_message(gate, text, expect, yaml_parser):
    code, out, err = gate(text)
    assert code == 2 and out == ""
    assert expect in err, err
    assert all(line.startswith("kvcalc: error: ") for line in err.splitlines())


def test_billion_laughs_is_refused_quickly(gate, yaml_parser):
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"{name}: &{name} [{','.join('*' + prev for _ in range(9))}]")
    start = time.perf_counter()
    code, _, err = gate("\n".join(levels) + "\n")
    elapsed = time.perf_counter() - start
    assert code == 2
    assert "expands to more than 100000 YAML nodes through aliases" in err
    assert elapsed < 10  # expanding 9^9 nodes would take minutes and gigabytes


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_parser(request, monkeypatch):
    """Run a test with libyaml's parser and with PyYAML's pure-Python one (no libyaml)."""
    if request.param == "pure-python":
        import yaml.cyaml

        monkeypatch.delattr(yaml.cyaml, "CParser", raising=False)
    else:
        pytest.importorskip("yaml.cyaml").CParser  # noqa: B018 - skip where PyYAML lacks libyaml
    return request.param


def test_alias_count_recursion_and_nesting_are_refused(gate, yaml_parser):
    many = "x: &x 1\nl: [" + ", ".join(["*x"] * 201) + "]\n"
    assert "more than 200 aliases" in gate(many)[2]
    assert "alias that refers to itself" in gate("a: &a [*a]\n")[2]
    # 40 deep: past kvcalc's limit (32), well inside every parser's own: kvcalc's message
    code, _, err = gate("[" * 40 + "]" * 40 + "\n")
    assert code == 2 and err.count("\n") == 1 and "nests collections more than 32 deep" in err
    # 5000 deep: the parser may refuse first (libyaml's own nesting limit, PyYAML >= 6.0.2);
    # either way one line naming the file and line, exit 2: the behaviour, not a library's wording
    code, _, err = gate("[" * 5000 + "]" * 5000 + "\n")
    assert code == 2 and err.count("\n") == 1 and "capacity.yaml:1:" in err
    assert "more than 32 deep" in err or "invalid YAML" in err


def test_merge_keys_and_a_few_aliases_are_fine(gate, yaml_parser):
    code, out, err = gate(
        f"""
        deployments:
          - &first
            name: one
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT}
          - <<: *first
            name: two
        """
    )
    assert code == 0, err
    assert "one" in out and "two" in out


def test_a_model_that_cannot_be_loaded_is_an_error_not_a_pass(gate):
    payload_code, out, err = gate(
        f"""
        deployments:
          - name: ghost
            model: no-such-preset-anywhere
            max_bytes_per_token_per_rank: 1GiB
          - name: real
            model: qwen3-0.6b
            max_bytes_per_token_per_rank: {BPT}
        """,
        "--format",
        "json",
    )
    assert payload_code == 2
    payload = json.loads(out)
    r = results(payload)
    assert r["ghost", "max_bytes_per_token_per_rank"]["status"] == "error"
    assert r["real", "max_bytes_per_token_per_rank"]["status"] == "pass"  # the others are still evaluated
    assert payload["result"] == "error" and payload["exit_code"] == 2
    lines = error_lines(err)
    assert len(lines) == 1 and "deployment 'ghost': model 'no-such-preset-anywhere' cannot be loaded" in lines[0]


def test_hub_unreachable_is_an_error_for_that_deployment():
    gate_file = load_gate_text(
        "deployments:\n  - name: hub\n    model: org/model\n    revision: main\n    max_bytes_per_token_per_rank: 1GiB\n",
        "capacity.yaml",
    )

    def unreachable(model, revision=None):
        raise OSError("Network is unreachable")

    report = evaluate_gate(gate_file, resolver=unreachable)
    assert report.exit_code == 2
    assert [o.status for o in report.outcomes] == ["error"]
    assert report.problems[0].text("capacity.yaml") == (
        "capacity.yaml:3: deployment 'hub': model 'org/model' cannot be loaded: OSError: Network is unreachable"
    )


def test_engine_rejections_name_the_key_not_the_flag(gate):
    code, _, err = gate(
        """
        deployments:
          - name: odd-tp
            model: qwen3-0.6b
            tp: 3
            max_bytes_per_token_per_rank: 1MiB
        """
    )
    assert code == 2
    assert "deployment 'odd-tp': tp 3 does not divide the model's 16 attention heads" in err


def test_gate_file_error_collects_every_problem_in_file_order():
    with pytest.raises(GateFileError) as info:
        load_gate_text("deployments:\n  - name: a\n    tpp: 1\n  - name: b\n    model: m\n    kv_dtype: 8\n", "g.yaml")
    assert info.value.lines() == [
        "g.yaml:2: deployment 'a': missing required key 'model'",
        "g.yaml:3: deployment 'a': unknown key 'tpp'; did you mean 'tp'?",
        "g.yaml:4: deployment 'b': no promise to check; give at least one of min_concurrency, min_max_tokens, "
        "min_kv_cache_size_tokens, fits_max_model_len, min_headroom, max_kv_bytes_per_rank, max_bytes_per_token_per_rank",
        "g.yaml:6: deployment 'b': kv_dtype must be text, got an integer 8",
    ]


# ------------------------------------------------------------------ examples and --init


def test_init_prints_an_example_that_passes(gate, tmp_path):
    code, out, _ = gate(None, "--init")
    assert code == 0 and out == EXAMPLE
    assert out.lstrip().startswith("#")  # commented
    code, out, err = gate(out, name="from_init.yaml")
    assert code == 0, (out, err)
    assert "PASSED" in out


def test_init_with_a_file_is_a_usage_error(gate):
    code, _, err = gate("- name: a\n", "--init")
    assert code == 2 and "--init prints an example" in err


def test_no_file_is_a_usage_error(gate):
    code, _, err = gate(None)
    assert code == 2 and "give a gate file" in err


def test_example_in_the_repository_passes(gate_app):
    result = CliRunner().invoke(gate_app, ["gate", str(ROOT / "examples" / "capacity.yaml"), "--format", "json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload["summary"]["failed"] == 0 and payload["summary"]["promises"] >= 10
    r = results(payload)
    # its comments' arithmetic: 8 GiB // (16 x 114,688 B) = 4,681 blocks; 4,681 / 512 = 9.14x
    assert r["qwen3-0.6b-chat", "min_max_tokens"]["actual"] == (8 << 30) // BPB * 16
    assert r["qwen3-0.6b-chat", "min_concurrency"]["actual"] == (8 << 30) // BPB / 512
    assert r["llama-3.1-70b-tp4", "max_bytes_per_token_per_rank"]["actual"] == 2 * 80 * 8 * 128 * 2 // 4
    assert r["deepseek-v2-lite-tp2", "max_bytes_per_token_per_rank"]["actual"] == 27 * 576 * 2


def test_stdin_is_read_with_a_dash(gate_app):
    text = f"- name: s\n  model: qwen3-0.6b\n  max_bytes_per_token_per_rank: {BPT}\n"
    result = CliRunner().invoke(gate_app, ["gate", "-", "--format", "json"], input=text)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["file"] == "<stdin>"


def test_gate_module_does_not_import_yaml_or_rich_until_needed():
    code = "import sys, kvcalc.app.gate, kvcalc.cli.gate, kvcalc.render.gate; print(sorted(m for m in ('yaml', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=os.environ)
    assert out.stdout.strip() == "[]"
