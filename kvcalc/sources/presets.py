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


MAX_USER_PRESETS = 1000  # user preset files looked at; more are ignored (a folder is not a database)
_HEAD_BYTES = 4096  # a user preset's hub_id is written near its start (save_user_preset)
_HUB_ID_RE = rb'"hub_id"\s*:\s*"([A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})"'  # compiled when used


def _regular(path: Path) -> os.stat_result | None:
    """The file's stat when it is a regular file (a symlink to one is taken); else None: a FIFO,
    a device (/dev/zero), a folder or a dangling link is never opened."""
    import stat as st

    try:
        info = path.stat()
    except OSError:
        return None
    return info if st.S_ISREG(info.st_mode) else None


def _user_files() -> list[Path]:
    d = user_dir()
    try:
        names = sorted(os.listdir(d))[: MAX_USER_PRESETS * 4]
    except OSError:
        return []
    out = [d / n for n in names if n.endswith(".json") and _NAME_RE.match(n[:-5].lower())]
    return out[:MAX_USER_PRESETS]


def _user_preset(path: Path, *, with_hub_id: bool) -> Preset | None:
    if _regular(path) is None:
        return None
    hub_id = ""
    if with_hub_id:  # the first 4 KiB only: a 200 MB file costs 4 KiB
        try:
            with open(path, "rb") as fh:
                m = re.search(_HUB_ID_RE, fh.read(_HEAD_BYTES))
            hub_id = m.group(1).decode() if m else ""
        except OSError:
            pass
    return Preset(path.stem.lower(), hub_id, (), path, user=True)


def _user() -> dict[str, Preset]:
    """Every user preset (for listing): regular files only, at most MAX_USER_PRESETS."""
    out: dict[str, Preset] = {}
    for path in _user_files():
        p = _user_preset(path, with_hub_id=True)
        if p is not None:
            out.setdefault(p.name, p)
    return out


def _find_user(key: str) -> Preset | None:
    """A user preset by name (one file, opened only if regular), else by Hub id (the first
    4 KiB of each regular file)."""
    if _NAME_RE.match(key):
        hit = _user_preset(user_dir() / f"{key}.json", with_hub_id=False)
        if hit is not None:
            return hit
    if "/" not in key:
        return None
    for path in _user_files():
        p = _user_preset(path, with_hub_id=True)
        if p is not None and p.hub_id.lower() == key:
            return p
    return None


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
        hit = _find_user(key)
    return hit


def _match(presets: dict[str, Preset], key: str) -> Preset | None:
    if key in presets:
        return presets[key]
    for p in presets.values():
        if key in p.aliases or (p.hub_id and key == p.hub_id.lower()):
            return p
    return None


def save_user_preset(name: str, record: dict, *, force: bool = False) -> Path:
    """Write a user preset atomically; returns its path.

    Refused: a name that a bundled preset's name, alias or Hub id would shadow (``kvcalc size
    NAME`` would give the bundled model), a record kvcalc could not read back (over the config
    size limit, or not a valid config), and without ``force`` an existing preset, even one
    written by a concurrent import (no check-then-write race: the file is linked into place)."""
    from kvcalc.sources.config import spec_from_config
    from kvcalc.sources.files import MAX_CONFIG_BYTES

    key = name.strip().lower()
    if not _NAME_RE.match(key):
        raise ConfigError(f"preset name {name!r} is not valid: use letters, digits, '.', '_' and '-'")
    bundled = find(key, include_user=False)
    if bundled is not None:
        raise ConfigError(
            f"preset name {key!r} is taken by the bundled preset {bundled.name!r} (its name, an alias or Hub id) "
            "and would never be used; pick another with --name"
        )
    text = json.dumps(record, indent=1) + "\n"
    if len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"preset {key!r} would be {len(text.encode('utf-8'))} bytes, more than kvcalc reads back "
            f"({MAX_CONFIG_BYTES} bytes); it was not saved"
        )
    spec_from_config(json.loads(text).get("config"), name=key, source="check")  # what a later lookup will do
    d = user_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the user preset folder {str(d)!r}: {exc.strerror or exc}") from None
    path = d / f"{key}.json"
    if force:
        from kvcalc.sources.files import atomic_write_text

        atomic_write_text(path, text, force=True)
        return path
    _create_exclusive(path, text)
    return path


def _create_exclusive(path: Path, text: str) -> None:
    """Write through a temporary file, then hard-link it to ``path``: the link fails when the
    file exists, so of two concurrent imports exactly one succeeds."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.link(tmp, path)
    except FileExistsError:
        raise ConfigError(f"user preset {path.stem!r} exists ({path}); pass --force to replace it") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
