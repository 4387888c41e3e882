"""MODEL argument -> canonical model spec: a bundled or user preset, a local config.json
(or a folder holding one), or a Hugging Face Hub repo id."""

from __future__ import annotations

import re
from pathlib import Path

from kvcalc.core.model import ModelSpec
from kvcalc.core.record import field, record, replace
from kvcalc.errors import ConfigError
from kvcalc.sources import presets
from kvcalc.sources.config import spec_from_config
from kvcalc.sources.files import read_json_file

HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


@record
class Resolved:
    spec: ModelSpec
    config: dict
    kind: str  # preset | file | hub
    source: str
    # exact checkpoint facts when known (Hub safetensors metadata): parameter count and
    # bytes per dtype; None when weights must be estimated from the config
    checkpoint: dict | None = None
    record: dict = field(default_factory=dict)


def looks_like_path(text: str) -> bool:
    return text.endswith(".json") or text.startswith((".", "/", "~")) or "\\" in text or Path(text).exists()


def resolve(model: str, *, revision: str | None = None) -> Resolved:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("MODEL is empty; give a preset name (kvcalc presets), a config.json path or a Hub repo id")
    text = model.strip()
    if revision is None:
        hit = presets.find(text)
        if hit is not None:
            record = hit.load()
            where = "user preset" if hit.user else "preset"
            source = f"{where} {hit.name}: {record.get('source', '')}".rstrip(": ")
            spec = spec_from_config(record["config"], name=hit.name, source=source)
            return Resolved(spec, record["config"], "preset", source, record.get("checkpoint"), record)
    if looks_like_path(text):
        path = Path(text).expanduser()
        if path.is_dir():
            inner = path / "config.json"
            if not inner.is_file():
                raise ConfigError(f"folder {text!r} holds no config.json")
            path = inner
        elif not path.exists():
            raise ConfigError(f"no file {text!r}, and it is not a preset name (see: kvcalc presets)")
        cfg = read_json_file(path)
        if not isinstance(cfg, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a JSON object")
        source = f"file {path}"
        name = cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) else None
        spec = spec_from_config(cfg, name=name or path.parent.name or path.name, source=source)
        from kvcalc.sources.checkpoint import folder_facts  # headers only, never a tensor

        return Resolved(spec, cfg, "file", source, folder_facts(path.parent))
    if HUB_ID_RE.match(text):
        return resolve_hub(text, revision=revision)
    raise ConfigError(
        f"MODEL {text!r} is not a preset (kvcalc presets), an existing config.json path, or a Hub repo id like org/name"
    )


def resolve_hub(repo_id: str, *, revision: str | None) -> Resolved:
    """A Hub model repo as a spec: its config through the same rules as a local file."""
    from kvcalc.sources import hub  # lazy: huggingface_hub only on this path
    from kvcalc.sources.config import REVIEWED_TYPES

    got = hub.fetch_hub(repo_id, revision=revision)
    try:
        spec = spec_from_config(got.config, name=repo_id, source=got.source)
    except ConfigError as exc:
        model_type = hub.model_type(got.config)
        if model_type and model_type not in REVIEWED_TYPES:
            raise ConfigError(
                f"{got.label}: model_type {model_type!r} is not known to kvcalc and its config does not fit the plain "
                f"decoder rules ({exc.message}); kvcalc needs num_hidden_layers, num_attention_heads, "
                "num_key_value_heads and head_dim (or hidden_size) in the config or its text_config"
            ) from None
        raise ConfigError(f"{got.label}: {exc.message}") from None
    spec = replace(spec, notes=tuple(spec.notes) + got.notes)
    return Resolved(spec, got.config, "hub", got.source, got.checkpoint, got.record)
