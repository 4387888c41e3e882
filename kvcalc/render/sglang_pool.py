"""SGLang's pool section and its ``pool`` JSON object (the same keys as vLLM's, plus
``engine`` and SGLang's own figures). Imported only for an SGLang pool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.core.sglang_pool import kv_log_lines, log_summary, payload_extra, scheduler_line
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table

if TYPE_CHECKING:
    from kvcalc.core.sglang_pool import SglangPool


def sglang_pool_document(r: SglangPool, units: str = "iec") -> Document:
    i = r.inputs
    doc = Document(f"KV pool per GPU — SGLang {i.sglang_version} rules ({i.rules})")
    for terms in i.terms[:1]:
        doc.tables.append(
            Table("Budget per GPU", ["term", "bytes", "", "source"],
                  [[t.name, t.bytes, format_bytes(t.bytes, units), t.source] for t in terms],
                  align=["l", "r", "r", "l"])
        )
    c = r.cell
    per_token = f"{c.full} B per token ({c.k_full} K + {c.v_full} V)" if c.v_full else f"{c.full} B per token (latent)"
    doc.facts = [
        ("bytes per token", per_token + (f"; sliding-window pool {c.swa} B" if r.swa_tokens is not None else "")),
        ("max_total_num_tokens", f"{r.max_total_num_tokens:,}" + (f" (page size {i.page_size})" if i.page_size > 1 else "")),
    ]
    if r.swa_tokens is not None:
        doc.facts.append(("sliding-window pool", f"{r.swa_tokens:,} tokens (swa_full_tokens_ratio {i.swa_full_tokens_ratio})"))
    if r.mamba_cache_size is not None:
        doc.facts.append(("mamba state pool", f"{r.mamba_cache_size} requests x {format_bytes(c.mamba_state, units)}"))
    doc.facts += [
        ("pool on the GPU", f"{format_bytes(r.pool_bytes_per_gpu, units)} (K {format_bytes(r.k_bytes, units)} + "
         f"V {format_bytes(r.v_bytes, units)}, with the padding page)"),
        ("max_running_requests", f"{r.max_running} ({r.max_running_source})"),
        ("context_len", f"{i.context_len:,}; the pool holds {r.max_concurrency:.2f} requests of it"),
    ]
    if r.error:
        doc.facts.append(("starts", "NO — SGLang refuses to start: " + r.error))
    else:
        for line in kv_log_lines(r):
            doc.facts.append(("SGLang would log", line))
        doc.facts.append(("SGLang would log", scheduler_line(r) + " (and available_gpu_mem, measured after CUDA graphs)"))
    return doc  # the notes are the result's (kvcalc.app.service.evaluate)


def sglang_pool_payload(r: SglangPool) -> dict[str, Any]:
    """The ``pool`` object: vLLM's keys with SGLang's meaning, ``engine``, then SGLang's own keys."""
    i = r.inputs
    rest = r.rest_bytes
    out: dict[str, Any] = {
        "engine": "sglang",
        "vllm_version": None,
        "gpu": i.gpu_name,
        "gpu_memory_bytes": i.gpu_memory_bytes,
        "gpu_memory_utilization": None,
        "requested_bytes": int(i.free_before * i.mem_fraction_static) if i.free_before and i.mem_fraction_static else None,
        "weights_bytes_per_rank": max(i.weights_bytes_per_stage) if i.weights_bytes_per_stage else None,
        "weights_bytes_per_stage": list(i.weights_bytes_per_stage),
        "activation_bytes": None,
        "overhead_bytes": None,
        "cudagraph_bytes": None,
        "kv_cache_memory_bytes": rest,
        "kv_cache_memory_bytes_per_stage": list(i.available_per_stage),
        "budget": [[{"term": t.name, "bytes": t.bytes, "source": t.source} for t in stage] for stage in i.terms],
        "block_size": r.block_size,
        "bytes_per_block": r.bytes_per_block,
        "num_blocks": r.num_blocks,
        "num_gpu_blocks_override": None,
        "pool_tokens": r.pool_tokens,
        "pool_bytes_per_gpu": r.pool_bytes_per_gpu,
        "kv_cache_size_tokens": r.kv_cache_size_tokens,
        "max_model_len": i.context_len,
        "max_num_batched_tokens": i.chunked_prefill_size,
        "max_concurrent_batches": 1,
        "in_flight_tokens": i.chunked_prefill_size,
        "blocks_per_request": r.blocks_per_request,
        "max_concurrency": r.max_concurrency,
        "fits_max_model_len": r.fits,
        "estimated_max_model_len": r.estimated_max_model_len,
        "error": r.error,
        "grouping": r.rule,
        "groups": [],
        "workers": [],
        "per_replica": {
            "gpus": r.plan.ranks_per_replica,
            "max_concurrency": r.max_concurrency * i.dp,
            "kv_cache_size_tokens": r.kv_cache_size_tokens * i.dp,
            "pool_bytes": r.pool_bytes_per_gpu * r.plan.ranks_per_replica,
        },
        "deployment": {
            "gpus": r.plan.world_size // (i.dp if i.dp_attention else 1),
            "replicas": r.plan.dp if not i.dp_attention else 1,
            "max_concurrency": r.max_concurrency * r.plan.dp,
            "kv_cache_size_tokens": r.kv_cache_size_tokens * r.plan.dp,
            "pool_bytes": r.pool_bytes_per_gpu * r.plan.world_size // (i.dp if i.dp_attention else 1),
        },
        "log_line": log_summary(r),
        "log_lines": [log_summary(r)],
        "rules": i.rules,
        "rule_line": i.line.label,
    }
    out.update(payload_extra(r))
    return out
