"""The report's charts: what each one plots, as data for ``kvcalc.render.svg``."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.app.report import ModelReport, Report
from kvcalc.core.units import format_bytes
from kvcalc.render import svg as S

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# every chart a report may draw; a Markdown report writes <stem>-<slug>.svg for each drawn
CHART_SLUGS = ("kv-vs-context", "concurrency", "tp-sizes", "kv-dtypes")


@dataclass(frozen=True)
class Chart:
    slug: str  # file name part: report-<slug>.svg
    title: str
    svg: str
    caption: str


# A report is a list of blocks, rendered the same way to both formats:
# ("h", level, text) | ("p", text) | ("code", text) | ("facts", [(label, value)]) |
# ("table", Table) | ("chart", Chart) | ("list", [text])
Block = tuple


def _unit(largest: float) -> tuple[int, str]:
    return next(((f, n) for f, n in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")) if largest >= f), (1, "B"))


def _no_pool_reason(m: ModelReport) -> str:
    """Why a model has no pool although a GPU was given (vLLM does not serve it)."""
    spec = m.result.footprint.model
    return f"vLLM does not serve {spec.model_type} ({spec.name}), so it plans no pool for it"


def kv_context_chart(report: Report) -> Chart:
    models = report.models
    curve_max = max([b for m in models for _, b in m.context] + [1])
    pool_max = max([m.pool_bytes_per_rank or 0 for m in models])
    # a pool far above one request would flatten the curves on a linear axis: use a log axis
    # (powers of two, so the ticks read 256 MiB, 1 GiB, 4 GiB, ...)
    # ... and so would one model's curve far above another's (several models in one chart)
    tops = [max([b for _, b in m.context] + [1]) for m in models]
    log_y = pool_max > 8 * curve_max or max(tops) > 8 * min(tops)
    if log_y:
        factor, unit = 1, "log scale"
        series = [S.Series(m.name, [(t, float(b)) for t, b in m.context if b > 0], markers=False) for m in models]
    else:
        factor, unit = _unit(max(curve_max, pool_max))
        series = [S.Series(m.name, [(t, b / factor) for t, b in m.context], markers=False) for m in models]
    hlines = [
        S.HLine(m.pool_bytes_per_rank / factor,
                f"KV pool per GPU{f' ({m.name})' if len(models) > 1 else ''}: {format_bytes(m.pool_bytes_per_rank)}",
                color=S.PALETTE[i % len(S.PALETTE)] if len(models) > 1 else "#B22222")
        for i, m in enumerate(models) if m.pool_bytes_per_rank is not None
    ]
    marks: dict[int, list[str]] = {}
    for m in models:
        marks.setdefault(m.result.max_model_len, []).append(m.name)
    vlines = [S.VLine(x, f"max_model_len {x:,}" + (f" ({', '.join(n)})" if len(models) > 1 else ""))
              for x, n in sorted(marks.items())]
    x_hi = max(t for m in models for t, _ in m.context)
    svg = S.line_chart(
        "KV cache of one request per GPU vs context length",
        series, x_label="context length (tokens)", y_label=f"KV per rank ({unit}, block-rounded)",
        hlines=hlines, vlines=vlines, x_format=S.fmt_tokens, x_ticks=S.binary_ticks(x_hi),
        y_scale="log2" if log_y else "linear",
        y_format=(lambda v: format_bytes(int(v))) if log_y else S.fmt_number,
    )
    cap = ("Block-rounded KV bytes one request holds on the most loaded rank, for request lengths up to the model's "
           "maximum; dashed horizontal line: the KV pool vLLM reserves per GPU; dashed vertical line: max_model_len.")
    if log_y:
        cap += (" The pool is more than 8 times the largest request, or one model's requests more than 8 times"
                " another's, so the bytes axis is logarithmic.")
    if not report.settings.has_pool:
        cap += " No GPU given, so no pool line (pass --gpu, --gpu-memory or --kv-cache-memory)."
    for m in models:
        if report.settings.has_pool and m.result.pool is None:
            cap += f" No pool for {m.name}: {_no_pool_reason(m)}."
    return Chart("kv-vs-context", "KV bytes vs context length", svg, cap)


def concurrency_chart(report: Report) -> Chart | None:
    models = [m for m in report.models if m.concurrency]
    if not models:
        return None
    xs = [c.max_model_len for m in models for c in m.concurrency]
    ys = [c.max_concurrency for m in models for c in m.concurrency]
    log_x = max(xs) / max(1, min(xs)) >= 16
    positive = min(ys) > 0
    log_y = positive and max(ys) / min(ys) >= 20
    series = [S.Series(m.name, [(c.max_model_len, c.max_concurrency) for c in m.concurrency]) for m in models]
    marks = sorted({m.result.max_model_len for m in models})
    svg = S.line_chart(
        "Maximum concurrency vs max_model_len",
        series, x_label="max_model_len (tokens)", y_label="max concurrency (requests of max_model_len)",
        hlines=[S.HLine(1.0, "1x: one request of max_model_len", color="#B22222")],
        vlines=[S.VLine(x, f"chosen {x:,}") for x in marks],
        x_scale="log2" if log_x else "linear", y_scale="log10" if log_y else "linear",
        x_format=S.fmt_tokens,
    )
    cap = ("vLLM's 'Maximum concurrency for N tokens per request': the pool planned at each max_model_len (the budget "
           "recomputed each time), divided by the blocks one request of that length needs. Below 1x vLLM refuses to start.")
    return Chart("concurrency", "Max concurrency vs context length", svg, cap)


def tp_chart(report: Report) -> Chart:
    largest = max([r.bytes_per_token_per_rank or 0 for m in report.models for r in m.tp_sweep] + [1])
    factor, unit = _unit(largest)
    sizes = [r.tp for r in report.models[0].tp_sweep]
    series = [
        S.BarSeries(m.name, [None if r.bytes_per_token_per_rank is None else r.bytes_per_token_per_rank / factor
                             for r in m.tp_sweep],
                    ["replicated" if r.replicated else None for r in m.tp_sweep])
        for m in report.models
    ]
    svg = S.bar_chart(
        "KV bytes per token per GPU across TP sizes", [f"TP {t}" for t in sizes], series,
        x_label="tensor-parallel size", y_label=f"per token per rank ({unit})", mark_legend="KV heads replicated",
        value_format=lambda v: S._trim(round(v, 2)),
    )
    cap = ("Bytes one more token costs on one GPU. When TP exceeds the KV heads, every rank keeps a replicated head "
           "(faded bars): the per-GPU bytes stop shrinking. MLA keeps the whole latent on every rank. n/a: vLLM "
           "rejects that TP size for the model.")
    return Chart("tp-sizes", "Per-token bytes across TP sizes", svg, cap)


def dtype_chart(report: Report) -> Chart:
    cats: list[str] = []
    for m in report.models:
        for r in m.dtypes:
            key = r.label.split(" ")[0]
            if key not in cats:
                cats.append(key)
    largest = max([r.bytes_per_token_per_rank or 0 for m in report.models for r in m.dtypes] + [1])
    factor, unit = _unit(largest)
    series = []
    for m in report.models:
        by = {r.label.split(" ")[0]: r for r in m.dtypes}
        per_rank = {c: by[c].bytes_per_token_per_rank if c in by else None for c in cats}
        series.append(S.BarSeries(m.name, [None if (v := per_rank[c]) is None else v / factor for c in cats]))
    labels = []
    for c in cats:
        stored = {r.kv_dtype for m in report.models for r in m.dtypes if r.label.split(" ")[0] == c}
        labels.append(f"{c} ({stored.pop()})" if c == "auto" and len(stored) == 1 else c)
    svg = S.bar_chart(
        "KV bytes per token per GPU across KV cache dtypes", labels, series,
        x_label="--kv-cache-dtype", y_label=f"per token per rank ({unit})",
        value_format=lambda v: S._trim(round(v, 2)),
    )
    cap = ("fp8 stores one byte per element and per-tensor scales add nothing to the pool; the *_per_token_head "
           "formats add 8 B per token and head; fp8_ds_mla packs 656 B per token and layer.")
    return Chart("kv-dtypes", "KV cache dtypes compared", svg, cap)


def charts(report: Report) -> list[Chart]:
    out = [kv_context_chart(report)]
    c = concurrency_chart(report)
    if c is not None:
        out.append(c)
    out += [tp_chart(report), dtype_chart(report)]
    return out


# ------------------------------------------------------------------------------ blocks
