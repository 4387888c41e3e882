"""`kvcalc report` as HTML (one self-contained file: inline CSS, inline SVG, no external asset, opens offline) or
Markdown (tables; charts as SVG files beside it, or left out with a note). Returns text; the command writes the files."""

from __future__ import annotations

import html
import re
from typing import Any

from kvcalc.app.report import ModelReport, Report
from kvcalc.core.units import format_bytes
from kvcalc.render import Table, clean, clean_blocks
from kvcalc.render.pool import pool_document
from kvcalc.render.report_charts import (
    Block,
    Chart,
    _no_pool_reason,
    charts,
)
from kvcalc.render.size import formula
from kvcalc.words import plural


def _b(n: int | None, units: str) -> str:
    return "-" if n is None else format_bytes(n, units)  # one human figure per cell; the JSON keeps the integer


# ------------------------------------------------------------------------------ charts


def _summary(report: Report, units: str) -> Table:
    t = Table("", ["model", "per token", "per token per GPU", "traffic per GPU", "pool per GPU",
                   "pool tokens", "max concurrency", "fits max_model_len"])
    for m in report.models:
        fp = m.result.footprint
        p = m.result.pool
        t.rows.append([
            m.name, format_bytes(fp.bytes_per_token, units), format_bytes(fp.bytes_per_token_per_rank, units),
            format_bytes(fp.block_rounded_bytes_per_rank, units),
            format_bytes(p.pool_bytes_per_gpu, units) if p is not None else "-",
            f"{p.pool_tokens:,}" if p is not None else "-",
            f"{p.max_concurrency:.2f}x at {m.result.max_model_len:,}" if p is not None else "-",
            ("yes" if p.fits else "NO") if p is not None else "-",
        ])
    return t


def _sweep_blocks(m: ModelReport, units: str) -> list[Block]:
    """The model across TP sizes and across KV cache dtypes."""
    out: list[Block] = []
    out.append(("h", 3, "Across TP sizes"))
    tpt = Table("", ["TP", "KV heads per rank", "bytes per token per rank", ""], align=["r", "r", "r", "l"])
    for row in m.tp_sweep:
        if row.error:
            tpt.rows.append([row.tp, "-", "-", row.error])
        else:
            tpt.rows.append([row.tp, f"{row.kv_heads_per_rank}" + (" (replicated)" if row.replicated else ""),
                             _b(row.bytes_per_token_per_rank, units),
                             "KV heads replicated: no further saving" if row.replicated else ""])
    out.append(("table", tpt))
    out.append(("h", 3, "Across KV cache dtypes"))
    dt = Table("", ["--kv-cache-dtype", "bytes per token", "per rank", "block-rounded per rank", "pool tokens",
                    "max concurrency", "fits"])
    for d in m.dtypes:
        if d.error:
            dt.rows.append([d.label, "-", "-", "-", "-", "-", d.error])
            continue
        dt.rows.append([
            d.label, _b(d.bytes_per_token, units), _b(d.bytes_per_token_per_rank, units),
            format_bytes(d.block_rounded_bytes_per_rank or 0, units),
            f"{d.pool_tokens:,}" if d.pool_tokens is not None else "-",
            f"{d.max_concurrency:.2f}x" if d.max_concurrency is not None else "-",
            ("yes" if d.fits else "NO") if d.fits is not None else "-",
        ])
    out.append(("table", dt))
    return out


