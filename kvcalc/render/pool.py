"""The pool section people read: budget table with sources, blocks, concurrency."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport


def pool_document(r: PoolReport, units: str = "iec") -> Document:
    i = r.inputs
    L = i.max_model_len
    doc = Document(f"KV pool per GPU — vLLM {i.vllm_version} rules")
    for stage, terms in enumerate(i.terms):
        if stage and terms == i.terms[0]:
            continue
        title = "Budget per GPU" + (f" (PP stage {stage})" if len(i.terms) > 1 else "")
        doc.tables.append(
            Table(title, ["term", "bytes", "", "source"],
                  [[t.name, t.bytes, format_bytes(t.bytes, units), t.source] for t in terms],
                  align=["l", "r", "r", "l"])
        )
    doc.tables.append(
        Table(
            "KV cache groups",
            ["group", "layers", "block size", "page bytes", "blocks per request"],
            [[g.kind, len(g.layers), g.block_size, g.spec.page_size_bytes, g.blocks_per_request(L, i.in_flight_tokens)]
             for g in r.groups],
        )
    )
    doc.facts = [
        ("grouping", r.rule),
        ("bytes per block", f"{r.bytes_per_block} B ({format_bytes(r.bytes_per_block, units)}) per GPU"),
        ("blocks", f"{r.num_blocks} per GPU (min over {len(r.workers)} PP stage(s); includes vLLM's null block)"
         + (f", forced by --num-gpu-blocks-override {i.num_gpu_blocks_override}" if i.num_gpu_blocks_override else "")),
        ("pool tokens", f"{r.pool_tokens:,} = {r.num_blocks} blocks x {r.block_size} tokens"),
        ("per request at max_model_len", f"{r.blocks_per_request} blocks for {L:,} tokens "
         f"(in flight: {i.max_concurrent_batches} x {i.max_num_batched_tokens} tokens; {i.max_num_batched_tokens_source})"),
        ("max concurrency", f"{r.max_concurrency:.2f}x per replica, {r.max_concurrency * r.plan.dp:.2f}x for {r.plan.dp} replica(s)"),
        ("vLLM would log", r.log_line()),
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
    return doc
