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
    if text.endswith(".json") or text.startswith((".", "/", "~")) or "\\" in text:
        return True
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # a name too long for a path (ENAMETOOLONG), a NUL byte
        return False


def _local_config(text: str) -> Path:
    """The config.json a path names (a folder: its config.json); one-line errors."""
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~unknownuser/config.json
        raise ConfigError(f"cannot expand {text!r}: no such user's home folder") from None
    try:
        if path.is_dir():
            inner = path / "config.json"
            if not inner.is_file():
                raise ConfigError(f"folder {text!r} holds no config.json")
            return inner
        if not path.exists():
            raise ConfigError(f"no file {text!r}, and it is not a preset name (see: kvcalc presets){did_you_mean(text)}")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {text!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return path


def resolve(model: str, *, revision: str | None = None) -> Resolved:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("MODEL is empty; give a preset name (kvcalc presets), a config.json path or a Hub repo id")
    text = model.strip()
    if revision is not None:
        from kvcalc.sources.hubdata import check_revision  # before any Hub call

        revision = check_revision(revision)
    if revision is not None and not HUB_ID_RE.match(text) and not looks_like_path(text):
        hit = presets.find(text)
        if hit is not None:
            ask = f"kvcalc size {hit.hub_id} --revision {revision}" if hit.hub_id else "a Hub repo id (org/name)"
            raise ConfigError(
                f"--revision applies to a Hub repo id, and {text!r} is the bundled preset {hit.name}: drop --revision "
                f"to use the preset, or ask the Hub: {ask}"
            )
    if revision is None:
        hit = presets.find(text)
        if hit is not None:
            record = hit.load()
            where = "user preset" if hit.user else "preset"
            source = f"{where} {hit.name}: {record.get('source', '')}".rstrip(": ")
            spec = spec_from_config(record["config"], name=hit.name, source=source)
            return Resolved(spec, record["config"], "preset", source, record.get("checkpoint"), record)
    if looks_like_path(text):
        path = _local_config(text)
        cfg = read_json_file(path)
        if not isinstance(cfg, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a JSON object")
        source = f"file {path}"
        spec = spec_from_config(cfg, name=local_name(cfg, text, path), source=source)
        from kvcalc.sources.checkpoint import folder_facts  # headers only, never a tensor

        return Resolved(spec, cfg, "file", source, folder_facts(path.parent))
    if HUB_ID_RE.match(text):
        return resolve_hub(text, revision=revision)
    raise ConfigError(
        f"MODEL {text!r} is not a preset (kvcalc presets), an existing config.json path, or a Hub repo id like "
        f"org/name{did_you_mean(text)}"
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


def did_you_mean(text: str) -> str:
    """'; did you mean 'qwen3-0.6b'?' for a preset name, alias or Hub id close to ``text``."""
    import difflib

    names: dict[str, str] = {}
    for p in presets.all_presets().values():
        for word in (p.name, *p.aliases, p.hub_id):
            if word:
                names.setdefault(word.lower(), p.name)
    close = difflib.get_close_matches(text.strip().lower(), list(names), n=3, cutoff=0.75)
    hits = list(dict.fromkeys(names[c] for c in close))
    if not hits:
        return ""
    return "; did you mean " + " or ".join(repr(h) for h in hits) + "?"


def local_name(cfg: dict, text: str, path: Path) -> str:
    """A local config's model name: its ``_name_or_path`` when it names a model, else the file's
    name (``llama-70b.json`` -> llama-70b), else, for a ``config.json``, the folder as given
    (``./path/to/config.json`` -> ``path/to``; an absolute path -> the folder's name)."""
    given = cfg.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        g = given.strip().rstrip("/")
        return Path(g).name if g.startswith(("/", ".", "~")) else g
    if path.name != "config.json":
        return path.stem
    folder = text[: -len("config.json")] if text.endswith("config.json") else text
    folder = folder.rstrip("/\\")
    while folder.startswith(("./", ".\\")):
        folder = folder[2:]
    if not folder or folder in (".", "..") or folder.startswith(("/", "~", "..")):
        return path.resolve().parent.name or path.name
    return folder
