"""Reading config files and writing reports safely."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvcalc.errors import ConfigError, KvcalcError

MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_json_file(path: Path, what: str = "config") -> object:
    """Parse a JSON file; every failure is a one-line ConfigError."""
    try:
        if path.is_dir():
            raise ConfigError(f"{what} path {str(path)!r} is a folder without a config.json")
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what} file {str(path)!r} is {size} bytes; a config.json is far smaller (limit 16 MiB)")
        raw = path.read_bytes()
    except ConfigError:
        raise
    except OSError as exc:
        raise ConfigError(f"{what} file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ConfigError(f"{what} file {str(path)!r} is nested too deeply to be a config") from None
    except ValueError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not valid JSON: {exc}") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid JSON number")


def atomic_write_text(path: Path, text: str, *, force: bool = True) -> None:
    """Write through a temporary file in the same folder and rename it into place."""
    path = Path(path)
    if path.exists() and not force:
        raise KvcalcError(f"{str(path)!r} exists; pass --force to replace it")
    if path.is_dir():
        raise KvcalcError(f"{str(path)!r} is a folder; give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise KvcalcError(f"folder {str(folder)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        # mkstemp makes 0600 files; a report keeps the old file's mode, or the umask's default
        try:
            mode = path.stat().st_mode & 0o777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
