"""`kvcalc size`."""

from __future__ import annotations

import typer

from kvcalc.app.settings import TABLE, Settings
from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    o.command(app, "size", settings=TABLE)(size)


def size(
    model: o.Model,
    settings: Settings = o.FROM_FLAGS,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Bytes per token, per request, per rank and per replica; the KV pool when a GPU is given."""
    from kvcalc.app.service import evaluate
    from kvcalc.render import render
    from kvcalc.render.size import size_document, size_payload

    fmt = o.check_format(format)
    u = o.check_units(units)
    resolved = o.resolve(model, revision=revision)
    result = evaluate(resolved.spec, settings, checkpoint=resolved.checkpoint)
    o.emit(render(fmt, size_payload(result), None if fmt == "json" else size_document(result, u)))
