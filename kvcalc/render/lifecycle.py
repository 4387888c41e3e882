"""`kvcalc lifecycle`: the JSON contract and the document people read."""

from __future__ import annotations

from typing import Any

from kvcalc.app.lifecycle import Lifecycles
from kvcalc.core.lifecycle import OffloadReport, SharedGroup, SharingReport, SpecReport
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table
from kvcalc.words import plural


def _group(g: SharedGroup) -> dict[str, Any]:
    return {
        "kind": g.kind,
        "layers": g.layers,
        "page_bytes": g.page_bytes,
        "shared_blocks": g.shared_blocks,
        "own_blocks": list(g.own_blocks),
        "blocks": g.blocks,
        "unshared_blocks": g.unshared_blocks,
        "refcounts": [{"refcount": c, "blocks": n} for c, n in g.refcounts],
        "bytes": g.bytes,
        "unshared_bytes": g.unshared_bytes,
    }


def sharing_payload(r: SharingReport, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        **extra,
        "copies": r.copies,
        "stages": [{"pp_rank": i, "groups": [_group(g) for g in st]} for i, st in enumerate(r.stages)],
        "bytes_per_rank": r.bytes_per_rank,
        "unshared_bytes_per_rank": r.unshared_bytes_per_rank,
        "saved_bytes_per_rank": r.saved_bytes_per_rank,
        "bytes_per_replica": r.bytes_per_replica,
        "unshared_bytes_per_replica": r.unshared_bytes_per_replica,
    }


def spec_payload(r: SpecReport) -> dict[str, Any]:
    return {
        "spec_tokens": r.spec_tokens,
        "lookahead": r.lookahead,
        "requests": r.requests,
        "extra_slots_per_request": r.extra_slots_per_request,
        "stages": [
            {
                "pp_rank": i,
                "groups": [
                    {
                        "kind": g.kind,
                        "layers": g.layers,
                        "page_bytes": g.page_bytes,
                        "decode_blocks": g.decode_blocks,
                        "verify_blocks": g.verify_blocks,
                        "extra_blocks": g.extra_blocks,
                        "worst_extra_blocks_per_request": g.worst_extra_blocks,
                        "extra_bytes": g.extra_bytes,
                    }
                    for g in st
                ],
            }
            for i, st in enumerate(r.stages)
        ],
        "decode_bytes_per_rank": r.per_rank("decode_bytes"),
        "verify_bytes_per_rank": r.per_rank("verify_bytes"),
        "extra_bytes_per_rank": r.per_rank("extra_bytes"),
        "worst_extra_bytes_per_request_per_rank": r.per_rank("worst_extra_bytes_per_request"),
        "extra_bytes_per_replica": r.per_replica("extra_bytes"),
    }


def offload_payload(r: OffloadReport) -> dict[str, Any]:
    return {
        "cpu_bytes": r.cpu_bytes,
        "ranks": r.ranks,
        "cpu_bytes_per_rank": r.cpu_bytes_per_rank,
        "block_size": r.block_size,
        "bytes_per_token_per_rank": r.bytes_per_token_per_rank,
        "block_bytes_per_rank": r.block_bytes_per_rank,
        "chunk_bytes": r.chunk_bytes,
        "blocks": r.blocks,
        "tokens": r.tokens,
        "gpu_pool_tokens": r.gpu_pool_tokens,
    }


def _refs(g: SharedGroup) -> str:
    if not g.refcounts:
        return "-"
    return ", ".join(f"{n} x ref {c}" for c, n in g.refcounts)


def sharing_table(title: str, r: SharingReport, who: str, units: str) -> Table:
    t = Table(
        title,
        ["PP", "kind", "layers", "page (1 layer)", "shared blocks", "refcounts", f"own blocks per {who}",
         "blocks held", "without sharing", "bytes per rank"],
        align=["r", "l", "r", "r", "r", "l", "r", "r", "r", "r"],
    )
    for i, st in enumerate(r.stages):
        for g in st:
            own = sorted(set(g.own_blocks))
            own_s = str(own[0]) if len(own) == 1 else ", ".join(map(str, g.own_blocks[:8])) + (
                " ..." if len(g.own_blocks) > 8 else "")
            t.rows.append([i, g.kind, g.layers, format_bytes(g.page_bytes, units), g.shared_blocks, _refs(g), own_s,
                           g.blocks, g.unshared_blocks, format_bytes(g.bytes * r.copies, units)])
    return t


