"""`kvcalc recompute`: what the KV cache saves in positions and attention scores, and the
KV bytes that buy it (docs/design.md, section 1)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.app.settings import Settings
from kvcalc.cli import options as o

OptModel = Annotated[
    Optional[str],
    typer.Argument(help="Optional model (preset, config.json or Hub id) for layer counts and the KV bytes"),
]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="The model, as the optional argument")]
PromptReq = Annotated[Optional[int], typer.Option("--prompt", "-p", help="Prompt tokens P (required)")]
GenReq = Annotated[Optional[int], typer.Option("--gen", "-g", help="Generated tokens G (required, at least 1)")]

def register(app: typer.Typer) -> None:
    o.command(app, "recompute", settings=("continuation", "tp", "pp", "kv_dtype", "dtype", "block_size"))(recompute)


def recompute(
    model: OptModel = None,
    prompt: PromptReq = None,
    gen: GenReq = None,
    settings: Settings = o.FROM_FLAGS,
    model_opt: ModelOpt = None,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Positions and attention scores with and without a KV cache for prompt P and G generated tokens."""
    from kvcalc.core.recompute import recompute_counts
    from kvcalc.errors import KvcalcError
    from kvcalc.render import render
    from kvcalc.render.recompute import recompute_document, recompute_payload

    fmt = o.check_format(format)
    u = o.check_units(units)
    if prompt is None or gen is None:
        raise KvcalcError("kvcalc recompute needs --prompt P and --gen G, e.g. --prompt 4 --gen 5")
    from kvcalc.app.settings import MAX_TOKENS

    o.bounded(prompt, "--prompt", MAX_TOKENS)
    o.bounded(gen, "--gen", MAX_TOKENS)
    if model is not None and model_opt is not None and model != model_opt:
        raise KvcalcError(f"give the model once: argument {model!r} and --model {model_opt!r} differ")
    name = model or model_opt
    counts = recompute_counts(prompt, gen, continuation=settings.continuation)
    result = None
    if name is not None:
        from kvcalc.app.service import evaluate

        resolved = o.resolve(name, revision=revision)
        result = evaluate(resolved.spec, settings.with_(prompt=prompt, gen=gen), checkpoint=resolved.checkpoint)
    payload = recompute_payload(counts, result)
    o.emit(render(fmt, payload, None if fmt == "json" else recompute_document(counts, result, u)))
