"""MODEL argument -> canonical model spec: a bundled or user preset, a local config.json
(or a folder holding one), or a Hugging Face Hub repo id."""

from __future__ import annotations

import re
from pathlib import Path

from kvcalc.core.model import ModelSpec
from kvcalc.core.record import field, record
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
            raise ConfigError(f"no file {text!r}, and it is not a preset name (see: kvcalc presets)")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {text!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return path


# a revision is a branch, a tag (git ref names: components of letters, digits, '.', '_', '-',
# never '..', never starting with '.' or ending with '.lock'; refs/pr/N too) or a commit hash.
# Checked before any Hub call: huggingface_hub joins it onto a path in its cache.
_REF_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]{0,99}$")


def check_revision(revision: str | None) -> str | None:
    """``revision`` when it is a branch, tag or commit name; a one-line ConfigError otherwise."""
    if revision is None:
        return None
    text = revision if isinstance(revision, str) else ""
    parts = text.split("/")
    ok = (
        0 < len(text) <= 255
        and all(_REF_PART.match(p) and not p.endswith((".lock", ".")) for p in parts)
        and ".." not in text
    )
    if not ok:
        shown = repr(revision) if len(repr(revision)) <= 80 else repr(revision)[:77] + "..."
        raise ConfigError(
            f"revision {shown} is not a branch, tag or commit name; valid: main, v1.0, refs/pr/3 or a 40-hex commit"
        )
    return text


def resolve(model: str, *, revision: str | None = None) -> Resolved:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError("MODEL is empty; give a preset name (kvcalc presets), a config.json path or a Hub repo id")
    text = model.strip()
    revision = check_revision(revision)
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
        name = cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) else None
        spec = spec_from_config(cfg, name=name or path.parent.name or path.name, source=source)
        return Resolved(spec, cfg, "file", source)
    if HUB_ID_RE.match(text):
        from kvcalc.sources import hub  # lazy: huggingface_hub only on this path

        return hub.resolve_hub(text, revision=revision)
    raise ConfigError(
        f"MODEL {text!r} is not a preset (kvcalc presets), an existing config.json path, or a Hub repo id like org/name"
    )
