"""Reading config files and writing reports safely."""

from __future__ import annotations

import errno
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


def atomic_write_text(path: Path, text: str, *, force: bool = True, protect: tuple[Path, ...] = ()) -> None:
    """Write ``text`` to ``path`` without ever clobbering what is not the output.

    A missing path or a regular file (replaced only with ``force``) is written through a
    temporary file in the same folder, renamed into place. A character device (``/dev/null``,
    a terminal) or a FIFO is written through, never replaced. A symbolic link is refused (name
    its target), as is a folder, a socket or a block device, and any of ``protect`` (the file
    kvcalc read, e.g. the gate file). Every failure is one line (KvcalcError, exit 2)."""
    atomic_write_many([(Path(path), text)], force=force, protect=protect)


def atomic_write_many(items: list[tuple[Path, str]], *, force: bool = True, protect: tuple[Path, ...] = ()) -> None:
    """Write several files all or nothing, as far as a file system allows: every target is
    checked and every temporary file written before the first rename; the renames follow in
    order, so the last item (a Markdown report after its charts) appears last."""
    plans = [(Path(p), text, _target_kind(Path(p), force=force, protect=protect)) for p, text in items]
    temps: list[tuple[str, Path]] = []
    try:
        for path, text, kind in plans:
            if kind == "stream":
                continue
            temps.append((_write_temp(path, text), path))
        for path, text, kind in plans:
            if kind == "stream":
                _write_stream(path, text)
        for tmp, path in temps:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise _write_error(path, exc) from None
    finally:
        for tmp, _ in temps:  # what was not renamed (an error, SIGTERM, SIGINT) is removed
            try:
                os.unlink(tmp)
            except OSError:
                pass


def check_output(path: Path, *, force: bool, protect: tuple[Path, ...] = ()) -> None:
    """The checks ``atomic_write_text`` makes, before anything is computed (one line, exit 2)."""
    _target_kind(Path(path), force=force, protect=protect)


def _target_kind(path: Path, *, force: bool, protect: tuple[Path, ...]) -> str:
    """'new', 'file' (a regular file to replace) or 'stream' (a device or FIFO written through)."""
    name = str(path)
    for other in protect:
        try:
            if os.path.samefile(path, other):
                raise KvcalcError(f"{name!r} is the file kvcalc reads ({str(other)!r}); give another output file")
        except OSError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise KvcalcError(f"folder {str(folder)!r} does not exist") from None
        return "new"
    except OSError as exc:
        raise _write_error(path, exc) from None
    if stat.S_ISLNK(st.st_mode):
        # followed only to a character device or a FIFO (/dev/stdout, a pipe), written through;
        # a link to a file is refused: renaming over it would replace the link, writing through
        # it would change a file the command line did not name
        try:
            target = os.stat(path)
        except OSError:
            target = None
        if target is not None and (stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode)):
            return "stream"
        raise KvcalcError(f"{name!r} is a symbolic link; kvcalc replaces only regular files: give the file it points to")
    if stat.S_ISDIR(st.st_mode):
        raise KvcalcError(f"{name!r} is a folder; give a file name")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return "stream"
    if not stat.S_ISREG(st.st_mode):
        raise KvcalcError(f"{name!r} is not a regular file, a character device or a FIFO; give a file name")
    if not force:
        raise KvcalcError(f"{name!r} exists; pass --force to replace it")
    return "file"


def _write_error(path: Path, exc: OSError) -> KvcalcError:
    return KvcalcError(f"cannot write {str(path)!r}: {exc.strerror or exc}")


def _write_temp(path: Path, text: str) -> str:
    """A temporary file beside ``path`` holding ``text``, with the mode the output will have."""
    import tempfile  # only writers pay for it (it imports random and shutil)

    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        # mkstemp makes 0600 files; a report keeps the old file's mode, or the umask's default
        try:
            mode = os.lstat(path).st_mode & 0o777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from None
        raise
    return tmp


def _write_stream(path: Path, text: str) -> None:
    """Write through a character device or a FIFO (no reader: an error, not a hang)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise KvcalcError(f"cannot write {str(path)!r}: it is a FIFO nobody reads") from None
        raise _write_error(path, exc) from None
    try:
        os.set_blocking(fd, True)
        data = text.encode("utf-8", errors="surrogateescape")
        while data:
            data = data[os.write(fd, data):]
    except OSError as exc:
        raise _write_error(path, exc) from None
    finally:
        os.close(fd)