def _model_blocks(m: ModelReport, units: str) -> list[Block]:
    from kvcalc.render.size import ranks_table, size_document

    r = m.result
    fp = r.footprint
    spec = fp.model
    p = fp.plan
    size_doc = size_document(r, units)
    out: list[Block] = [("h", 2, spec.name)]
    facts = [
        ("model", f"{spec.model_type}, {spec.num_layers} layers, {spec.attention}, {spec.num_attention_heads} query heads, "
                  f"{spec.num_kv_heads} KV heads, head_dim {spec.head_dim}, dtype {spec.dtype}, "
                  f"max length {spec.max_model_len:,}"),
        ("source", spec.source + (f" (resolved as {m.model.kind})" if m.model.kind else "")),
    ]
    if r.checkpoint:
        ck = r.checkpoint
        facts.append(("checkpoint", f"{ck.get('parameters', '?')} parameters, {_b(ck.get('bytes'), units)} of weights "
                                    f"({ck.get('source', 'metadata')})"))
    facts += [
        ("KV cache dtype", f"{fp.cache.kv_dtype.name} ({fp.cache.kv_dtype.bytes} B per element)"),
        ("plan", f"TP {p.tp} x PP {p.pp} x DP {p.dp} = {plural(p.world_size, 'GPU')}; block size {fp.cache.block_size} tokens; "
                 f"max_model_len {r.max_model_len:,}; {r.rules} rules"),
        ("traffic", fp.traffic.description),
    ]
    out.append(("facts", facts))
    out.append(("h", 3, "Bytes per token"))
    out.append(("code", formula(m.result.footprint)))
    out.append(("p", f"Whole model, one replica, one copy of every KV head. On the most loaded GPU: "
                     f"{_b(fp.bytes_per_token_per_rank, units)} per token"
                     + (f", plus {_b(fp.state_bytes_per_request, units)} of recurrent state per request"
                        if fp.state_bytes_per_request else "") + "."))
    for t in size_doc.tables:
        if t.title.startswith("Layer groups"):
            out.append(("table", t))
    out.append(("h", 3, "The three measures"))
    measures = next(t for t in size_doc.tables if t.title == "Measures")
    out.append(("table", Table("", measures.columns, measures.rows, measures.align)))
    out.append(("p", "Effective KV counts the cached positions; block-rounded KV counts the slots of the blocks they "
                     "occupy; the pool (below) is what vLLM reserves at start-up, whatever the traffic."))
    out.append(("h", 3, "Per rank"))
    ranks = ranks_table(fp, units)
    out.append(("table", Table("", ranks.columns, ranks.rows, ranks.align)))
    out.append(("h", 3, "KV pool per GPU"))
    if r.pool is None and r.settings.has_pool:
        out.append(("p", f"No pool: {_no_pool_reason(m)}."))
    elif r.pool is None:
        out.append(("p", "No GPU given: pass --gpu (e.g. H100-80GB), --gpu-memory or --kv-cache-memory for the pool, "
                         "its budget table and the maximum concurrency."))
    else:
        pd = pool_document(r.pool, units)
        out.append(("facts", pd.facts))
        for t in pd.tables:
            out.append(("table", t))
    out += _sweep_blocks(m, units)
    out.append(("h", 3, "Assumptions and estimates"))
    at = Table("", ["what", "value", "where it comes from", "replace with"], align=["l", "l", "l", "l"])
    for a in m.assumptions:
        at.rows.append([a.what, a.value, a.source, a.flag or "-"])
    out.append(("table", at))
    extra = [n for n in size_doc.notes if n not in r.notes]
    if extra:
        out.append(("list", extra))
    return out


def report_blocks(report: Report, chart_list: list[Chart] | None, units: str = "iec",
                  charts_note: str = "") -> list[Block]:
    s = report.settings
    out: list[Block] = [("h", 1, report.title)]
    out.append(("p", f"Generated by kvcalc {report.version} with {report.models[0].result.rules} rules"
                     + (f": `{report.command}`" if report.command else "") + "."))
    out.append(("h", 2, "Summary"))
    out.append(("table", _summary(report, units)))
    out.append(("p", "Per GPU: the most loaded rank. Traffic: the block-rounded KV of the requests measured "
                     f"({report.models[0].result.footprint.traffic.description}). Pool and concurrency: per GPU and per "
                     "replica, as vLLM logs them at start-up."))
    if not s.has_pool:
        out.append(("p", "No GPU given, so no pool: pass --gpu, --gpu-memory or --kv-cache-memory for the pool, "
                         "the budget and the concurrency chart."))
    out.append(("h", 2, "Charts"))
    if chart_list is None:
        out.append(("p", charts_note or "Charts left out (--no-charts)."))
    else:
        for c in chart_list:
            out.append(("chart", c))
        if not any(c.slug == "concurrency" for c in chart_list):
            why = ("pass --gpu, --gpu-memory or --kv-cache-memory" if not s.has_pool
                   else "; ".join(_no_pool_reason(m) for m in report.models))
            out.append(("p", f"Max concurrency vs context length needs the pool: {why}."))
    for m in report.models:
        out += _model_blocks(m, units)
    if report.notes:
        out.append(("h", 2, "Notes"))
        out.append(("list", list(report.notes)))
    return out


# ---------------------------------------------------------------------------- Markdown


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    out = []
    if t.title:
        out += [f"**{t.title}**", ""]
    out.append("| " + " | ".join(_md_cell(c) or " " for c in t.columns) + " |")
    out.append("|" + "|".join("---:" if a == "r" else "---" for a in t.aligns()) + "|")
    for row in t.rows:
        out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    return out + [""]


