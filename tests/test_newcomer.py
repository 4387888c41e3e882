"""Issue 15: a newcomer's first ten minutes. Each test fails without its fix.

Figures: Qwen3-0.6B holds 2 x 28 layers x 8 KV heads x 128 x 2 B = 114688 B per token;
4096 tokens = 469762048 B = 448 MiB (docs/design.md section 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.render import Document, Table, to_rich

ROOT = Path(__file__).resolve().parent.parent
NARROW = [
    ("size", "qwen3-0.6b", "--tokens", "4096"),
    ("size", "llama-3.1-70b", "--tp", "4", "--gpu", "H100-80GB", "--max-model-len", "32768"),
    ("size", "deepseek-v3", "--tp", "8", "--gpu", "H200", "--block-size", "64", "--max-model-len", "131072"),
    ("presets",),
    ("gpus",),
    ("fit", "llama-3.1-70b", "--gpu", "H100-80GB", "--max-model-len", "32768", "--concurrency", "32"),
    ("compare", "qwen3-0.6b", "--attention", "mha,gqa,mqa"),
    ("compare", "qwen3-0.6b", "--tp", "1,2,4", "--kv-dtype", "bfloat16,fp8"),
    ("compare", "qwen3-0.6b", "llama-3.1-8b-instruct", "--gpu", "H100-80GB"),
    ("gate", str(ROOT / "examples" / "capacity.yaml")),
]


# ------------------------------------------------------------------ self-contained


def test_nothing_refers_outside_the_repository():
    pattern = re.compile(r"\.\./shared|shared/(configs|design|seed|vllm-test-vectors)|the seed, section")
    hits = []
    for top in ("README.md", "docs", "kvcalc", "tests", ".ci"):
        for path in [ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in ("", ".md", ".py", ".json", ".yaml", ".toml") and path != Path(__file__):
                text = path.read_text(encoding="utf-8", errors="replace")
                hits += [f"{path}:{m.group(0)}" for m in pattern.finditer(text)]
    assert hits == []


def test_vllm_vectors_live_in_the_repository():
    data = ROOT / "tests" / "data" / "vllm-test-vectors.json"
    note = (ROOT / "tests" / "data" / "vllm-test-vectors.md").read_text()
    assert json.loads(data.read_text())["count"] == 88
    assert "Apache" in note and "vLLM" in note
    assert (ROOT / "docs" / "design.md").is_file()


# ------------------------------------------------------------------ output that fits


@pytest.mark.parametrize("args", NARROW, ids=lambda a: " ".join(a[:3]))
def test_80_columns(run, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(*args)
    assert code == 0, err
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert too_wide == []


def test_names_are_never_folded(run, monkeypatch):
    from kvcalc.core.gpus import CATALOG
    from kvcalc.sources.presets import all_presets

    monkeypatch.setenv("COLUMNS", "80")
    words = set(run("presets")[1].split())
    for name, p in all_presets().items():
        assert name in words and p.hub_id in words
    words = set(run("gpus")[1].split())
    assert all(g.name in words for g in CATALOG)


def test_width_follows_columns(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = run("size", "llama-3.1-70b", "--tp", "4", "--gpu", "H100-80GB")[1]
    assert max(len(x) for x in out.splitlines()) <= 100
    monkeypatch.setenv("COLUMNS", "160")
    wide = run("compare", "qwen3-0.6b", "--attention", "mha,gqa,mqa")[1]
    assert 120 < max(len(x) for x in wide.splitlines()) <= 160 and "(continued)" not in wide  # one table


def test_cells_show_one_human_figure(run, run_json):
    out = run("size", "qwen3-0.6b", "--tokens", "4096")[1]
    assert "448 MiB" in out and "469762048 B" not in out and "B (" not in out
    assert run_json("size", "qwen3-0.6b", "--tokens", "4096")["effective_bytes"] == 469762048
    presets = run("presets")[1]
    assert "112 KiB" in presets and "114688" not in presets
    pool = run("size", "qwen3-0.6b", "--gpu", "H100-80GB")[1]  # KV cache groups: 16 x 112 KiB / 28 layers
    assert "64 KiB" in pool and "65536" not in pool


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch):
    from kvcalc.render.text import use_colour

    doc = Document("t", tables=[Table("", ["deployment", "result"], [["a", "PASS"], ["b", "FAIL"]])],
                   notes=["max_model_len 40960 does not fit the pool"])
    plain = to_rich(doc, width=80, colour=False)
    assert "\x1b[" not in plain
    coloured = to_rich(doc, width=80, colour=True)
    assert "\x1b[1;32mPASS" in coloured and "\x1b[1;31mFAIL" in coloured and "\x1b[1;31mdoes not fit" in coloured
    fits = Document("pool", facts=[("fits max_model_len", "NO — vLLM refuses to start: ...")])
    assert "\x1b[1;31mNO" in to_rich(fits, width=80, colour=True)

    class Tty:
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", Tty())
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert use_colour()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour()


def test_units_si_throughout(run):
    out = run("size", "qwen3-0.6b", "--gpu", "H100-80GB", "--units", "si")[1]
    out = re.sub(r"GPUs of >= \d+ GiB", "", " ".join(out.split()))  # vLLM's rule, in its own unit
    assert not re.search(r"\d (KiB|MiB|GiB)", out), out
    assert "114.69 KB per token" in out


def test_no_repeated_notes_and_plurals(run):
    out = run("size", "qwen3-0.6b", "--kv-cache-memory", "10GiB", "--tokens", "4096")[1]
    assert out.count("--kv-cache-memory set") == 1
    flat = " ".join(out.split())
    assert "= 1 GPU;" in flat and "1 request of 4096 tokens" in flat and "for 1 replica" in flat
    assert "1 GPUs" not in flat and "(s)" not in flat and "1 replicas" not in flat and "1 stage(s)" not in flat


# ------------------------------------------------------------------ helpful mistakes


@pytest.mark.parametrize("typo,hint", [("qwen3-0.6", "qwen3-0.6b"), ("lama-3.1-8b", "llama-3.1-8b"), ("jambaa", "jamba-v0.1")])
def test_did_you_mean_a_preset(run, typo, hint):
    code, _, err = run("size", typo)
    assert code == 2 and f"did you mean '{hint}'" in err and err.count("\n") == 1


def test_flags_are_checked_without_a_pool(run):
    code, _, err = run("size", "qwen3-0.6b", "--gpu-memory-utilization", "1.5")
    assert code == 2 and "--gpu-memory-utilization" in err
    code, _, err = run("size", "qwen3-0.6b", "--weights-bytes", "lots")
    assert code == 2 and "--weights-bytes" in err
    code, _, err = run("size", "qwen3-0.6b", "--gpu", "H1000")
    assert code == 2 and "--gpu" in err


def test_request_longer_than_max_model_len(run, tmp_path):
    code, out, _ = run("size", "qwen3-0.6b", "--tokens", "100000", "--max-model-len", "8192")
    assert code == 0 and "warning: a request of 100000 tokens is longer than --max-model-len 8192" in " ".join(out.split())
    out = " ".join(run("size", "qwen3-0.6b", "--tokens", "50000")[1].split())  # over the config's 40960
    assert "warning: a request of 50000 tokens is longer than qwen3-0.6b's maximum length 40960" in out
    gate = tmp_path / "g.yaml"
    gate.write_text("deployments:\n  - name: long\n    model: qwen3-0.6b\n    kv_cache_memory: 8GiB\n"
                    "    tokens: 100000\n    max_model_len: 8192\n    min_concurrency: 1\n")
    code, out, err = run("gate", str(gate), "--format", "json")
    assert code == 2 and "longer than max_model_len 8192" in err
    assert json.loads(out)["result"] == "error"


def test_local_config_is_named_after_what_was_given(run, tmp_path, monkeypatch):
    cfg = json.loads((ROOT / "presets" / "qwen3-0.6b.json").read_text())["config"]
    cfg.pop("_name_or_path", None)
    (tmp_path / "path" / "to").mkdir(parents=True)
    (tmp_path / "path" / "to" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "my-model.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert run("size", "./path/to/config.json", "--tokens", "1")[1].startswith("KV cache of path/to ")
    assert run("size", "my-model.json", "--tokens", "1")[1].startswith("KV cache of my-model ")
    (tmp_path / "path" / "to" / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "Qwen/Qwen3-0.6B"}))
    assert run("size", "./path/to/config.json", "--tokens", "1")[1].startswith("KV cache of Qwen/Qwen3-0.6B ")


def test_revision_on_a_preset_says_what_to_do(run):
    code, _, err = run("size", "qwen3-0.6b", "--revision", "main")
    assert code == 2 and "bundled preset qwen3-0.6b" in err and "kvcalc size Qwen/Qwen3-0.6B --revision main" in err


def test_ambiguous_gpu_alias_says_what_it_means(run):
    out = " ".join(run("size", "qwen3-0.6b", "--gpu", "A100")[1].split())
    assert "--gpu A100 means A100-40GB (39.39 GiB); give --gpu A100-80GB for the other card" in out
    assert "means" not in run("size", "qwen3-0.6b", "--gpu", "A100-80GB")[1]


# ------------------------------------------------------------------ conventions


def test_version_and_completion(run):
    from importlib.metadata import version

    code, out, _ = run("--version")
    assert code == 0 and out == f"kvcalc {version('kvcalc')}\n"
    code, out, _ = run("--help")
    assert "--install-completion" in out and "--show-completion" in out
    env = {"COMP_WORDS": "kvcalc si", "COMP_CWORD": "1", "_KVCALC_COMPLETE": "complete_bash", "PATH": ""}
    done = subprocess.run([sys.executable, "-c", "from kvcalc.cli import main; main()"], env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["size"]


@pytest.mark.parametrize("command", ["size", "fit", "compare", "gate", "presets", "report"])
def test_help_ends_with_examples_and_groups_options(run, command):
    from kvcalc.cli import EXAMPLES

    code, out, _ = run(command, "--help")
    assert code == 0 and "Examples:" in out
    assert 2 <= len(EXAMPLES[command]) <= 4 or command == "lifecycle"
    assert all(e in out for e in EXAMPLES[command])
    if command == "size":
        panels = [p for p in ("Model", "Traffic", "Parallelism", "Engine", "Memory budget", "Output") if f"─ {p} " in out]
        assert len(panels) == 6 and [out.index(f"─ {p} ") for p in panels] == sorted(out.index(f"─ {p} ") for p in panels)


_ALL_EXAMPLES = [e for v in getattr(__import__("kvcalc.cli", fromlist=["EXAMPLES"]), "EXAMPLES", {}).values() for e in v]


@pytest.mark.parametrize("example", [e for e in _ALL_EXAMPLES
                                     if e.split()[1] in ("size", "fit", "compare", "gpus", "ranks", "recompute", "lifecycle")])
def test_help_examples_run(run, example):
    code, _, err = run(*example.split()[1:])
    assert code == 0, err


@pytest.mark.parametrize("example", _ALL_EXAMPLES)
def test_help_examples_use_real_options(run, monkeypatch, example):
    """Examples that need a GPU, the Hub or files name options their command has."""
    from kvcalc.cli import EXAMPLES

    monkeypatch.setenv("COLUMNS", "200")
    words = example.split(">")[0].split()
    sub = [words[2]] if words[1] == "presets" and len(words) > 2 and words[2] in ("show", "import") else []
    help_text = run(words[1], *sub, "--help")[1]
    assert 2 <= len(EXAMPLES[words[1]]) <= 4
    for w in words:
        if w.startswith("-"):
            assert w in help_text, (example, w)


def test_vllm_flags_a_user_pastes(run, run_json):
    args = ("size", "qwen3-0.6b", "--gpu", "H100-80GB", "--tokens", "4096", "--max-num-seqs", "64",
            "--enable-prefix-caching", "--trust-remote-code", "--served-model-name", "q", "--port", "8000",
            "--host", "0.0.0.0", "--swap-space", "4", "--seed", "0")
    code, out, err = run(*args, "--enforce-eager")
    assert code == 0, err
    notes = [n for n in run_json(*args)["notes"] if "change nothing" in n]
    assert len(notes) == 1 and all(f in notes[0] for f in ("--trust-remote-code", "--port", "--seed"))
    # prefix caching is a setting (a hybrid model's state pages depend on it), not a flag that changes nothing
    assert "--enable-prefix-caching" not in notes[0]
    eager = run_json(*args, "--enforce-eager")["pool"]
    plain = run_json(*args)["pool"]
    graphs = [t for t in eager["budget"] if "CUDA graphs" in json.dumps(t)] if isinstance(eager.get("budget"), list) else []
    assert eager["kv_cache_memory_bytes"] - plain["kv_cache_memory_bytes"] == 512 * 2**20 or graphs
    # --max-num-seqs sizes the profile run's dummy sampler: 64 rows of logits, not the default 1024
    peak = [t for stage in plain["budget"] for t in stage if "profile-run" in t["term"]]
    assert peak and "max_num_seqs 64 (--max-num-seqs)" in peak[0]["source"]


def test_gate_json_error_document(run, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("deployments: [\n")
    for path in (bad, tmp_path / "missing.yaml"):
        code, out, err = run("gate", str(path), "--format", "json")
        doc = json.loads(out)
        assert code == 2 and doc["result"] == "error" and doc["exit_code"] == 2 and doc["errors"] and doc["results"] == []
    code, out, _ = run("gate", "--format", "json")  # no file at all
    assert code == 2 and json.loads(out)["errors"] == ["give a gate file (kvcalc gate capacity.yaml), or --init to print an example"]


def test_gate_json_is_one_document_when_a_late_step_fails(run, monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    code, out, err = run("gate", str(ROOT / "examples" / "capacity.yaml"), "--format", "json")
    # the summary is a side output: a warning after the verdict, which stands (exit 0); one JSON document
    assert code == 0 and "warning" in err and "GITHUB_STEP_SUMMARY" in err and json.loads(out)["result"] == "pass"


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_preset_run_imports_no_rich(fmt):
    """Tables are laid out by kvcalc (render/text.py): neither output imports rich (start-up)."""
    code = (f"import sys; from kvcalc.cli import main\ntry:\n main(['size','qwen3-0.6b','--format','{fmt}'])\n"
            "except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'yaml', 'huggingface_hub')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


# ------------------------------------------------------------------ report charts

_TEXT = re.compile(r'<text x="([\d.]+)" y="([\d.]+)" font-size="(\d+)" text-anchor="(\w+)"[^>]*class="([hv]line-label)"[^>]*>([^<]*)</text>')


def _boxes(svg: str) -> list[tuple[str, float, float, float, float]]:
    from kvcalc.render.svg import label_extent

    out = []
    for x, y, size, anchor, cls, text in _TEXT.findall(svg):
        lo, hi = label_extent(float(x), text, anchor)
        out.append((cls, lo, hi, float(y) - int(size), float(y)))
    return out


def _overlaps(svg: str) -> list[tuple]:
    boxes = _boxes(svg)
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]]


def test_chart_labels_never_overprint():
    from kvcalc.render.svg import HLine, Series, VLine, line_chart

    svg = line_chart("t", [Series("a", [(0, 0), (40960, 10)])], x_label="x", y_label="y",
                     hlines=[HLine(20, "KV pool per GPU (model-a): 20 GiB"), HLine(20.3, "KV pool per GPU (model-b): 20.3 GiB")],
                     vlines=[VLine(32768, "max_model_len 32,768 (model-a)"), VLine(40960, "max_model_len 40,960 (model-b)")])
    assert len(_boxes(svg)) == 4 and _overlaps(svg) == []


def test_multi_model_report_charts(run, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = run("report", "qwen3-0.6b", "llama-3.1-70b", "--gpu", "H200", "--tp", "8", "-o", str(out))
    assert code == 0, err
    html = out.read_text()
    assert _overlaps(html) == []
    # llama-3.1-70b's requests are more than 8x qwen3-0.6b's: a log axis, not a squashed curve
    assert "bytes axis is logarithmic" in html


def test_split_tables_repeat_the_columns_that_name_a_row(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = run("compare", "qwen3-0.6b", "--gpu", "H100-80GB,A100-40GB,L4", "--tp", "1,2")[1]
    headers = [ln for ln in out.splitlines() if ln.startswith("model ")]
    assert len(headers) > 1 and all(h.split()[:3] == ["model", "tp", "gpu"] for h in headers)
    out = run("gate", str(ROOT / "examples" / "capacity.yaml"))[1]
    headers = [ln for ln in out.splitlines() if ln.startswith("deployment ")]
    assert len(headers) > 1 and all(h.split()[:2] == ["deployment", "promise"] for h in headers)


def test_speculative_config_is_read_and_named(run_json):
    # vLLM's --speculative-config pastes with a command line; with vLLM kvcalc counts the drafter (an n-gram
    # drafter holds no KV), with SGLang it says the drafter is not modelled
    r = run_json("size", "qwen3-8b", "--gpu", "H100-80GB", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}')
    notes = " ".join(r["notes"])
    assert "speculative decoding (ngram, 3 draft tokens): the drafter holds no KV cache" in notes
    sg = run_json("size", "qwen3-8b", "--engine", "sglang", "--tokens", "100", "--speculative-config", '{"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}')
    assert "SGLang's drafter" in " ".join(sg["notes"]) and '"method": "eagle3"' in " ".join(sg["notes"])
    assert "speculative decoding" not in " ".join(run_json("size", "qwen3-8b", "--gpu", "H100-80GB")["notes"])
