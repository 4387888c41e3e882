"""`kvcalc presets`: list the bundled and user presets, show one."""

from __future__ import annotations

import typer

from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Bundled model presets (real config.json files with their source).", no_args_is_help=False)
    sub.callback(invoke_without_command=True)(list_presets)
    sub.command("show")(show)
    app.add_typer(sub, name="presets")


def list_presets(ctx: typer.Context, format: o.Format = "table") -> None:
    """List every preset: name, Hub id, attention family, layers, bytes per token."""
    if ctx.invoked_subcommand is not None:
        return
    from kvcalc.core.footprint import CacheSettings, layer_spec, resolve_kv_dtype
    from kvcalc.render import Document, Table, render
    from kvcalc.sources.config import spec_from_config
    from kvcalc.sources.presets import all_presets

    fmt = o.check_format(format)
    rows = []
    for name, p in sorted(all_presets().items()):
        record = p.load()
        spec = spec_from_config(record["config"], name=name, source=record.get("source", ""))
        cache = CacheSettings(kv_dtype=resolve_kv_dtype("auto", spec))
        bpt = sum(layer_spec(x, 1, cache).bytes_per_token for x in spec.layers if x.kind != "cross")
        rows.append(
            {
                "name": name,
                "hub_id": p.hub_id,
                "aliases": list(p.aliases),
                "user": p.user,
                "model_type": spec.model_type,
                "attention": spec.attention,
                "num_layers": spec.num_layers,
                "num_kv_heads": spec.num_kv_heads,
                "head_dim": spec.head_dim,
                "dtype": spec.dtype,
                "bytes_per_token": bpt,
                "vllm_supported": spec.vllm_supported,
            }
        )
    doc = Document(f"{len(rows)} presets (bytes per token at the model dtype, whole model)")
    doc.tables.append(
        Table(
            "",
            ["name", "Hub id", "type", "attention", "layers", "KV heads", "head_dim", "dtype", "B/token"],
            [[r["name"] + (" (user)" if r["user"] else ""), r["hub_id"], r["model_type"], r["attention"],
              r["num_layers"], r["num_kv_heads"], r["head_dim"], r["dtype"], r["bytes_per_token"]] for r in rows],
            align=["l", "l", "l", "l", "r", "r", "r", "l", "r"],
        )
    )
    o.emit(render(fmt, rows, doc))


def show(name: str, format: o.Format = "json") -> None:
    """Print a preset's config.json and where it came from."""
    from kvcalc.errors import ConfigError
    from kvcalc.render import Document, render
    from kvcalc.sources.presets import find

    fmt = o.check_format(format)
    p = find(name)
    if p is None:
        raise ConfigError(f"no preset named {name!r}; list them with: kvcalc presets")
    record = p.load()
    import json

    doc = Document(f"preset {p.name}")
    doc.facts = [("Hub id", p.hub_id), ("source", record.get("source", "")), ("file", str(p.path))]
    for r in record.get("restored", []):
        doc.facts.append(("edit", r))
    doc.notes = ["config.json:\n" + json.dumps(record["config"], indent=1)]
    if fmt == "json":
        o.emit(render("json", record, None))
    else:
        o.emit(render(fmt, record, doc))