def to_markdown(blocks: list[Block], chart_files: dict[str, str] | None = None) -> str:
    """``chart_files``: chart slug -> file name written beside the Markdown."""
    out: list[str] = []
    for b in clean_blocks(blocks):
        kind = b[0]
        if kind == "h":
            out += [f"{'#' * b[1]} {b[2]}", ""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "code":
            out += ["```", b[1], "```", ""]
        elif kind == "facts":
            out += [f"- **{k}**: {v}" for k, v in b[1]] + [""]
        elif kind == "table":
            out += _md_table(b[1])
        elif kind == "list":
            out += [f"- {x}" for x in b[1]] + [""]
        elif kind == "chart":
            c: Chart = b[1]
            name = (chart_files or {}).get(c.slug)
            if name:
                caption = c.caption.replace("*", "\\*")
                out += [f"![{c.title}]({name})", "", f"*{caption}*", ""]
    return "\n".join(out).rstrip("\n") + "\n"


# -------------------------------------------------------------------------------- HTML

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif;
       color: #1f2328; background: #ffffff; margin: 0; line-height: 1.45; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 1.7rem; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.3rem; margin-top: 2em; padding-bottom: 0.25em; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.05rem; margin-top: 1.6em; }
p, li { max-width: 80ch; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.9em; }
pre { background: #f6f8fa; padding: 10px 14px; border-radius: 6px; overflow-x: auto; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0.8em 0; }
dl.facts dt { font-weight: 600; color: #57606a; }
dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.88rem; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
figure.chart { margin: 1.2em 0 2em; }
figure.chart svg { max-width: 100%; height: auto; border: 1px solid #eaeef2; border-radius: 6px; }
figcaption { font-size: 0.85rem; color: #57606a; max-width: 90ch; margin-top: 4px; }
.table-wrap { overflow-x: auto; }
code.flag { white-space: nowrap; font-size: 0.92em; }
"""


_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _h(text: Any) -> str:
    return html.escape(clean(text), quote=True)


def _hf(text: Any) -> str:
    """Escape, and keep every --flag on one line (a browser would break it at its hyphens)."""
    return _FLAG.sub(r'<code class="flag">\1</code>', _h(text))


def _inline(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    parts = str(text).split("`")
    return "".join(_hf(p) if i % 2 == 0 else f"<code>{_h(p)}</code>" for i, p in enumerate(parts))


def _html_table(t: Table) -> list[str]:
    aligns = t.aligns()
    out = ['<div class="table-wrap"><table>']
    if t.title:
        out.append(f"<caption>{_h(t.title)}</caption>")
    out.append("<thead><tr>" + "".join(
        f'<th class="{"num" if a == "r" else "txt"}">{_h(c)}</th>' for c, a in zip(t.columns, aligns, strict=False)
    ) + "</tr></thead><tbody>")
    for row in t.rows:
        out.append("<tr>" + "".join(
            f'<td class="{"num" if a == "r" else "txt"}">{_hf(c)}</td>' for c, a in zip(row, aligns, strict=False)
        ) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def to_html(blocks: list[Block], title: str) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="kvcalc">',
        f"<title>{_h(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body><main>",
    ]
    for b in clean_blocks(blocks):
        kind = b[0]
        if kind == "h":
            out.append(f"<h{b[1]}>{_h(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "code":
            out.append(f"<pre><code>{_h(b[1])}</code></pre>")
        elif kind == "facts":
            out.append('<dl class="facts">' + "".join(f"<dt>{_h(k)}</dt><dd>{_hf(v)}</dd>" for k, v in b[1]) + "</dl>")
        elif kind == "table":
            out += _html_table(b[1])
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in b[1]) + "</ul>")
        elif kind == "chart":
            c: Chart = b[1]
            out.append(f'<figure class="chart" id="chart-{_h(c.slug)}">')
            out.append(c.svg.strip())
            out.append(f"<figcaption>{_h(c.caption)}</figcaption></figure>")
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


def standalone_svg(svg: str) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg


def render_report(report: Report, fmt: str, *, stem: str | None = None, with_charts: bool = True,
                  units: str = "iec") -> tuple[str, dict[str, str]]:
    """(main text, {file name: SVG text} to write beside it). ``stem``: the Markdown file's
    name without its suffix (``report`` for report.md); None when printing to stdout."""
    if fmt == "html":
        cl = charts(report) if with_charts else None
        blocks = report_blocks(report, cl, units, "Charts left out (--no-charts).")
        return to_html(blocks, report.title), {}
    if fmt == "markdown":
        if not with_charts:
            return to_markdown(report_blocks(report, None, units, "Charts left out (--no-charts).")), {}
        if stem is None:
            note = ("Charts left out: printed to stdout. Write the report to a file (-o report.md) to get the charts "
                    "as SVG files beside it, or as HTML (-o report.html) with the charts inline.")
            return to_markdown(report_blocks(report, None, units, note)), {}
        cl = charts(report)
        files = {c.slug: f"{stem}-{c.slug}.svg" for c in cl}
        text = to_markdown(report_blocks(report, cl, units), files)
        return text, {files[c.slug]: standalone_svg(c.svg) for c in cl}
    raise ValueError(f"unknown report format {fmt!r}")  # pragma: no cover - the CLI checks
