"""`kvcalc presets`: list the bundled and user presets, show one."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Bundled model presets (real config.json files with their source).", no_args_is_help=False)
    sub.callback(invoke_without_command=True)(list_presets)
    sub.command("show")(show)
    sub.command("import")(import_preset)
    app.add_typer(sub, name="presets")


def list_presets(ctx: typer.Context, format: o.Format = "table") -> None:
    """List every preset: name, Hub id, attention family, layers, bytes per token."""
    if ctx.invoked_subcommand is not None:
        return
    from kvcalc.core.footprint import CacheSettings, layer_spec, resolve_kv_dtype
    from kvcalc.core.units import format_bytes
    from kvcalc.errors import KvcalcError
    from kvcalc.render import Document, Table, render
    from kvcalc.sources.config import spec_from_config
    from kvcalc.sources.presets import all_presets

    fmt = o.check_format(format)
    rows: list[dict[str, Any]] = []
    per_token = []  # one human figure per row; the JSON keeps bytes_per_token
    skipped: list[str] = []
    for name, p in sorted(all_presets().items()):
        try:
            record = p.load()
            spec = spec_from_config(record["config"], name=name, source=record.get("source", ""))
        except KvcalcError as exc:
            if not p.user:
                raise
            skipped.append(f"user preset {name} cannot be used: {exc.message}")  # one bad file hides no other
            continue
        cache = CacheSettings(kv_dtype=resolve_kv_dtype("auto", spec))
        bpt = sum(layer_spec(x, 1, cache).decoder_bytes_per_token for x in spec.layers)
        per_token.append(format_bytes(bpt))
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
            ["name", "Hub id", "type", "attention", "layers", "KV heads", "head_dim", "dtype", "per token"],
            [[r["name"] + (" (user)" if r["user"] else ""), r["hub_id"], r["model_type"], r["attention"],
              r["num_layers"], r["num_kv_heads"], r["head_dim"], r["dtype"], shown]
             for r, shown in zip(rows, per_token)],
            align=["l", "l", "l", "l", "r", "r", "r", "l", "r"],
        )
    )
    doc.notes = skipped
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


def import_preset(
    repo_id: str,
    name: Annotated[Optional[str], typer.Option("--name", help="Preset name (default: the repo name, lower-cased)")] = None,
    revision: o.Revision = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a user preset of the same name")] = False,
    format: o.Format = "table",
) -> None:
    """Save a Hub model's config (and its safetensors checkpoint facts) as a user preset."""
    import datetime

    from kvcalc.errors import ConfigError
    from kvcalc.render import Document, render
    from kvcalc.sources import presets
    from kvcalc.sources.resolve import HUB_ID_RE

    fmt = o.check_format(format)
    text = repo_id.strip()
    if not HUB_ID_RE.match(text):
        raise ConfigError(f"REPO_ID {repo_id!r} is not a Hub repo id like org/name")
    key = (name or text.split("/", 1)[1]).strip().lower()
    bundled = presets.find(key, include_user=False)  # a name, an alias or a Hub id of a bundled preset
    if bundled is not None:
        raise ConfigError(
            f"preset name {key!r} is a bundled preset's name or alias ({bundled.name}) and would never be used; "
            "pick another with --name"
        )
    existing = presets.find(key)
    if existing is not None and existing.user and existing.name == key and not force:
        raise ConfigError(f"user preset {key!r} exists ({existing.path}); pass --force to replace it")

    from kvcalc.sources.resolve import resolve_hub

    with o.status(f"reading {text} (Hugging Face Hub)"):
        resolved = resolve_hub(text, revision=revision)
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    commit = resolved.record.get("commit", "")
    how = "read from the Hub cache" if resolved.record.get("from_cache") else "downloaded"
    record = {
        "name": key,
        "hub_id": text,
        "aliases": [],
        "source": f"Hub {text}@{resolved.record.get('revision')} (commit {commit}), "
        f"{resolved.record.get('config_file')}, {how} {day}",
        "config": resolved.config,
    }
    if resolved.checkpoint is not None:
        record["checkpoint"] = resolved.checkpoint
    path = presets.save_user_preset(key, record, force=force)
    payload = {"name": key, "path": str(path), "hub_id": text, "source": record["source"],
               "checkpoint": resolved.checkpoint, "notes": list(resolved.spec.notes)}
    doc = Document(f"saved user preset {key}")
    doc.facts = [("file", str(path)), ("source", str(record["source"]))]
    if resolved.checkpoint is not None:
        ck = resolved.checkpoint
        doc.facts.append(("checkpoint", f"{ck['parameters']} parameters, {ck['bytes']} B ({ck['source']})"))
    doc.notes = list(resolved.spec.notes) + [f"use it offline: kvcalc size {key}"]
    o.emit(render(fmt, payload, doc))
