"""Issue 17, CI output: hostile names never reach a terminal or a CI log raw, side outputs never
change the verdict, GITHUB_OUTPUT carries the result."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvcalc.render import clean

INJECTION = "q\n::warning::injected\r\n::add-mask::x\x1b[31mred\x1b]0;title\x07\u202eevil\x00"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # \t and \n may lay out text


def _gate(tmp_path: Path, name: str, *, failing: bool = True) -> Path:
    gate = tmp_path / "cap.yaml"
    limit = "1KiB" if failing else "1GiB"
    gate.write_text(f"- name: {json.dumps(name)}\n  model: qwen3-0.6b\n  tokens: 1000\n  max_kv_bytes_per_rank: {limit}\n")
    return gate


def _gate_run(gate: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run([sys.executable, "-m", "kvcalc", "gate", str(gate), *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=60)


def test_clean_escapes_every_control_character():
    assert clean("a\nb\r\x1b[0m\u202e\udcff\x85") == "a\\nb\\r\\x1b[0m\\u202e\\udcff\\x85"
    assert clean("plain 112 KiB — ok") == "plain 112 KiB — ok"


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_hostile_names_never_reach_human_output_raw(tmp_path, fmt):
    r = _gate_run(_gate(tmp_path, INJECTION), "--format", fmt, env={"GITHUB_ACTIONS": "true"})
    assert r.returncode == 1, r.stderr
    for stream in (r.stdout, r.stderr):
        assert not CONTROL.search(stream), repr(stream[:400])
        for line in stream.splitlines():  # the only workflow commands: kvcalc's own ::error lines
            assert not line.startswith("::") or line.startswith("::error "), line
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert errors and all("%0A::" not in e and "%0D" not in e for e in errors)  # no command can start inside one


def test_hostile_names_in_json_junit_and_markdown_files(tmp_path):
    junit, md = tmp_path / "j.xml", tmp_path / "s.md"
    r = _gate_run(_gate(tmp_path, INJECTION), "--format", "json", "--junit", str(junit), "--markdown", str(md))
    assert r.returncode == 1, r.stderr
    payload = json.loads(r.stdout)  # JSON escapes control characters itself: the name is kept exactly
    assert payload["results"][0]["deployment"] == INJECTION
    root = ET.parse(junit).getroot()  # well-formed XML 1.0
    assert root.get("failures") == "1"
    assert not CONTROL.search(junit.read_text()) and not CONTROL.search(md.read_text())


def test_a_summary_that_cannot_be_written_never_changes_the_verdict(tmp_path):
    gate = _gate(tmp_path, "q")
    for summary in (str(tmp_path), "/dev/full", str(tmp_path / "missing" / "summary.md")):
        r = _gate_run(gate, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        assert r.returncode == 1, (summary, r.stderr)
        assert any(line.startswith("::error ") for line in r.stdout.splitlines())
        assert "kvcalc: warning: GITHUB_STEP_SUMMARY" in r.stderr
    r = _gate_run(gate, "--junit", "/dev/full")
    assert r.returncode == 1 and "kvcalc: warning:" in r.stderr and "No space left" in r.stderr
    passing = _gate(tmp_path, "q", failing=False)
    r = _gate_run(passing, "--junit", "/dev/full")
    assert r.returncode == 2  # a passing gate whose JUnit file is missing must not look green
    r = _gate_run(passing, env={"GITHUB_STEP_SUMMARY": "/dev/full"})
    assert r.returncode == 0 and "warning" in r.stderr


def test_github_output_gets_the_result(tmp_path):
    out = tmp_path / "github_output"
    r = _gate_run(_gate(tmp_path, "q"), env={"GITHUB_OUTPUT": str(out)})
    assert r.returncode == 1
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert values["result"] == "fail" and values["failed"] == "1" and values["exit_code"] == "1"
    out.unlink()
    r = _gate_run(_gate(tmp_path, "q", failing=False), env={"GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0 and "result=pass\nfailed=0\n" in out.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n")
    out.unlink()
    r = _gate_run(bad, env={"GITHUB_OUTPUT": str(out)})
    assert r.returncode == 2 and "result=error" in out.read_text()


def test_size_table_escapes_a_hostile_config(tmp_path):
    from kvcalc.sources.presets import find

    cfg = dict(find("qwen3-0.6b").load()["config"], _name_or_path="m\n::warning::x\x1b[2J")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for fmt in ("table", "markdown"):
        r = subprocess.run([sys.executable, "-m", "kvcalc", "size", str(tmp_path / "config.json"), "-f", fmt],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and not CONTROL.search(r.stdout)
        assert not any(line.startswith("::") for line in r.stdout.splitlines())


def test_report_escapes_a_hostile_model_name_in_every_format(run, tmp_path):
    from kvcalc.sources.presets import find

    cfg = dict(find("qwen3-0.6b").load()["config"], _name_or_path="<script>x</script>\x1b[31m\n::warning::y\u202e")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = str(tmp_path / "config.json")
    code, out, err = run("report", model, "-f", "markdown")
    assert code == 0 and not CONTROL.search(out) and not any(line.startswith("::") for line in out.splitlines())
    code, out, err = run("report", model, "-f", "html")
    assert code == 0 and not CONTROL.search(out) and "<script>x" not in out
    code, _, err = run("report", model, "-o", str(tmp_path / "r.md"))
    assert code == 0, err
    for svg in tmp_path.glob("r-*.svg"):
        ET.parse(svg)  # well-formed: no control character in a chart's names
        assert not CONTROL.search(svg.read_text())
