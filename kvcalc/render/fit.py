"""`kvcalc fit` as JSON and as a table."""

from __future__ import annotations

from typing import Any

from kvcalc.app.fit import Candidate
from kvcalc.render import Document, Table


def candidate_payload(c: Candidate, target: float) -> dict[str, Any]:
    total = c.total_concurrency
    return {
        "engine": c.engine,
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "gpus": c.gpus,
        "kv_dtype": c.kv_dtype,
        "ok": c.ok,
        "reason": c.reason,
        "max_concurrency_per_replica": c.concurrency_per_replica,
        "max_concurrency": total,
        # spare concurrency over the target: 0.25 = 25 % more than asked
        "headroom": (total / target - 1.0) if c.ok and target else None,
        "pool_tokens_per_replica": c.pool_tokens,
        "num_blocks": c.num_blocks,
        "kv_cache_memory_bytes": c.kv_cache_memory_bytes,
    }


def fit_payload(
    model: str, found: list[Candidate], *, concurrency: float, max_gpus: int, vllm_version: str,
    engines: tuple[str, ...] = ("vllm",), sglang_version: str | None = None,
) -> dict[str, Any]:
    rows = [candidate_payload(c, concurrency) for c in found]
    return {
        "model": model,
        "target_concurrency": concurrency,
        "max_gpus": max_gpus,
        "vllm_version": vllm_version,
        "engines": list(engines),
        "sglang_version": sglang_version if "sglang" in engines else None,
        "deployments": [r for r in rows if r["ok"]],
        "rejected": [r for r in rows if not r["ok"]],
    }


def fit_document(payload: dict[str, Any], *, show_rejected: bool) -> Document:
    ok, rejected = payload["deployments"], payload["rejected"]
    doc = Document(
        f"Deployments of {payload['model']} for {payload['target_concurrency']:g} concurrent requests "
        f"({_rules(payload)} rules)"
    )
    doc.tables.append(
        Table(
            "Meets the target (fewest GPUs first, then most headroom)",
            ["engine", "TP", "PP", "DP", "GPUs", "kv dtype", "concurrency/replica", "total", "headroom", "pool tokens/replica"],
            [[r["engine"], r["tp"], r["pp"], r["dp"], r["gpus"], r["kv_dtype"], f"{r['max_concurrency_per_replica']:.2f}x",
              f"{r['max_concurrency']:.2f}x", f"{r['headroom']:+.0%}", f"{r['pool_tokens_per_replica']:,}"] for r in ok],
        )
    )
    if show_rejected:
        doc.tables.append(
            Table("Rejected", ["engine", "TP", "PP", "kv dtype", "why"],
                  [[r["engine"], r["tp"], r["pp"], r["kv_dtype"], r["reason"]] for r in rejected],
                  align=["l", "r", "r", "l", "l"])
        )
    if not ok:
        doc.notes.append("no deployment meets the target within --max-gpus")
    return doc


def _rules(payload: dict[str, Any]) -> str:
    out = []
    for e in payload.get("engines") or ["vllm"]:
        out.append(f"SGLang {payload['sglang_version']}" if e == "sglang" else f"vLLM {payload['vllm_version']}")
    return " / ".join(out)
