"""`kvcalc report`: the SVG writer, the Markdown report as text, --force, atomic writes, and
the HTML report rendered in headless Chromium.

Hand-derived figures (qwen3-0.6b, Qwen/Qwen3-0.6B config.json: 28 layers, 8 KV heads,
head_dim 128, bfloat16):
  per token  2 x 28 x 8 x 128 x 2 = 114688 B = 112 KiB (docs/design.md section 2)
  4096 tokens x 114688 B = 469762048 B = 448 MiB (docs/design.md section 2)
  TP 16 > 8 KV heads: one replicated head per rank: 114688 / 8 = 14336 B = 14 KiB (docs/design.md section 4)
  one block of every layer: 28 x 16 x 8 x (128 + 128) x 2 = 1835008 B;
  --kv-cache-memory 1GiB -> floor(2**30 / 1835008) = 585 blocks = 585 x 16 = 9360 tokens;
  at max_model_len 4096 a request needs 4096 / 16 = 256 blocks -> 585 / 256 = 2.285... -> "2.29x"
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app
from kvcalc.render import svg as S

SVG_NS = "{http://www.w3.org/2000/svg}"
PER_TOKEN = 2 * 28 * 8 * 128 * 2  # 114688 B
BLOCK_ALL_LAYERS = 28 * 16 * 8 * (128 + 128) * 2  # 1835008 B


def invoke(*args: str):
    return CliRunner().invoke(build_app(["report"]), ["report", *args])


def _points(poly: ET.Element) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in poly.get("points", "").split()]


# ---------------------------------------------------------------------------- SVG writer


def test_nice_ticks_by_hand():
    # range 10 in about 5 steps: raw step 2 -> 2
    assert S.nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    # 38.42 / 5 = 7.68 -> the next of 1, 2, 2.5, 5, 10 (x 10^0) is 10
    assert S.nice_ticks(0, 38.42, 5) == [0, 10, 20, 30, 40]
    # 131072 tokens: doubling the step until at most 6 intervals: 32768 (4 intervals; 16384 gives 8)
    assert S.binary_ticks(131072) == [0, 32768, 65536, 98304, 131072]
    # 512 .. 131072 by powers of two: 2^9 .. 2^17 = 9 ticks
    assert S.power_ticks(512, 131072, 2) == [2.0**k for k in range(9, 18)]
    assert S.fmt_tokens(32768) == "32k" and S.fmt_tokens(1 << 20) == "1M" and S.fmt_tokens(1000) == "1k"


def test_line_chart_structure():
    text = S.line_chart(
        "KV <per> rank & pool",
        [S.Series("a & b", [(0, 0), (1000, 1.5), (4000, 6)]), S.Series("c", [(0, 0), (1, 1), (2, 2), (3, 3), (4000, 8)])],
        x_label="context length (tokens)", y_label="GiB per rank",
        hlines=[S.HLine(9, "pool 9 GiB")], vlines=[S.VLine(2048, "max_model_len 2048")],
    )
    root = ET.fromstring(text)  # well-formed XML, names with < & > escaped
    assert root.tag == SVG_NS + "svg"
    assert root.find(SVG_NS + "title").text == "KV <per> rank & pool"
    polys = root.findall(f".//{SVG_NS}polyline")
    assert len(polys) == 2
    assert [len(_points(p)) for p in polys] == [3, 5]
    assert [p.get("data-name") for p in polys] == ["a & b", "c"]
    # markers: one circle per point (8 points, fewer than 24 per series)
    assert len(root.findall(f".//{SVG_NS}circle")) == 3 + 5
    # x grows to the right, y grows upwards (smaller SVG y)
    pts = _points(polys[0])
    assert pts[0][0] < pts[1][0] < pts[2][0]
    assert pts[0][1] > pts[1][1] > pts[2][1]
    lines = root.findall(f".//{SVG_NS}line")
    assert sum(1 for x in lines if x.get("class") == "hline") == 1
    assert sum(1 for x in lines if x.get("class") == "vline") == 1
    texts = ["".join(t.itertext()) for t in root.iter(SVG_NS + "text")]
    for expected in ("context length (tokens)", "GiB per rank", "pool 9 GiB", "max_model_len 2048", "a & b", "c"):
        assert expected in texts
    # y ticks: data up to 9 -> nice_ticks(0, 9, 5): raw 1.8 -> step 2 -> 0..10
    ticks = [t for t in root.iter(SVG_NS + "text") if t.get("class") == "tick"]
    assert {"0", "2", "4", "6", "8", "10"} <= {t.text for t in ticks}
    # the hline at y = 9 sits 9/10 of the way up the plot: between the 8 and 10 grid lines
    hl = next(x for x in lines if x.get("class") == "hline")
    y8 = next(float(t.get("y")) for t in ticks if t.text == "8") - 4
    y10 = next(float(t.get("y")) for t in ticks if t.text == "10") - 4
    assert math.isclose(float(hl.get("y1")), (y8 + y10) / 2, abs_tol=0.02)


def test_line_chart_log_axes():
    text = S.line_chart("c", [S.Series("m", [(512, 400), (1024, 200), (131072, 3)])], x_label="L", y_label="x",
                        x_scale="log2", y_scale="log10", x_format=S.fmt_tokens)
    root = ET.fromstring(text)
    (poly,) = root.findall(f".//{SVG_NS}polyline")
    (a, b, c) = _points(poly)
    # log2: 512 -> 1024 is one of the 8 doublings from 512 to 131072
    assert math.isclose((b[0] - a[0]) / (c[0] - a[0]), 1 / 8, rel_tol=1e-3)
    tick_text = {t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "tick"}
    assert {"1", "10", "100", "1k", "512", "128k"} <= tick_text


def test_bar_chart_structure():
    text = S.bar_chart(
        "per token", ["TP 1", "TP 2", "TP 4"],
        [S.BarSeries("m1", [112, 56, None], [None, None, None]), S.BarSeries("m2", [100, 50, 50], [None, None, "replicated"])],
        x_label="TP", y_label="KiB", mark_legend="KV heads replicated",
    )
    root = ET.fromstring(text)
    bars = [r for r in root.iter(SVG_NS + "rect") if r.get("class") == "bar"]
    assert len(bars) == 5  # 6 values, one None
    na = [t for t in root.iter(SVG_NS + "text") if t.get("class") == "na"]
    assert len(na) == 1
    marks = [t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "mark"]
    assert marks == ["replicated"]
    h = {(b.get("data-series"), i): float(b.get("height")) for i, b in enumerate(bars)}
    heights = list(h.values())
    # 112 is twice 56; 100 twice 50
    assert math.isclose(heights[0], 2 * heights[1], rel_tol=1e-3)
    assert math.isclose(heights[2], 2 * heights[3], rel_tol=1e-3)
    texts = ["".join(t.itertext()) for t in root.iter(SVG_NS + "text")]
    assert "KV heads replicated" in texts and "TP" in texts and "KiB" in texts


def test_svg_rejects_bad_input():
    with pytest.raises(ValueError):
        S.line_chart("x", [], x_label="a", y_label="b")
    with pytest.raises(ValueError):
        S.line_chart("x", [S.Series("s", [(0, float("nan"))])], x_label="a", y_label="b")
    with pytest.raises(ValueError):
        S.bar_chart("x", ["a", "b"], [S.BarSeries("s", [1])], x_label="a", y_label="b")
    with pytest.raises(ValueError):
        S.line_chart("x", [S.Series("s", [(0, 1)])], x_label="a", y_label="b", x_scale="cubic")


# ------------------------------------------------------------------------ Markdown report


def test_markdown_report_as_text(tmp_path: Path):
    out = tmp_path / "r.md"
    res = invoke("qwen3-0.6b", "--tokens", "4096", "-o", str(out))
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# KV cache review: qwen3-0.6b\n")
    # the formula with the model's numbers
    assert "2 x 28 layers x 8 KV heads x 128 head_dim x 2 B = 114688 B = 112 KiB per token" in text
    assert PER_TOKEN == 114688
    # the three measures: 4096 x 114688 = 469762048 B = 448 MiB, no empty slots (4096 = 256 x 16)
    assert 4096 * PER_TOKEN == 469762048 == 448 * 2**20
    assert "| effective KV | 448 MiB |" in text
    assert "| empty slots | 0 B |" in text
    # the TP sweep: TP 16 replicates one of the 8 heads: 114688 / 8 = 14336 B
    assert "| 16 | 1 (replicated) | 14 KiB |" in text
    assert "| 8 | 1 | 14 KiB |" in text
    # fp8: one byte per element -> 114688 / 2
    assert "| fp8 | 56 KiB |" in text
    # no GPU: the pool is explained, not invented
    assert "No GPU given" in text and "Max concurrency vs context length needs the pool" in text
    # assumptions with the flags that replace them
    assert "| block size | 16 tokens |" in text and "--block-size" in text
    # charts beside it, referenced by relative name, each well-formed SVG
    for slug in ("kv-vs-context", "tp-sizes", "kv-dtypes"):
        f = tmp_path / f"r-{slug}.svg"
        assert f"](r-{slug}.svg)" in text
        root = ET.fromstring(f.read_text())
        assert root.tag == SVG_NS + "svg"
    assert not (tmp_path / "r-concurrency.svg").exists()
    kv = ET.fromstring((tmp_path / "r-kv-vs-context.svg").read_text())
    (poly,) = kv.findall(f".//{SVG_NS}polyline")
    # 48 evenly spaced lengths from 0 to 40960 (the config's max) -> 49 points
    assert len(_points(poly)) == 49
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "r-kv-dtypes.svg", "r-kv-vs-context.svg", "r-tp-sizes.svg", "r.md"]


def test_markdown_report_with_pool(tmp_path: Path):
    out = tmp_path / "cap.md"
    res = invoke("qwen3-0.6b", "--tokens", "4096", "--kv-cache-memory", "1GiB", "--max-model-len", "4096", "-o", str(out))
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert (2**30) // BLOCK_ALL_LAYERS == 585
    assert "| 9,360 | 2.29x at 4,096 | yes |" in text  # 585 x 16 tokens; 585 / 256 = 2.285
    conc = ET.fromstring((tmp_path / "cap-concurrency.svg").read_text())
    (poly,) = conc.findall(f".//{SVG_NS}polyline")
    # max_model_len 512, 1k, 2k, 4k (chosen), 8k, 16k, 32k and 40960 (the config's)
    assert len(_points(poly)) == 8
    kv = ET.fromstring((tmp_path / "cap-kv-vs-context.svg").read_text())
    hl = [x for x in kv.iter(SVG_NS + "line") if x.get("class") == "hline"]
    assert len(hl) == 1  # the pool
    labels = ["".join(t.itertext()) for t in kv.iter(SVG_NS + "text")]
    assert "max_model_len 4,096" in labels


def test_markdown_to_stdout_and_no_charts(tmp_path: Path):
    res = invoke("qwen3-0.6b", "--tokens", "100")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("# KV cache review: qwen3-0.6b")
    assert "Charts left out: printed to stdout" in res.stdout
    out = tmp_path / "n.md"
    res = invoke("qwen3-0.6b", "--tokens", "100", "-o", str(out), "--no-charts")
    assert res.exit_code == 0, res.output
    assert "Charts left out (--no-charts)." in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["n.md"]


def test_json_report():
    res = invoke("qwen3-0.6b", "deepseek-v2-lite", "--tokens", "100", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    q, d = data["models"]
    assert q["bytes_per_token"] == PER_TOKEN
    assert [(r["tp"], r["bytes_per_token_per_rank"]) for r in q["tp_sweep"]] == [
        (1, PER_TOKEN), (2, PER_TOKEN // 2), (4, PER_TOKEN // 4), (8, PER_TOKEN // 8), (16, PER_TOKEN // 8)]
    assert [r["kv_heads_replicated"] for r in q["tp_sweep"]] == [False, False, False, False, True]
    # DeepSeek-V2-Lite (deepseek-ai config.json): 27 layers, MLA latent kv_lora_rank 512 + rope 64 = 576,
    # bf16 -> 27 x 576 x 2 = 31104 B on every TP rank; fp8 -> 27 x 576; fp8_ds_mla 27 x 656
    assert {r["bytes_per_token_per_rank"] for r in d["tp_sweep"]} == {27 * 576 * 2}
    assert [(r["kv_dtype"], r["bytes_per_token"]) for r in d["kv_dtypes"]] == [
        ("auto (bfloat16)", 27 * 576 * 2), ("fp8", 27 * 576), ("fp8_ds_mla", 27 * 656)]


def test_format_choice_errors(tmp_path: Path):
    res = invoke("qwen3-0.6b", "-o", str(tmp_path / "r.txt"))
    assert res.exit_code == 2 and "suffix" in res.output
    res = invoke("qwen3-0.6b", "-o", str(tmp_path / "r.md"), "--format", "html")
    assert res.exit_code == 2 and "does not match" in res.output
    res = invoke("qwen3-0.6b", "--format", "pdf")
    assert res.exit_code == 2 and "html, markdown, json" in res.output
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------- files and --force


def test_force_protects_existing_files(tmp_path: Path):
    out = tmp_path / "r.html"
    out.write_text("keep me")
    res = invoke("qwen3-0.6b", "--tokens", "100", "-o", str(out))
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert lines == [f"kvcalc: error: {str(out)!r} exists; pass --force to replace it"]
    assert out.read_text() == "keep me"
    res = invoke("qwen3-0.6b", "--tokens", "100", "-o", str(out), "--force")
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_force_covers_the_chart_files(tmp_path: Path):
    chart = tmp_path / "r-tp-sizes.svg"
    chart.write_text("mine")
    res = invoke("qwen3-0.6b", "--tokens", "100", "-o", str(tmp_path / "r.md"))
    assert res.exit_code == 2 and "r-tp-sizes.svg" in res.output
    assert chart.read_text() == "mine" and not (tmp_path / "r.md").exists()


def test_atomic_write_leaves_no_temp_files(tmp_path: Path, monkeypatch):
    out = tmp_path / "r.html"
    res = invoke("qwen3-0.6b", "--tokens", "100", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    before = out.read_text()

    # a failure at the rename leaves the old report whole and no temporary file behind
    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    res = invoke("qwen3-0.6b", "--tokens", "200", "-o", str(out), "--force")
    assert res.exit_code != 0
    assert out.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_no_progress_noise_when_stderr_is_not_a_terminal(tmp_path: Path):
    res = CliRunner().invoke(build_app(["report"]), ["report", "qwen3-0.6b", "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0
    assert res.stderr.strip() == f"kvcalc: wrote {tmp_path / 'r.html'}"


# ------------------------------------------------------------------------------ HTML report


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_html_report_is_self_contained(tmp_path: Path):
    out = tmp_path / "r.html"
    res = invoke("qwen3-0.6b", "gemma-2-9b", "--tokens", "4096", "--kv-cache-memory", "4GiB", "--max-model-len", "8192",
                 "-o", str(out))
    assert res.exit_code == 0, res.output
    dom = _Dom()
    dom.feed(out.read_text())
    for tag, attrs in dom.tags:
        assert tag not in ("script", "link", "img", "iframe", "object"), tag
        for key in ("src", "href"):
            assert key not in attrs or not re.match(r"[a-z]+:", attrs[key]), attrs
    assert sum(1 for t, _ in dom.tags if t == "svg") == 4
    assert sum(1 for t, _ in dom.tags if t == "style") == 1


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`; .ci/run installs it)")
def test_html_report_renders_in_headless_chromium(tmp_path: Path):
    out = tmp_path / "report.html"
    res = invoke("qwen3-0.6b", "--tp", "2", "--tokens", "4096", "--kv-cache-memory", "1GiB", "--max-model-len", "4096",
                 "-o", str(out))
    assert res.exit_code == 0, res.output
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = out.resolve().as_uri()
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,3000", url],
                   check=True, capture_output=True, timeout=120)
    assert _png_size(shot) == (1200, 3000)
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few KiB
    dom_text = subprocess.run([*flags, "--dump-dom", url], check=True, capture_output=True, timeout=120, text=True).stdout
    dom = _Dom()
    dom.feed(dom_text)
    svgs = [a for t, a in dom.tags if t == "svg"]
    assert len(svgs) == 4  # KV vs context, concurrency, TP sizes, KV dtypes: all with a pool
    polylines = [a for t, a in dom.tags if t == "polyline"]
    assert len(polylines) == 2  # one model: the KV curve and the concurrency curve
    for a in polylines:
        pts = [tuple(map(float, p.split(","))) for p in a["points"].split()]
        assert len(pts) >= 2
        assert all(0 <= x <= 760 and 0 <= y <= 400 for x, y in pts)  # inside the 760 x 400 viewBox
        assert len({y for _, y in pts}) > 1  # not a flat line
    bars = [a for t, a in dom.tags if t == "rect" and a.get("class") == "bar"]
    assert len(bars) == 5 + 2  # TP 1..16 and auto/fp8
    assert all(float(a["height"]) > 0 for a in bars)
    assert "2 x 28 layers x 8 KV heads x 128 head_dim x 2 B = 114688 B" in dom_text


def test_kv_chart_switches_to_a_log_axis_when_the_pool_dwarfs_a_request(tmp_path: Path):
    # one request of 40960 tokens (the config's max) holds 40960 x 114688 B = 4.375 GiB;
    # a 64 GiB pool is more than 8 times that: the bytes axis becomes powers of two
    assert 40960 * PER_TOKEN * 8 < 64 * 2**30
    res = invoke("qwen3-0.6b", "--kv-cache-memory", "64GiB", "--max-model-len", "4096", "-o", str(tmp_path / "r.md"))
    assert res.exit_code == 0, res.output
    root = ET.fromstring((tmp_path / "r-kv-vs-context.svg").read_text())
    ticks = [t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "tick"]
    assert {"1 GiB", "4 GiB", "64 GiB"} <= set(ticks)
    # and with a 1 GiB pool (less than 8 times) it stays linear, ticks in GiB from 0
    res = invoke("qwen3-0.6b", "--kv-cache-memory", "1GiB", "--max-model-len", "4096", "-o", str(tmp_path / "s.md"))
    assert res.exit_code == 0, res.output
    root = ET.fromstring((tmp_path / "s-kv-vs-context.svg").read_text())
    ticks = [t.text for t in root.iter(SVG_NS + "text") if t.get("class") == "tick"]
    assert "0" in ticks and "1 GiB" not in ticks


def test_report_names_why_a_served_gpu_gets_no_pool():
    # T5 is not served by vLLM V1: a GPU is given, the report says why there is no pool
    res = invoke("t5-v1_1-base", "--gpu", "H100-80GB")
    assert res.exit_code == 0, res.output
    assert "No pool: vLLM does not serve t5" in res.stdout
    assert "No GPU given" not in res.stdout
