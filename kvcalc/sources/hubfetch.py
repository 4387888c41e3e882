"""A bounded download of one small Hub file (config.json, params.json) into the standard
Hugging Face cache.

huggingface_hub's own download bounds a file only after it has finished: an endless body
filled 3.1 GB of cache in 47 s, a 1-byte/s trickle never ended. Here the size and the time are
enforced while the bytes arrive:

- the HEAD's size (``HfFileMetadata.size``) above ``MAX_FILE_BYTES`` is refused before any GET;
- the GET stops at ``MAX_FILE_BYTES`` + 1 bytes, whatever the headers say;
- each read waits at most HF_HUB_DOWNLOAD_TIMEOUT seconds, the whole download at most
  ``DEADLINE_FACTOR`` times that (30 s by default).

The file then lands where ``hf_hub_download`` puts it (``blobs/<etag>``, ``snapshots/<commit>/
<file>`` linking to it, ``refs/<revision>``), so ``HF_HUB_OFFLINE=1`` serves it later. The
commit and the etag become path components: both must be hex (a ``../`` commit is refused).
Only the standard library's HTTP client is used (proxies from the environment, as
huggingface_hub honours them); huggingface_hub gives the headers (token, user agent).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from kvcalc.errors import ConfigError
from kvcalc.sources.files import MAX_CONFIG_BYTES

MAX_FILE_BYTES = MAX_CONFIG_BYTES
DEADLINE_FACTOR = 3  # the whole download: 3 x HF_HUB_DOWNLOAD_TIMEOUT
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ETAG = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")


class Stalled(ConfigError):
    """The download went past its time (a stall or a trickle)."""


def checked_ids(commit: object, etag: object, label: str) -> tuple[str, str]:
    """(commit, etag) when both are what the Hub sends (hex); one-line ConfigError otherwise."""
    if not isinstance(commit, str) or not _HEX40.match(commit):
        raise ConfigError(f"the Hub answered {label} with commit id {str(commit)[:60]!r}, not a 40-hex commit; check HF_ENDPOINT")
    if not isinstance(etag, str) or not _ETAG.match(etag):
        raise ConfigError(f"the Hub answered {label} with etag {str(etag)[:60]!r}, not a hex digest; check HF_ENDPOINT")
    return commit, etag


def download(url: str, headers: dict[str, str], *, read_timeout: float, label: str) -> bytes:
    """The body of ``url``: at most MAX_FILE_BYTES, within DEADLINE_FACTOR x ``read_timeout``."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + DEADLINE_FACTOR * read_timeout
    request = urllib.request.Request(url, headers=dict(headers))
    chunks: list[bytes] = []
    total = 0
    try:
        with urllib.request.urlopen(request, timeout=read_timeout) as response:  # noqa: S310 - the Hub endpoint
            while True:
                if time.monotonic() > deadline:
                    raise Stalled(
                        f"{label} took more than {DEADLINE_FACTOR * read_timeout:g} s to download "
                        f"({total} bytes so far; {DEADLINE_FACTOR} x HF_HUB_DOWNLOAD_TIMEOUT)"
                    )
                chunk = response.read1(min(1 << 16, MAX_FILE_BYTES + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > MAX_FILE_BYTES:
                    raise ConfigError(f"{label} is larger than {MAX_FILE_BYTES} bytes; that is not a config (download stopped)")
    except TimeoutError:
        raise Stalled(f"{label}: no bytes for {read_timeout:g} s (HF_HUB_DOWNLOAD_TIMEOUT)") from None
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"{label}: the Hub answered HTTP {exc.code} to the download ({exc.reason})") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"{label}: the download failed ({' '.join(str(reason).split())[:160]})") from None
    return b"".join(chunks)


def store(cache_dir: str, repo_id: str, revision: str, commit: str, etag: str, filename: str, data: bytes) -> Path:
    """Put ``data`` where hf_hub_download would: returns the snapshot path."""
    from huggingface_hub.file_download import repo_folder_name

    from kvcalc.sources.files import atomic_write_text

    storage = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")
    blob = storage / "blobs" / etag
    pointer = storage / "snapshots" / commit / filename
    try:
        blob.parent.mkdir(parents=True, exist_ok=True)
        pointer.parent.mkdir(parents=True, exist_ok=True)
        if not blob.is_file():
            atomic_write_text(blob, data.decode("utf-8", errors="surrogateescape"), force=True)
        if not pointer.exists():
            try:
                os.symlink(os.path.relpath(blob, pointer.parent), pointer)
            except OSError:  # no symlinks here (as huggingface_hub, a copy then)
                atomic_write_text(pointer, data.decode("utf-8", errors="surrogateescape"), force=True)
        if revision != commit:
            ref = storage / "refs" / revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(ref, commit, force=True)
    except OSError as exc:
        raise ConfigError(f"{filename} of {repo_id} could not be stored in the Hub cache: {exc.strerror or exc}") from None
    return pointer


def cached_pointer(cache_dir: str, repo_id: str, commit: str, filename: str) -> Path | None:
    from huggingface_hub.file_download import repo_folder_name

    pointer = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / commit / filename
    return pointer if pointer.is_file() else None
