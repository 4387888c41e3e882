"""`kvcalc compare`: attention variants, models side by side, and sweeps over list flags."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.app.settings import SWEEPS, TABLE, Settings
from kvcalc.cli import options as o

Models = Annotated[
    list[str], typer.Argument(help="One or more models: preset names, config.json paths or Hub repo ids")
]
Attention = Annotated[
    Optional[str],
    typer.Option(
        "--attention",
        help="Hypothetical variants changing only N_kv: mha (N_kv = query heads), gqa (the model's own), "
        "gqa:N (N KV heads, a divisor of the query heads), mqa (N_kv = 1); e.g. mha,gqa,mqa",
    ),
]
Sort = Annotated[
    Optional[str],
    typer.Option(
        "--sort",
        help="Order rows best first by: model, bytes_per_token, bytes_per_token_per_rank, effective_bytes, "
        "block_rounded_bytes, pool_tokens, max_concurrency (default: as given)",
    ),
]


def register(app: typer.Typer) -> None:
    o.command(app, "compare", settings=TABLE, sweep=True)(compare)


def compare(
    models: Models,
    settings: Settings = o.FROM_FLAGS,
    sweeps: dict = o.FROM_FLAGS,
    attention: Attention = None,
    sort: Sort = None,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Compare attention variants (MHA/GQA/MQA), several models, or a sweep over list flags, one row each."""
    from kvcalc.app.compare import ModelInput, check_sort, parse_attention, parse_list
    from kvcalc.app.compare import compare as build
    from kvcalc.render import render
    from kvcalc.render.compare import compare_document, compare_payload

    fmt = o.check_format(format)
    u = o.check_units(units)
    lists = {name: parse_list(sweeps[name], flag, kind) for name, (flag, kind) in SWEEPS.items()}
    variants = parse_attention(attention)
    sort_key = check_sort(sort)
    inputs = []
    for name in models:
        resolved = o.resolve(name, revision=revision)
        inputs.append(ModelInput(name, resolved.spec, resolved.checkpoint))
    with o.status("computing the comparison"):
        result = build(inputs, settings, lists, variants, sort_key)
    o.emit(render(fmt, compare_payload(result), None if fmt == "json" else compare_document(result, u)))