def _sharing_facts(r: SharingReport, shared: str, unshared: str, replica_unshared: str, units: str) -> list[tuple[str, str]]:
    """Per-rank and per-replica lines of a block-sharing report (beams, prefix caching)."""
    return [
        ("per rank", f"{format_bytes(r.bytes_per_rank, units)} {shared}; {format_bytes(r.unshared_bytes_per_rank, units)} {unshared} "
                     f"(saves {format_bytes(r.saved_bytes_per_rank, units)})"),
        ("per replica", f"{format_bytes(r.bytes_per_replica, units)} ({replica_unshared} {format_bytes(r.unshared_bytes_per_replica, units)})"),
    ]


def _beams_section(beams: tuple[SharingReport, dict], units: str) -> Document:
    r, info = beams
    sec = Document(f"Beam search: {info['width']} beams, prompt {info['prompt']}, {info['tokens']} positions per beam")
    sec.facts = _sharing_facts(r, "with the prompt's full blocks shared", "if every beam held its own copy",
                               "without sharing", units)
    if r.copies > 1:
        sec.facts.append(("groups", f"{r.copies} independent beam groups (--batch), counted {r.copies} times"))
    sec.tables.append(sharing_table("Blocks per layer, one beam group", r, "beam", units))
    sec.notes = [
        "worst case: beams that diverge right after the prompt; beams that share later tokens share more blocks",
        "vLLM V1 runs each beam step as a request of max_tokens=1 that finds the prompt's full blocks in the "
        "prefix cache (entrypoints/generate/beam_search); a fork with reference counts is the same count",
    ]
    return sec


def _spec_section(spec: SpecReport, units: str) -> Document:
    sec = Document(
        f"Speculative decoding: {spec.spec_tokens} draft tokens"
        + (f" + {spec.lookahead} drafter lookahead slots" if spec.lookahead else "")
        + f", {plural(spec.requests, 'request')}"
    )
    sec.facts = [
        ("extra slots", f"{spec.extra_slots_per_request} positions per request during verification "
                        f"(T + 1 + {spec.extra_slots_per_request} instead of T + 1)"),
        ("per rank", f"{format_bytes(spec.per_rank('verify_bytes'), units)} during verification vs "
                     f"{format_bytes(spec.per_rank('decode_bytes'), units)} for a plain decode step: "
                     f"{format_bytes(spec.per_rank('extra_bytes'), units)} more at these lengths"),
        ("worst case", f"{format_bytes(spec.per_rank('worst_extra_bytes_per_request'), units)} more per request per rank "
                       "(when a request's length ends on a block boundary)"),
        ("per replica", f"{format_bytes(spec.per_replica('extra_bytes'), units)} more"),
    ]
    t = Table("Blocks per layer, all requests",
              ["PP", "kind", "layers", "page (1 layer)", "decode step", "verification", "extra", "worst extra / request"],
              align=["r", "l", "r", "r", "r", "r", "r", "r"])
    for i, st in enumerate(spec.stages):
        for g in st:
            t.rows.append([i, g.kind, g.layers, format_bytes(g.page_bytes, units), g.decode_blocks, g.verify_blocks,
                           g.extra_blocks, g.worst_extra_blocks])
    sec.tables.append(t)
    sec.notes = [
        "rejected drafts roll back num_computed_tokens: their slots are overwritten by the next tokens and the "
        "blocks stay with the request until it ends (vLLM scheduler update_from_output)",
        "EAGLE / draft models write KV for their lookahead positions too: pass --spec-lookahead K for them "
        "(vLLM num_lookahead_tokens); their own draft layers add specs to the same pool and are not counted here",
    ]
    if any(g.kind == "mamba" for st in spec.stages for g in st):
        sec.notes.append(
            "state layers keep K speculative state blocks for the whole request (num_speculative_blocks); "
            "the conv state's K extra rows are not counted"
        )
    return sec


