"""`kvcalc report --format json`: the report's data as the JSON contract."""

from __future__ import annotations

from typing import Any

from kvcalc.app.report import Report
from kvcalc.render.size import formula, size_payload


def report_payload(report: Report) -> dict[str, Any]:
    """The report's data as JSON: the size payload of every model plus the sweeps."""
    models = []
    for m in report.models:
        d = size_payload(m.result)
        d["formula"] = formula(m.result.footprint)
        d["context_curve"] = [{"tokens": t, "block_rounded_bytes_per_rank": b} for t, b in m.context]
        d["concurrency_curve"] = [
            {"max_model_len": c.max_model_len, "max_concurrency": c.max_concurrency, "fits": c.fits,
             "pool_tokens": c.pool_tokens}
            for c in m.concurrency
        ]
        d["tp_sweep"] = [
            {"tp": r.tp, "bytes_per_token_per_rank": r.bytes_per_token_per_rank, "kv_heads_per_rank": r.kv_heads_per_rank,
             "kv_heads_replicated": r.replicated, "error": r.error}
            for r in m.tp_sweep
        ]
        d["kv_dtypes"] = [
            {"kv_dtype": r.label, "stored_as": r.kv_dtype, "bytes_per_token": r.bytes_per_token,
             "bytes_per_token_per_rank": r.bytes_per_token_per_rank,
             "block_rounded_bytes_per_rank": r.block_rounded_bytes_per_rank, "pool_tokens": r.pool_tokens,
             "max_concurrency": r.max_concurrency, "fits_max_model_len": r.fits, "error": r.error}
            for r in m.dtypes
        ]
        d["assumptions"] = [{"what": a.what, "value": a.value, "source": a.source, "flag": a.flag} for a in m.assumptions]
        models.append(d)
    return {
        "title": report.title,
        "kvcalc_version": report.version,
        "command": report.command,
        "models": models,
        "notes": list(report.notes),
    }
