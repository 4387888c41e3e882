"""`kvcalc probe` output: a ProbeReport as its JSON payload and as a Document people read.

Every row shows predicted, measured, difference, tolerance and verdict; bytes get their
human size next to them, ranges print as ``min..max``.
"""

from __future__ import annotations

from typing import Any

from kvcalc.app.probe_report import (
    AllocFacts,
    Check,
    EngineFacts,
    Facts,
    LogFacts,
    ModelCacheFacts,
    ProbeReport,
    Row,
)
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table, render

COLUMNS = ["measure", "predicted", "measured", "difference", "tolerance", "verdict"]
ALIGN = ["l", "r", "r", "r", "r", "l"]


def row_payload(r: Row) -> dict[str, Any]:
    out: dict[str, Any] = {
        "what": r.what,
        "unit": r.unit,
        "predicted": r.predicted,
        "measured": r.measured,
        "difference": r.difference,
        "tolerance": r.tolerance,
        "verdict": r.verdict,
    }
    if r.predicted_min is not None:
        out["predicted_min"] = r.predicted_min
        out["predicted_max"] = r.predicted_max
    if r.mismatch:
        out["mismatch"] = r.mismatch
    out["explanation"] = r.note
    if r.details:
        out["details"] = r.details
    return out


def check_payload(c: Check) -> dict[str, Any]:
    return {
        "check": c.name,
        "title": c.title,
        "engine": c.engine,
        "verdict": c.verdict,
        "facts": {k: v for k, v in check_facts(c.facts)},
        "measurements": [row_payload(r) for r in c.rows],
        "explanation": list(c.explanation),
        "details": c.details,
    }


def check_facts(f: Facts | None) -> list[tuple[str, str]]:
    """(label, value) lines of what a check worked with."""
    if isinstance(f, AllocFacts):
        return [
            ("rank", f"PP rank {f.pp_rank} of {f.pp}, TP rank 0 of {f.tp}"),
            ("layers probed", f"{f.layers_probed} of the rank's {f.rank_layers} cache layers"),
            ("blocks", f"{f.num_blocks:,} x {f.block_size} tokens"),
            ("kv dtype", f.kv_dtype),
            ("grouping", f.grouping),
            ("bytes per block", f"{f.bytes_per_block:,} (probed layers), {f.rank_bytes_per_block:,} (whole rank)"),
        ]
    if isinstance(f, ModelCacheFacts):
        return [
            ("positions", f"P + G - 1 = {f.prompt} + {f.gen} - 1 = {f.prompt + f.gen - 1}"),
            ("layers", f"{f.layers} of {f.model_layers}"),
            ("dtype", f.dtype),
            ("device", f.device),
            ("transformers holds (visible)", f"{f.transformers_bytes:,} B for {f.layers} layers"),
            ("vLLM would hold",
             f"{f.vllm_bytes:,} B for {f.layers} layers ({f.vllm_block_size}-token blocks, the same request)"),
        ]
    if isinstance(f, EngineFacts):
        return [
            ("available KV cache memory",
             f"{f.available_bytes:,} B" + (" (--kv-cache-memory)" if f.memory_given else " (profiled)")),
            ("max_model_len", f"{f.max_model_len:,}"),
            ("block size", str(f.block_size)),
            ("GPU", f.gpu),
        ]
    if isinstance(f, LogFacts):
        return [
            ("log format", f.log_format + (f", vLLM {f.vllm_version}" if f.vllm_version else "")),
            ("available KV cache memory", f"{f.printed_gib} GiB as printed -> {f.low_bytes:,}..{f.high_bytes:,} B"),
            ("max_model_len", f"{f.max_model_len:,}"),
            ("block size", str(f.block_size)),
            ("bytes per block", f"{f.bytes_per_block:,}"),
            ("blocks at both ends", f"{f.blocks_low:,}..{f.blocks_high:,}"),
        ]
    return []


def probe_payload(report: ProbeReport) -> dict[str, Any]:
    return {
        "model": report.model,
        "source": report.source,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "checks": [check_payload(c) for c in report.checks],
    }


def check_document(check: Check, units: str = "iec") -> Document:
    sub = Document(f"{check.title}: {check.verdict}")
    sub.facts = [("numbers for", check.engine), *check_facts(check.facts)]
    table = Table("", list(COLUMNS), align=list(ALIGN))
    for r in check.rows:
        table.rows.append(
            [
                r.what,
                _fmt_pred(r, units),
                _fmt(r.measured, r.unit, units),
                _fmt(r.difference, r.unit, units, signed=True),
                _fmt_tol(r, units),
                r.verdict + (f" ({r.mismatch})" if r.mismatch else ""),
            ]
        )
    sub.tables.append(table)
    sub.notes = [n for n in check.explanation] + [f"{r.what}: {r.note}" for r in check.rows if r.note]
    return sub


def probe_document(report: ProbeReport, units: str = "iec") -> Document:
    doc = Document(f"kvcalc probe {report.model}: {report.verdict.upper()}")
    doc.facts.append(("model", f"{report.model} ({report.source})"))
    doc.sections.extend(check_document(c, units) for c in report.checks)
    return doc


def _fmt(value: int | float | None, unit: str, units: str, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:+.4f}x" if signed else f"{value:.4f}x"
    if isinstance(value, float):
        return f"{value:+,.2f}" if signed else f"{value:,.2f}"
    text = f"{value:+,}" if signed else f"{value:,}"
    if unit == "B":
        if abs(value) >= 1024:
            human = format_bytes(abs(value), units)
            text += f" ({'-' if value < 0 else ''}{human})"
        return text
    return f"{text} {unit}" if unit else text


def _fmt_pred(r: Row, units: str) -> str:
    if r.predicted_min is not None and r.predicted_max is not None and r.predicted_min != r.predicted_max:
        if r.unit == "x":
            return f"{r.predicted_min:.4f}..{r.predicted_max:.4f}x"
        return f"{r.predicted_min:,}..{r.predicted_max:,} {r.unit}".rstrip()
    return _fmt(r.predicted, r.unit, units)


def _fmt_tol(r: Row, units: str) -> str:
    if r.info:
        return "-"
    if r.predicted_min is not None:
        return "range"
    if not r.tolerance:
        return "exact"
    return "±" + _fmt(r.tolerance, r.unit, units)


def render_probe(fmt: str, report: ProbeReport, units: str = "iec") -> str:
    """The report as text: JSON, Markdown or a Rich table."""
    return render(fmt, probe_payload(report), None if fmt == "json" else probe_document(report, units))