def _prefix_section(prefix: tuple[SharingReport, dict], units: str) -> Document:
    r, info = prefix
    sec = Document(f"Automatic prefix caching: a common prefix of {info['hit']} tokens, {plural(info['requests'], 'request')}")
    sec.facts = _sharing_facts(r, "with the prefix's full blocks stored once", "without prefix caching",
                               "without", units)
    sec.tables.append(sharing_table("Blocks per layer, all requests", r, "request", units))
    sec.notes = [
        "only full blocks are shared: the prefix's partial block is computed and held by every request",
        "a request reuses at most prompt - 1 tokens: vLLM computes the last prompt token for its logits "
        "(max_cache_hit_length = num_tokens - 1), so a prefix that is the whole prompt loses its last block",
        "recurrent state (mamba) and encoder blocks are counted per request",
    ]
    return sec


def _offload_section(off: OffloadReport, units: str) -> Document:
    sec = Document(f"CPU offload tier of {format_bytes(off.cpu_bytes, units)} per replica")
    sec.facts = [
        ("holds", f"{off.tokens} more tokens = {off.blocks} blocks x {off.block_size}"),
        ("arithmetic", f"{off.cpu_bytes} B // round_up({off.block_bytes_per_rank} B per block per rank x "
                       f"{off.ranks} ranks, 4096) = {off.cpu_bytes} // {off.chunk_bytes} = {off.blocks} blocks"),
        ("per rank", f"{format_bytes(off.cpu_bytes_per_rank, units)} of host memory at {format_bytes(off.bytes_per_token_per_rank, units)} per token"),
    ]
    if off.gpu_pool_tokens:
        ratio = off.tokens / off.gpu_pool_tokens
        sec.facts.append(("vs the GPU pool", f"{off.gpu_pool_tokens} tokens on the GPUs; the CPU tier adds "
                                             f"{ratio:.2f}x that"))
    sec.notes = [
        "the size is vLLM's --kv-offloading-size: the total over the ranks of one replica (native offloading)",
        "offloaded blocks are copied back before use: they extend the prefix cache, not the batch the GPUs run",
    ]
    return sec


def lifecycle_payload(lcs: Lifecycles) -> dict[str, Any]:
    result = lcs.result
    fp = result.footprint
    payload: dict[str, Any] = {
        "model": fp.model.name,
        "source": fp.model.source,
        "kv_dtype": fp.cache.kv_dtype.name,
        "block_size": fp.cache.block_size,
        "max_model_len": result.max_model_len,
        "parallel": {"tp": fp.plan.tp, "pp": fp.plan.pp, "dp": fp.plan.dp},
        "traffic": fp.traffic.description,
        "requests": list(fp.traffic.requests),
    }
    if lcs.beams is not None:
        payload["beams"] = sharing_payload(*lcs.beams)
    if lcs.spec is not None:
        payload["spec_decode"] = spec_payload(lcs.spec)
    if lcs.prefix is not None:
        payload["prefix_cache"] = sharing_payload(*lcs.prefix)
    if lcs.offload is not None:
        payload["offload"] = offload_payload(lcs.offload)
    payload["notes"] = list(result.notes)
    return payload


def lifecycle_document(lcs: Lifecycles, units: str = "iec") -> Document:
    fp = lcs.result.footprint
    doc = Document(
        f"Cache lifecycles of {fp.model.name}",
        facts=[
            ("model", f"{fp.model.name} ({fp.model.attention}, {fp.model.num_layers} layers); source: {fp.model.source}"),
            ("plan", f"TP {fp.plan.tp} x PP {fp.plan.pp} x DP {fp.plan.dp}; block size {fp.cache.block_size}; "
                     f"kv dtype {fp.cache.kv_dtype.name}"),
            ("traffic", fp.traffic.description),
        ],
    )
    if lcs.beams is not None:
        doc.sections.append(_beams_section(lcs.beams, units))
    if lcs.spec is not None:
        doc.sections.append(_spec_section(lcs.spec, units))
    if lcs.prefix is not None:
        doc.sections.append(_prefix_section(lcs.prefix, units))
    if lcs.offload is not None:
        doc.sections.append(_offload_section(lcs.offload, units))
    doc.notes = list(lcs.result.notes)
    return doc
