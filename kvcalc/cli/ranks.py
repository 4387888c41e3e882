"""`kvcalc ranks`: every rank of a deployment."""

from __future__ import annotations

import typer

from kvcalc.app.settings import Settings
from kvcalc.cli import options as o

RANKS = ("tp", "pp", "dp", "pp_layers", "gpus_per_node", "kv_dtype", "dtype", "block_size", "tokens")


def register(app: typer.Typer) -> None:
    o.command(app, "ranks", settings=RANKS)(ranks)


def ranks(
    model: o.Model,
    settings: Settings = o.FROM_FLAGS,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Every rank: global, local, DP, PP and TP rank, its layers, its KV heads and bytes per token."""
    from kvcalc.app.service import evaluate
    from kvcalc.render import Document, render
    from kvcalc.render.size import ranks_table, size_payload

    fmt = o.check_format(format)
    u = o.check_units(units)
    if settings.tokens is None:
        settings = settings.with_(tokens=0)
    resolved = o.resolve(model, revision=revision)
    result = evaluate(resolved.spec, settings)
    payload = size_payload(result)
    fp = result.footprint
    out = {k: payload[k] for k in ("model", "kv_dtype", "block_size", "parallel", "bytes_per_token", "bytes_per_token_per_rank", "ranks")}
    doc = Document(
        f"Ranks of {fp.model.name}: TP {fp.plan.tp} x PP {fp.plan.pp} x DP {fp.plan.dp} "
        f"({fp.plan.world_size} GPUs, {fp.plan.gpus_per_node} per node)"
    )
    doc.tables.append(ranks_table(fp, u, limit=10_000))
    doc.notes = [
        "global rank = (dp_rank x PP + pp_rank) x TP + tp_rank (vLLM's DP x PP x TP layout); local rank = global mod GPUs per node",
        "DP replicas hold separate pools: no request's KV is split across replicas",
    ]
    o.emit(render(fmt, out, doc))
