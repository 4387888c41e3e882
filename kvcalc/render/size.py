"""`kvcalc size`: the JSON contract and the document people read."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any

from kvcalc.app.service import SizeResult
from kvcalc.core.footprint import CacheSettings, Footprint
from kvcalc.core.memo import Memo
from kvcalc.core.model import ModelSpec
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table, with_units
from kvcalc.render.pool import pool_document, pool_payload
from kvcalc.words import plural


def layer_groups(fp: Footprint) -> list[dict[str, Any]]:
    """Identical layer modules counted together (whole model, TP=1)."""
    return [dict(g) for g in _layer_groups(fp.model, fp.cache)]


@lru_cache(maxsize=256)
def _layer_groups(model: ModelSpec, cache: CacheSettings) -> tuple[dict[str, Any], ...]:
    from kvcalc.core.footprint import layer_spec, spec_key

    counts: Counter = Counter()
    first: dict = {}
    for layer in model.layers:
        key = spec_key(layer, cache)
        counts[key] += 1
        first.setdefault(key, layer)
    out = []
    for key, n in counts.items():
        layer = first[key]
        spec = layer_spec(layer, 1, cache)
        out.append(
            {
                "kind": layer.kind,
                "layers": n,
                "kv_heads": layer.num_kv_heads if layer.kind != "mamba" else 0,
                "head_size": layer.head_size,
                "head_size_v": layer.head_size_v,
                "window": layer.window or None,
                "bytes_per_token_per_layer": spec.bytes_per_token,
                "state_bytes_per_request_per_layer": spec.state_bytes,
                **({"drafter_kv_dtype": cache.draft_kv_dtype.name} if key[-1] and cache.draft_kv_dtype else {}),
            }
        )
    return tuple(out)


_MODELS: Memo[dict[str, Any]] = Memo(256)


def _model_payload(m: ModelSpec, cache: CacheSettings) -> dict[str, Any]:
    """The ``model`` object: one dict per model and cache settings objects (by identity: no deep
    compare of the model's layers), shared by a sweep's rows (read, never changed, by its
    callers; ``to_json`` encodes a shared object once)."""
    return _MODELS.get((id(m), id(cache)), _new_model_payload, m, cache, keep=(m, cache))


def _new_model_payload(m: ModelSpec, cache: CacheSettings) -> dict[str, Any]:
    out = _model_facts(m, cache)
    if m.drafter_method:  # speculative decoding: layer_groups count the drafter's layers too
        out["speculative"] = {"method": m.drafter_method, "num_speculative_tokens": m.speculative_tokens,
                              "draft_layers": m.draft_layers, "draft_model": m.drafter_model or None}
    return out


def _model_facts(m: ModelSpec, cache: CacheSettings) -> dict[str, Any]:
    return {
        "name": m.name,
        "source": m.source,
        "model_type": m.model_type,
        "num_layers": m.num_layers,
        "num_attention_heads": m.num_attention_heads,
        "num_kv_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "attention": m.attention,
        "dtype": m.dtype,
        "max_model_len": m.max_model_len,
        "vllm_supported": m.vllm_supported,
        "layer_groups": [dict(g) for g in _layer_groups(m, cache)],
    }


_RANK_KEYS = ("global_rank", "local_rank", "node", "dp_rank", "pp_rank", "tp_rank", "layers", "kv_heads",
              "kv_heads_replicated", "bytes_per_token", "state_bytes_per_request")
_RANK_DICTS: Memo[list[tuple[int, dict[str, Any]]]] = Memo(256)


def _ranks(fp: Footprint) -> list[dict[str, Any]]:
    """The ``ranks`` list: each rank's fixed figures (one dict per rank layout, shared by a
    sweep's rows and never changed) and its stage's two measures."""
    layout = fp.rank_layout
    fixed = _RANK_DICTS.get(id(layout), _rank_dicts, layout, keep=layout)
    m = fp.stage_measures
    return [{**f, "effective_bytes": m[pp].effective_bytes, "block_rounded_bytes": m[pp].block_rounded_bytes}
            for pp, f in fixed]


def _rank_dicts(layout: tuple[tuple[int, tuple], ...]) -> list[tuple[int, dict[str, Any]]]:
    return [(pp, dict(zip(_RANK_KEYS, (*f[:6], list(f[6]), *f[7:])))) for pp, f in layout]


_PARALLEL: Memo[dict[str, Any]] = Memo(256)  # the ``parallel`` object per plan and stages: shared by a sweep's rows


def _parallel(fp: Footprint) -> dict[str, Any]:
    return {
        "tp": fp.plan.tp,
        "pp": fp.plan.pp,
        "dp": fp.plan.dp,
        "world_size": fp.plan.world_size,
        "pp_layers": [s.layers[1] - s.layers[0] for s in fp.stages],
    }


_REQUESTS: Memo[list[int]] = Memo(256)


def _requests(traffic: Any) -> list[int]:
    """The ``requests`` list: one list per traffic object (read, never changed, by its callers;
    a sweep's rows of one traffic share it and ``to_json`` encodes it once)."""
    return _REQUESTS.get(id(traffic), list, traffic.requests, keep=traffic)


def size_payload(r: SizeResult) -> dict[str, Any]:
    fp = r.footprint
    m = fp.model
    payload: dict[str, Any] = {
        "model": _model_payload(m, fp.cache),
        "vllm_version": r.vllm_version,
        **{"engine": r.engine, "sglang_version": r.sglang_version, "rules": r.rules},
        "kv_dtype": fp.cache.kv_dtype.name,
        "kv_bytes_per_element": fp.cache.kv_dtype.bytes,
        "block_size": fp.cache.block_size,
        "max_model_len": r.max_model_len,
        "parallel": _PARALLEL.get((id(fp.plan), id(fp.stages)), _parallel, fp, keep=(fp.plan, fp.stages)),
        "bytes_per_token": fp.bytes_per_token,
        "state_bytes_per_request": fp.state_bytes_per_request,
        "bytes_per_token_per_rank": fp.bytes_per_token_per_rank,
        "requests": _requests(fp.traffic),
        "traffic": fp.traffic.description,
        "tokens": fp.tokens,
        "allocated_tokens": fp.allocated_tokens,
        "empty_slots": fp.allocated_tokens - fp.tokens,
        "effective_bytes": fp.logical.effective_bytes,
        "block_rounded_bytes": fp.logical.block_rounded_bytes,
        "empty_slot_bytes": fp.logical.empty_slot_bytes,
        "effective_bytes_per_rank": fp.effective_bytes_per_rank,
        "block_rounded_bytes_per_rank": fp.block_rounded_bytes_per_rank,
        "per_replica": {
            "gpus": fp.plan.ranks_per_replica,
            "effective_bytes": fp.replica_total("effective_bytes"),
            "block_rounded_bytes": fp.replica_total("block_rounded_bytes"),
        },
        "deployment": {
            "gpus": fp.plan.world_size,
            "replicas": fp.plan.dp,
            "effective_bytes": fp.deployment_total("effective_bytes"),
            "block_rounded_bytes": fp.deployment_total("block_rounded_bytes"),
        },
        "ranks": _ranks(fp),
        "notes": list(r.notes),
    }
    if r.checkpoint is not None:
        payload["checkpoint"] = r.checkpoint
    if r.pool is not None:
        payload["pool"] = pool_payload(r.pool)
    return payload


def formula(fp: Footprint, units: str = "iec") -> str:
    """The per-token formula with the model's numbers, when every layer is plain dense KV."""
    m = fp.model
    kinds = set(m.kinds)
    e = fp.cache.kv_dtype.bytes
    one_shape = len({(x.num_kv_heads, x.head_size) for x in m.layers}) == 1 and fp.cache.draft_kv_dtype is None
    if kinds <= {"full", "sliding", "chunked"} and one_shape and not fp.cache.kv_dtype.scale_bytes_per_head:
        n = sum(1 for x in m.layers if x.kind in kinds)
        return (
            f"2 x {n} layers x {m.num_kv_heads} KV heads x {m.head_dim} head_dim x {e} B "
            f"= {fp.bytes_per_token} B = {format_bytes(fp.bytes_per_token, units)} per token"
        )
    if kinds == {"mla"} and fp.cache.draft_kv_dtype is None:
        per = fp.cache.kv_dtype.mla_token_bytes or m.head_dim * e
        how = f"{per} B (packed {fp.cache.kv_dtype.name})" if fp.cache.kv_dtype.mla_token_bytes else f"{m.head_dim} x {e} B"
        return (
            f"{len(m.layers)} layers x {how} latent (no x2, one copy on every TP rank) "
            f"= {fp.bytes_per_token} B = {format_bytes(fp.bytes_per_token, units)} per token"
        )
    return f"sum over layer groups (below) = {fp.bytes_per_token} B = {format_bytes(fp.bytes_per_token, units)} per token"



def _drafter(m: ModelSpec) -> str:
    """' + 1 MTP layer (speculative decoding)' when a drafter adds cache layers."""
    if not m.draft_layers:
        return ""
    what = "MTP" if m.drafter_method == "mtp" else "draft"
    return f" + {plural(m.draft_layers, what + ' layer')} (speculative decoding, {m.drafter_method})"


def _kv_dtypes(cache: CacheSettings) -> str:
    own = cache.draft_kv_dtype
    tail = f"; drafter's layers: {own.name} ({own.bytes} B per element)" if own is not None else ""
    return f"{cache.kv_dtype.name} ({cache.kv_dtype.bytes} B per element){tail}"


def size_document(r: SizeResult, units: str = "iec") -> Document:
    fp = r.footprint
    m = fp.model
    p = fp.plan
    doc = Document(f"KV cache of {m.name} — {r.rules} rules")
    doc.facts = [
        ("model", f"{m.model_type}, {m.num_layers} layers{_drafter(m)}, {m.attention}, {m.num_attention_heads} query "
                  f"heads, {m.num_kv_heads} KV heads, head_dim {m.head_dim}, dtype {m.dtype}"),
        ("source", m.source),
    ]
    if r.checkpoint is not None:
        ck = r.checkpoint
        doc.facts.append(("checkpoint", f"{ck['parameters']} parameters, {format_bytes(ck['bytes'], units)} of weights "
                                        f"({ck['source']})"))
    doc.facts += [
        ("kv cache dtype", _kv_dtypes(fp.cache)),
        ("plan", f"TP {p.tp} x PP {p.pp} x DP {p.dp} = {plural(p.world_size, 'GPU')}; block size {fp.cache.block_size} tokens"),
        ("per token", formula(fp, units) + " (whole model, one replica, no TP replication)"),
    ]
    if fp.state_bytes_per_request:
        doc.facts.append(("state per request", f"{format_bytes(fp.state_bytes_per_request, units)} (mamba / linear-attention layers)"))
    doc.facts.append(("traffic", fp.traffic.description))
    groups = layer_groups(fp)
    if len(groups) > 1 or groups[0]["kind"] not in ("full", "mla"):
        doc.tables.append(
            Table(
                "Layer groups (whole model, TP 1)",
                ["kind", "layers", "KV heads", "head size", "window", "per token per layer", "state per request per layer"],
                [
                    [g["kind"] + (f" (drafter, {g['drafter_kv_dtype']})" if "drafter_kv_dtype" in g else ""), g["layers"], g["kv_heads"], g["head_size"], g["window"] or "-",
                     format_bytes(g["bytes_per_token_per_layer"], units), format_bytes(g["state_bytes_per_request_per_layer"], units)]
                    for g in groups
                ],
            )
        )
    slots = fp.allocated_tokens - fp.tokens
    rows: list[list[Any]] = [
        ["tokens", fp.tokens, f"{fp.allocated_tokens} slots ({slots} empty in last blocks)", "", ""],
        ["bytes per token", format_bytes(fp.bytes_per_token, units), format_bytes(fp.bytes_per_token_per_rank, units), "", ""],
        ["effective KV", format_bytes(fp.logical.effective_bytes, units), format_bytes(fp.effective_bytes_per_rank, units),
         format_bytes(fp.replica_total("effective_bytes"), units), format_bytes(fp.deployment_total("effective_bytes"), units)],
        ["block-rounded KV", format_bytes(fp.logical.block_rounded_bytes, units), format_bytes(fp.block_rounded_bytes_per_rank, units),
         format_bytes(fp.replica_total("block_rounded_bytes"), units), format_bytes(fp.deployment_total("block_rounded_bytes"), units)],
        ["empty slots", format_bytes(fp.logical.empty_slot_bytes, units), "", "", ""],
    ]
    doc.tables.append(
        Table(
            "Measures",
            ["measure", "model (1 replica, no replication)", "per rank (largest)",
             f"per replica ({plural(p.ranks_per_replica, 'GPU')})", f"deployment ({plural(p.world_size, 'GPU')})"],
            rows,
        )
    )
    if p.world_size > 1:
        doc.tables.append(ranks_table(fp, units))
    if r.pool is not None:
        doc.sections.append(pool_document(r.pool, units))
    doc.notes = list(r.notes)
    if any(x.replicated for x in fp.ranks) and not m.mla:
        doc.notes.append(
            f"TP {p.tp} > {m.num_kv_heads} KV heads: each rank holds a replicated head, so per-rank bytes do not shrink further"
        )
    return with_units(doc, units)


def ranks_table(fp: Footprint, units: str = "iec", limit: int = 64) -> Table:
    t = Table(
        "Ranks",
        ["global", "local", "DP", "PP", "TP", "layers", "KV heads", "bytes/token", "effective", "block-rounded"],
    )
    for x in fp.ranks[:limit]:
        heads = f"{x.kv_heads} (replicated)" if x.replicated else str(x.kv_heads)
        t.rows.append(
            [x.global_rank, x.local_rank, x.dp_rank, x.pp_rank, x.tp_rank, f"[{x.layers[0]}, {x.layers[1]})", heads,
             format_bytes(x.bytes_per_token, units), format_bytes(x.effective_bytes, units),
             format_bytes(x.block_rounded_bytes, units)]
        )
    if len(fp.ranks) > limit:
        t.rows.append(["...", "", "", "", "", "", "", "", "", f"{len(fp.ranks) - limit} more (see --format json)"])
    return t
