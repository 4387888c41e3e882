"""The pool section people read: budget table with sources, blocks, concurrency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.core.memo import Memo
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table, with_units
from kvcalc.words import plural

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport


def pool_document(r: PoolReport, units: str = "iec") -> Document:
    if getattr(r, "engine", "vllm") == "sglang":
        from kvcalc.render.sglang_pool import sglang_pool_document

        return sglang_pool_document(r, units)  # type: ignore[arg-type]
    i = r.inputs
    L = i.max_model_len
    doc = Document(f"KV pool per GPU — vLLM {i.vllm_version} rules")
    for stage, terms in enumerate(i.terms):
        if stage and terms == i.terms[0]:
            continue
        title = "Budget per GPU" + (f" (PP stage {stage})" if len(i.terms) > 1 else "")
        doc.tables.append(
            Table(title, ["term", "size", "source"],
                  [[t.name, format_bytes(t.bytes, units), t.source] for t in terms],
                  align=["l", "r", "l"])
        )
    doc.tables.append(
        Table(
            "KV cache groups",
            ["group", "layers", "block size", "page (1 layer)", "blocks per request"],
            [[g.kind, len(g.layers), g.block_size, format_bytes(g.spec.page_size_bytes, units),
              g.blocks_per_request(L, i.in_flight_tokens)]
             for g in r.groups],
        )
    )
    doc.facts = [
        ("rules", i.rules_note or i.rules.label),
        ("grouping", r.rule),
        ("bytes per block", f"{format_bytes(r.bytes_per_block, units)} per GPU"),
        ("blocks", f"{r.num_blocks} per GPU (min over {plural(len(r.workers), 'PP stage')}; includes vLLM's null block)"
         + (f", forced by --num-gpu-blocks-override {i.num_gpu_blocks_override}" if i.num_gpu_blocks_override else "")),
        ("pool tokens", f"{r.pool_tokens:,} = {r.num_blocks} blocks x {r.block_size} tokens"),
        ("per request at max_model_len", f"{r.blocks_per_request} blocks for {L:,} tokens "
         f"(in flight: {i.max_concurrent_batches} x {i.max_num_batched_tokens} tokens; {i.max_num_batched_tokens_source})"),
        ("max concurrency", f"{r.max_concurrency:.2f}x per replica, {r.max_concurrency * r.plan.dp:.2f}x for {plural(r.plan.dp, 'replica')}"),
        ("vLLM would log", log_line(r)),
    ]
    if r.fits:
        best = r.estimated_max_model_len or 0
        top = max(L, r.model.max_model_len)
        how = (f"even the model's full {top:,} tokens would fit" if best >= top
               else f"the largest max_model_len that fits is {best:,} tokens")
        doc.facts.append(("fits max_model_len", f"yes; {how}"))
    else:
        doc.facts.append(("fits max_model_len", "NO — vLLM refuses to start: " + (r.error or "")))
    doc.notes = list(r.notes)
    with_units(doc, units)
    return doc


_PAYLOADS: Memo[dict[str, Any]] = Memo(256)


def pool_payload(r: PoolReport) -> dict[str, Any]:
    """The pool as the JSON contract's ``pool`` object (the same keys for both engines). One
    dict per pool (read, never changed, by its callers): a sweep's rows share a few pools, and
    ``to_json`` encodes a shared object once."""
    return _PAYLOADS.get(id(r), _pool_payload, r, keep=r)


def _pool_payload(r: PoolReport) -> dict[str, Any]:
    if getattr(r, "engine", "vllm") == "sglang":
        from kvcalc.render.sglang_pool import sglang_pool_payload

        return sglang_pool_payload(r)  # type: ignore[arg-type]
    i = r.inputs
    return {
        "engine": "vllm",
        "vllm_version": i.vllm_version,
        "rules": i.rules_note or i.rules.label,
        "rule_line": i.rules.label,
        "gpu": i.gpu_name,
        "gpu_memory_bytes": i.gpu_memory_bytes,
        "gpu_memory_utilization": i.gpu_memory_utilization,
        "requested_bytes": i.requested_bytes,
        "weights_bytes_per_rank": max(i.weights_bytes_per_stage) if i.weights_bytes_per_stage else None,
        "weights_bytes_per_stage": list(i.weights_bytes_per_stage),
        "activation_bytes": i.activation_bytes,
        "overhead_bytes": i.overhead_bytes,
        "cudagraph_bytes": i.cudagraph_bytes,
        "kv_cache_memory_bytes": min(i.available_per_stage),
        "kv_cache_memory_bytes_per_stage": list(i.available_per_stage),
        "budget": [
            [{"term": t.name, "bytes": t.bytes, "source": t.source} for t in stage] for stage in i.terms
        ],
        "block_size": r.block_size,
        "bytes_per_block": r.bytes_per_block,
        "num_blocks": r.num_blocks,
        "num_gpu_blocks_override": i.num_gpu_blocks_override,
        "pool_tokens": r.pool_tokens,
        "pool_bytes_per_gpu": r.pool_bytes_per_gpu,
        "kv_cache_size_tokens": r.kv_cache_size_tokens,
        "max_model_len": i.max_model_len,
        "max_num_batched_tokens": i.max_num_batched_tokens,
        "max_concurrent_batches": i.max_concurrent_batches,
        "in_flight_tokens": i.in_flight_tokens,
        "blocks_per_request": r.blocks_per_request,
        "max_concurrency": r.max_concurrency,
        "fits_max_model_len": r.fits,
        "estimated_max_model_len": r.estimated_max_model_len,
        "error": r.error,
        "grouping": r.rule,
        "groups": [
            {"kind": g.kind, "layers": len(g.layers), "block_size": g.block_size,
             "page_size_bytes": g.spec.page_size_bytes,
             "blocks_per_request": g.blocks_per_request(i.max_model_len, i.in_flight_tokens)}
            for g in r.groups
        ],
        "workers": [
            {"pp_rank": w.pp_rank, "kv_cache_memory_bytes": w.available_bytes,
             "bytes_per_block": w.bytes_per_block, "num_blocks": w.num_blocks}
            for w in r.workers
        ],
        "per_replica": {
            "gpus": r.plan.ranks_per_replica,
            "max_concurrency": r.max_concurrency,
            "kv_cache_size_tokens": r.kv_cache_size_tokens,
            "pool_bytes": r.pool_bytes_per_gpu * r.plan.ranks_per_replica,
        },
        "deployment": {
            "gpus": r.plan.world_size,
            "replicas": r.plan.dp,
            "max_concurrency": r.max_concurrency * r.plan.dp,
            "kv_cache_size_tokens": r.kv_cache_size_tokens * r.plan.dp,
            "pool_bytes": r.pool_bytes_per_gpu * r.plan.world_size,
        },
        "log_line": log_line(r),
        "log_lines": log_lines(r),
    }


def log_lines(r: PoolReport) -> list[str]:
    """The capacity lines vLLM logs at start-up, in the format of the release line
    (docs/vllm-releases.md section 6): "Available KV cache memory" per worker from 0.9.1
    (%.2f up to 0.13.0, round(x, 2) after); before 0.11.1 each worker logs its own
    size/concurrency pair before the minimum, then one pair, one combined line from 0.28.0."""
    from kvcalc.core import vllm_rules as R

    rules, L = r.inputs.rules, r.inputs.max_model_len
    out: list[str] = []
    if rules.first >= (0, 9, 1):  # no such line before (vllm==0.9.1: vllm/v1/worker/gpu_worker.py:227)
        for w in r.workers:
            gib = w.available_bytes / (1 << 30)
            out.append(f"Available KV cache memory: {round(gib, 2) if rules.gib_round else f'{gib:.2f}'} GiB")
    pairs = [(w.kv_cache_size_tokens, w.max_concurrency) for w in r.workers] if rules.log == R.LOG_PER_WORKER else []
    pairs = pairs or [(r.kv_cache_size_tokens, r.max_concurrency)]
    for tokens, conc in pairs:
        size, concurrency = f"GPU KV cache size: {tokens:,} tokens", f"Maximum concurrency for {L:,} tokens per request: {conc:.2f}x"
        if rules.log in (R.LOG_COMBINED, R.LOG_DEVICE):
            out.append(f"{size}, {concurrency}")
        else:
            out.extend((size, concurrency))
    return out


def log_line(r: PoolReport) -> str:
    """The capacity line vLLM logs at start-up, in the format of the release line: one line
    joined by ", " from 0.28.0 (the device name, "GPU" on CUDA, from 0.30.0), two lines
    before (shown joined by " / "). SGLang: its KV line."""
    if getattr(r, "engine", "vllm") == "sglang":
        from kvcalc.core.sglang_pool import log_summary

        return log_summary(r)  # type: ignore[arg-type]
    from kvcalc.core import vllm_rules as R

    L = r.inputs.max_model_len
    size = f"GPU KV cache size: {r.kv_cache_size_tokens:,} tokens"
    concurrency = f"Maximum concurrency for {L:,} tokens per request: {r.max_concurrency:.2f}x"
    if r.inputs.rules.log in (R.LOG_COMBINED, R.LOG_DEVICE):
        return f"{size}, {concurrency}"
    return f"{size} / {concurrency}"
