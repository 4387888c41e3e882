"""Reading config files and writing reports safely."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from kvcalc.errors import ConfigError, KvcalcError

MAX_CONFIG_BYTES = 16 * 1024 * 1024
PIPE_IDLE_S = 30.0  # the longest wait for the next bytes of a pipe or a device


def read_json_file(path: Path, what: str = "config") -> object:
    """Parse a JSON file; every failure is a one-line ConfigError."""
    raw = read_limited(Path(path), MAX_CONFIG_BYTES, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ConfigError(f"{what} file {str(path)!r} is nested too deeply to be a config") from None
    except ValueError as exc:
        raise ConfigError(f"{what} file {str(path)!r} is not valid JSON: {' '.join(str(exc).split())}") from None


def read_limited(path: Path, limit: int, what: str, *, idle_s: float | None = None) -> bytes:
    """The bytes of a file, at most ``limit`` of them, or a one-line ConfigError.

    A regular file is sized before it is read. A pipe (``kvcalc size <(curl ...)``) or a
    character device is read in chunks up to the limit, waiting at most ``idle_s`` (default
    ``PIPE_IDLE_S``) for each chunk: ``/dev/zero`` stops at the limit and a pipe nobody
    writes to stops after the wait, instead of reading or blocking forever. Sockets and
    block devices are refused.
    """
    name = str(path)
    try:
        st = path.stat()  # follows symlinks; a dangling link or a loop is an OSError
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{what} path {name!r} is a folder without a config.json")
        if stat.S_ISREG(st.st_mode):
            if st.st_size > limit:
                raise ConfigError(f"{what} file {name!r} is {st.st_size} bytes; that is too large (limit {limit} bytes)")
            with open(path, "rb") as fh:
                raw = fh.read(limit + 1)
        elif stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            raw = _read_stream(path, limit, what, PIPE_IDLE_S if idle_s is None else idle_s)
        else:
            raise ConfigError(f"{what} path {name!r} is not a regular file, a pipe or a character device")
    except ConfigError:
        raise
    except OSError as exc:
        raise ConfigError(f"{what} file {name!r} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise ConfigError(f"{what} file {name!r} holds more than {limit} bytes; that is too large")
    return raw


def _read_stream(path: Path, limit: int, what: str, idle_s: float) -> bytes:
    import select
    import time

    # O_NONBLOCK: opening a FIFO nobody has opened for writing returns at once instead of blocking
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        total = 0
        deadline = time.monotonic() + idle_s
        while total <= limit:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise ConfigError(f"{what} file {str(path)!r} sent nothing for {idle_s:g} s; gave up waiting")
            try:
                chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            deadline = time.monotonic() + idle_s
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    import tempfile  # only writers pay for it (it imports random and shutil)

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
