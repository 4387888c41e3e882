"""Bundled presets (``presets/`` in the repository, ``kvcalc/presets`` in the wheel) and
user presets (``$KVCALC_HOME/presets`` or ``~/.config/kvcalc/presets``).

A preset name is only ever looked up in the index, never joined onto a path, so a
name like ``../../etc/passwd`` cannot read outside the preset folders.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from kvcalc.core.record import record
from kvcalc.errors import ConfigError

_HERE = Path(__file__).resolve().parent.parent  # .../kvcalc
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def bundled_dir() -> Path:
    for candidate in (_HERE / "presets", _HERE.parent / "presets"):
        if (candidate / "index.json").is_file():
            return candidate
    raise ConfigError("the bundled presets are missing from this installation (presets/index.json)")


def user_dir() -> Path:
    home = os.environ.get("KVCALC_HOME")
    if home:
        return Path(home) / "presets"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kvcalc" / "presets"


@record
class Preset:
    name: str
    hub_id: str
    aliases: tuple[str, ...]
    path: Path
    user: bool = False

    def load(self) -> dict:
        from kvcalc.sources.files import read_json_file  # bounded, one-line errors

        record = read_json_file(self.path, what=f"preset {self.name!r}")
        if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
            raise ConfigError(f"preset {self.name!r} has no 'config' object")
        return record


def _bundled() -> dict[str, Preset]:
    d = bundled_dir()
    index = json.loads((d / "index.json").read_text(encoding="utf-8"))
    return {
        name: Preset(name, entry.get("hub_id", ""), tuple(entry.get("aliases", ())), d / f"{name}.json")
        for name, entry in index.items()
    }


def _user() -> dict[str, Preset]:
    d = user_dir()
    out: dict[str, Preset] = {}
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.json")):
        name = path.stem.lower()
        if not _NAME_RE.match(name):
            continue
        hub_id = ""
        try:
            hub_id = str(json.loads(path.read_text(encoding="utf-8")).get("hub_id") or "")
        except (OSError, ValueError, AttributeError):
            pass
        out[name] = Preset(name, hub_id, (), path, user=True)
    return out


def all_presets(*, include_user: bool = True) -> dict[str, Preset]:
    presets = _bundled()
    if include_user:
        presets.update(_user())
    return presets


def find(name: str, *, include_user: bool = True) -> Preset | None:
    """A preset by name, alias or Hub id (case-insensitive), or None."""
    key = name.strip().lower()
    presets = _bundled()
    hit = _match(presets, key)
    if hit is None and include_user:
        hit = _match(_user(), key)
    return hit


def _match(presets: dict[str, Preset], key: str) -> Preset | None:
    if key in presets:
        return presets[key]
    for p in presets.values():
        if key in p.aliases or (p.hub_id and key == p.hub_id.lower()):
            return p
    return None


def save_user_preset(name: str, record: dict) -> Path:
    """Write a user preset atomically; returns its path."""
    key = name.strip().lower()
    if not _NAME_RE.match(key):
        raise ConfigError(f"preset name {name!r} is not valid: use letters, digits, '.', '_' and '-'")
    d = user_dir()
    d.mkdir(parents=True, exist_ok=True)
    from kvcalc.sources.files import atomic_write_text

    path = d / f"{key}.json"
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return path
