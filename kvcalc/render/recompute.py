"""`kvcalc recompute` as JSON and as a document."""

from __future__ import annotations

from typing import Any

from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table

NOT_SPEED = (
    "these are counts of positions and of dense attention scores, not wall-clock speed-ups: decode's narrow GEMMs, "
    "the weight reads of every layer, the HBM traffic of the cached K/V, scheduling, IPC, collectives and kernel "
    "launches all remain"
)
SCORES_ESTIMATE = (
    "attention scores are the teaching estimate of scale (full P x P squares, per head and per layer): causal "
    "kernels need not form the full square; not profiler FLOPs"
)


def _terms(p: int, g: int, square: bool) -> str:
    """'4+5+6+7+8' for short runs, else the closed form's operands."""
    if g <= 6:
        return "+".join(f"{p + i}^2" if square else str(p + i) for i in range(g))
    if square:
        return f"{p}^2+...+{p + g - 1}^2"
    return f"{g}x{p} + {g}x{g - 1}/2"


def recompute_payload(c: Any, result: Any = None) -> dict[str, Any]:
    layers = result.footprint.model.num_layers if result is not None else None
    out: dict[str, Any] = {
        "prompt": c.prompt,
        "gen": c.gen,
        "continuation": c.continuation,
        "positions": {
            "without_cache": c.positions_no_cache,
            "with_cache": c.positions_cache,
            "saved": c.positions_saved,
            "ratio": c.positions_ratio,
        },
        "attention_scores": {
            "without_cache": c.scores_no_cache,
            "with_cache": c.scores_cache,
            "saved": c.scores_saved,
            "ratio": c.scores_ratio,
            "counted": "dense scores per query head per attention layer (teaching estimate)",
        },
        "layer_work_avoided": {
            "per_layer": c.positions_saved,
            "layers": layers,
            "total": c.positions_saved * layers if layers is not None else None,
            "counted": "position passes through one decoder layer's norms, Q/K/V and output projections and MLP",
        },
        "kv": None,
        "notes": [*(result.notes if result is not None else ()), NOT_SPEED, SCORES_ESTIMATE],
    }
    if result is not None:
        fp = result.footprint
        out["kv"] = {
            "model": fp.model.name,
            "kv_dtype": fp.cache.kv_dtype.name,
            "block_size": fp.cache.block_size,
            "tp": fp.plan.tp,
            "pp": fp.plan.pp,
            "positions": fp.tokens,
            "bytes_per_token": fp.bytes_per_token,
            "bytes_per_token_per_rank": fp.bytes_per_token_per_rank,
            "effective_bytes": fp.logical.effective_bytes,
            "block_rounded_bytes": fp.logical.block_rounded_bytes,
            "effective_bytes_per_rank": fp.effective_bytes_per_rank,
            "block_rounded_bytes_per_rank": fp.block_rounded_bytes_per_rank,
        }
    return out


def recompute_document(c: Any, result: Any = None, units: str = "iec") -> Any:

    p, g = c.prompt, c.gen
    doc = Document(f"What the KV cache saves: prompt P = {p}, G = {g} generated tokens")
    doc.facts.append(("without cache", f"every step re-runs the whole prefix: P, P+1, ..., P+G-1 = {p}..{p + g - 1}"))
    if c.continuation:
        doc.facts.append(("with cache", f"each position once, y_G fed back for the follow-up turn: P + G = {p + g}"))
    else:
        doc.facts.append(("with cache", f"each position once, y_G never fed back: P + G - 1 = {p + g - 1}"))
    plus = f" + {p + g}" if c.continuation else ""
    cache_pos = f"{p} + {g}" if c.continuation else f"{p} + {g} - 1"
    reads = "+".join(str(p + i) for i in range(1, g)) if g <= 6 else f"{p + 1}+...+{p + g - 1}"
    cache_scores = f"{p}^2" + (f" + ({reads})" if g > 1 else "") + plus
    t = Table(
        "Counts",
        ["measure", "without cache", "with cache", "saved", "ratio", "how"],
        [
            ["positions processed", c.positions_no_cache, c.positions_cache, c.positions_saved,
             f"{c.positions_ratio:.2f}x",
             f"{_terms(p, g, False)} = {c.positions_no_cache}; {cache_pos} = {c.positions_cache}"],
            ["dense attention scores", c.scores_no_cache, c.scores_cache, c.scores_saved, f"{c.scores_ratio:.2f}x",
             f"{_terms(p, g, True)} = {c.scores_no_cache}; {cache_scores} = {c.scores_cache}"],
        ],
        align=["l", "r", "r", "r", "r", "l"],
    )
    if result is not None:
        n = result.footprint.model.num_layers
        t.rows.append(
            ["layer passes (positions x layers)", c.positions_no_cache * n, c.positions_cache * n,
             c.positions_saved * n, f"{c.positions_ratio:.2f}x", f"x {n} decoder layers of {result.footprint.model.name}"]
        )
    doc.tables.append(t)
    doc.facts.append(
        ("work avoided per layer",
         f"{c.positions_saved} position passes through the norms, Q/K/V and output projections and MLP"
         + ("" if result is not None else " (give a MODEL for its layer count and the KV bytes)"))
    )
    if result is not None:
        fp = result.footprint

        def b(n: int) -> str:
            return f"{n} B ({format_bytes(n, units)})" if n >= 1024 else f"{n} B"

        doc.facts.append(
            ("KV that buys it",
             f"{fp.tokens} positions x {b(fp.bytes_per_token)} per token ({fp.model.name}, {fp.cache.kv_dtype.name}) "
             f"= {b(fp.logical.effective_bytes)} effective, {b(fp.logical.block_rounded_bytes)} in blocks of "
             f"{fp.cache.block_size}")
        )
        if fp.plan.ranks_per_replica > 1:
            doc.facts.append(
                ("per rank",
                 f"TP {fp.plan.tp} x PP {fp.plan.pp}: {b(fp.bytes_per_token_per_rank)} per token, "
                 f"{b(fp.block_rounded_bytes_per_rank)} block-rounded on the largest rank")
            )
        if fp.logical.effective_bytes != fp.tokens * fp.bytes_per_token:
            doc.facts.append(
                ("held", "sliding-window or chunked layers hold fewer positions than the request's length")
            )
    notes = [NOT_SPEED, SCORES_ESTIMATE]
    if g == 1 and not c.continuation:
        notes.insert(0, "G = 1: one prefill and no later step to reuse anything: the cache saves no positions")
    if c.continuation:
        notes.insert(
            0,
            "--continuation: y_G is fed back once more so its K/V is kept for the follow-up turn (P + G positions "
            "cached); the uncached path keeps nothing and is unchanged",
        )
    doc.notes = [*(result.notes if result is not None else ()), *notes]  # the model's warnings first
    return doc
