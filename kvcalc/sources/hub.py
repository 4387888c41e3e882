"""Hugging Face Hub repos: config.json through huggingface_hub (its cache, token, offline
mode, endpoint), and the checkpoint's exact parameter count and bytes from its safetensors
headers, without downloading any weights.

huggingface_hub is imported inside the functions only: a preset or a local file never
loads it. Every failure becomes a one-line ``ConfigError`` (exit 2) that says what to do.

Network calls, in order:
1. ``HEAD {endpoint}/{repo}/resolve/{revision}/config.json`` with no retries (huggingface_hub's
   own download retries a dead network for minutes when nothing is cached); it names the
   commit and maps repo / gate / revision errors;
2. a GET of config.json (or of a Mistral-format ``params.json``) bounded in size and time while
   it downloads (``kvcalc.sources.hubfetch``), stored in the standard Hub cache so
   ``HF_HUB_OFFLINE=1`` serves it later;
3. the safetensors index the same way, then ``HfApi.get_safetensors_metadata`` at that commit
   (range requests for the headers; every header value checked). Its summary is kept in
   kvcalc's cache keyed by the commit, which never changes, so an offline run shows the same
   exact figures.
The revision is checked (a branch, tag or commit name) before any of them.
With ``HF_HUB_OFFLINE=1`` only the caches are read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from kvcalc.core.record import record
from kvcalc.errors import ConfigError
from kvcalc.sources.hubdata import (  # noqa: F401 - re-exported: the pure helpers live in hubdata
    MAX_CHECKPOINT_BYTES,
    SAFETENSORS_DTYPE_BITS,
    checkpoint_facts,
    config_from_mistral_params,
)

CONFIG_NAME = "config.json"
MISTRAL_CONFIG_NAME = "params.json"
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")

# --------------------------------------------------------------------------- entry point


@record
class HubModel:
    """What the Hub gives for a repo: its config (Hugging Face names) and checkpoint facts."""

    repo_id: str
    label: str
    config: dict
    config_file: str
    checkpoint: dict | None
    notes: tuple[str, ...]
    source: str
    record: dict


def fetch_hub(repo_id: str, *, revision: str | None) -> HubModel:
    """config.json (or params.json, mapped) and checkpoint facts of a Hub model repo."""
    hub = _Hub(repo_id, revision)
    cfg, config_file = hub.config()
    checkpoint, ck_note = hub.checkpoint(mistral=config_file == MISTRAL_CONFIG_NAME)
    notes = list(hub.notes)
    if ck_note:
        notes.append(ck_note)
    if config_file == MISTRAL_CONFIG_NAME:
        cfg = config_from_mistral_params(cfg, checkpoint, where=f"{MISTRAL_CONFIG_NAME} of {hub.label}")
        notes.append("Mistral-format repo: params.json mapped to Hugging Face names as vLLM's mistral config parser does")
    source = f"Hub {hub.label} (commit {hub.commit[:12]}), {config_file}" + hub.served_from
    record = {"hub_id": repo_id, "revision": hub.revision, "commit": hub.commit, "config_file": config_file,
              "from_cache": bool(hub.served_from)}
    return HubModel(repo_id, hub.label, cfg, config_file, checkpoint, tuple(notes), source, record)


def model_type(cfg: Any) -> str:
    if not isinstance(cfg, dict):
        return ""
    from kvcalc.sources.config import text_config

    text, _ = text_config(cfg)
    return str(text.get("model_type") or cfg.get("model_type") or "")


# --------------------------------------------------------------------------- the Hub session


# huggingface_hub reads these when imported and fails on a value that is not a number
_NUMERIC_ENV = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")


def _check_environment() -> None:
    for name in _NUMERIC_ENV:
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            ok = 0 < float(value) < 1e6
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"environment variable {name}={value[:40]!r} must be a number of seconds, like 10")


class _Hub:
    def __init__(self, repo_id: str, revision: str | None) -> None:
        from kvcalc.sources.hubdata import check_revision

        revision = check_revision(revision)  # before any Hub call: it becomes a path in the cache
        _check_environment()
        try:
            _quiet_huggingface_hub()
            from huggingface_hub import constants
        except (ValueError, TypeError) as exc:  # an HF_* variable it cannot read
            raise ConfigError(f"huggingface_hub cannot start: {_one_line(exc)}; check the HF_* environment variables") from None

        self.repo_id = repo_id
        self.revision = revision or constants.DEFAULT_REVISION
        self.label = f"{repo_id}@{self.revision}"
        self.endpoint = constants.ENDPOINT
        self.offline = constants.is_offline_mode()
        self.cache_dir = constants.HF_HUB_CACHE
        self.commit = ""
        self.served_from = ""
        self.notes: list[str] = []

    # ---- config

    def config(self) -> tuple[Any, str]:
        """(parsed JSON, file name): config.json, or params.json for a Mistral-format repo."""
        from kvcalc.sources.files import read_json_file

        name = CONFIG_NAME
        if self.offline:
            path = self._cached(CONFIG_NAME) or self._cached(MISTRAL_CONFIG_NAME)
            if path is None:
                raise ConfigError(
                    f"HF_HUB_OFFLINE=1 and {CONFIG_NAME} of {self.label} is not in the Hub cache ({self.cache_dir}); "
                    "run once online to cache it, or use a preset (kvcalc presets) or a local config.json"
                )
            name = path.name
            self.served_from = " from the Hub cache (HF_HUB_OFFLINE=1)"
        else:
            path = self._fetch(CONFIG_NAME)
            if path is None:
                path = self._fetch(MISTRAL_CONFIG_NAME)
                name = MISTRAL_CONFIG_NAME
                if path is None:
                    raise ConfigError(
                        f"Hub repo {self.label} has no {CONFIG_NAME} (nor a Mistral-format {MISTRAL_CONFIG_NAME}); "
                        "kvcalc needs the model's config: is it a model repo?"
                    )
        self.commit = path.parent.name
        try:
            cfg = read_json_file(path, name)
        except ConfigError as exc:
            raise ConfigError(f"{name} of Hub repo {self.label}: {exc.message}") from None
        if not isinstance(cfg, dict):
            raise ConfigError(f"{name} of Hub repo {self.label} must hold a JSON object, got {type(cfg).__name__}")
        return cfg, name

    def _cached(self, filename: str) -> Path | None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        try:
            return Path(hf_hub_download(self.repo_id, filename, revision=self.revision, local_files_only=True))
        except (EntryNotFoundError, OSError, ValueError):
            return None

    def _fetch(self, filename: str) -> Path | None:
        """The file's cache path, after a HEAD without retries; None when the repo lacks it."""
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import (
            EntryNotFoundError,
            FileMetadataError,
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        try:
            url = hf_hub_url(self.repo_id, filename, revision=self.revision)
            meta = get_hf_file_metadata(url, timeout=constants.HF_HUB_ETAG_TIMEOUT)
            return self._download(url, meta, filename)
        except HFValidationError as exc:
            raise ConfigError(f"{self.repo_id!r} is not a valid Hub repo id: {_one_line(exc)}") from None
        except RevisionNotFoundError:
            raise ConfigError(
                f"revision {self.revision!r} of Hub repo {self.repo_id!r} was not found at {self.endpoint}; "
                "give a branch, tag or commit hash that exists (--revision)"
            ) from None
        except EntryNotFoundError:
            return None
        except GatedRepoError as exc:
            cached = self._fallback(filename, "the repo is gated for this token")
            if cached is not None:
                return cached
            raise ConfigError(self._gated_message(exc)) from None
        except RepositoryNotFoundError:
            cached = self._fallback(filename, "the Hub did not find the repo")
            if cached is not None:
                return cached
            raise ConfigError(
                f"Hub repo {self.repo_id!r} was not found at {self.endpoint} (a private repo needs a token: "
                "`hf auth login` or HF_TOKEN); a local config.json can be given by its path"
            ) from None
        except (*_transport_errors(), OfflineModeIsEnabled) as exc:  # type: ignore[misc]  # classes found at run time
            cached = self._fallback(filename, "the Hub could not be reached")
            if cached is not None:
                return cached
            if isinstance(exc, _transport_errors(timeouts=True)):
                why = f"no answer within {constants.HF_HUB_ETAG_TIMEOUT} s (HF_HUB_ETAG_TIMEOUT)"
            else:
                why = f"{type(exc).__name__}: {_one_line(exc)}"
            raise ConfigError(
                f"cannot reach the Hugging Face Hub at {self.endpoint} ({why}); with a cached copy set "
                "HF_HUB_OFFLINE=1, or use a preset (kvcalc presets) or a local config.json"
            ) from None
        except FileMetadataError:
            raise ConfigError(
                f"{self.endpoint} does not answer like the Hugging Face Hub (no X-Repo-Commit header for "
                f"{self.repo_id}/{filename}); check HF_ENDPOINT and any proxy"
            ) from None
        except HfHubHTTPError as exc:
            cached = self._fallback(filename, "the Hub answered with an error")
            if cached is not None:
                return cached
            status = exc.response.status_code if exc.response is not None else "?"
            raise ConfigError(
                f"the Hub at {self.endpoint} answered HTTP {status} for {self.label} {filename}: "
                f"{_server_message(exc)}; retry later, or set HF_HUB_OFFLINE=1 to use a cached copy"
            ) from None
        except OSError as exc:
            raise ConfigError(f"{filename} of Hub repo {self.label} could not be stored: {_one_line(exc)}") from None
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            # an answer huggingface_hub cannot use: a '../' commit id, a malformed header
            raise ConfigError(
                f"the Hub at {self.endpoint} answered {self.label} {filename} with something kvcalc cannot use "
                f"({type(exc).__name__}: {_one_line(exc)[:120]}); check HF_ENDPOINT and any proxy"
            ) from None

    def _download(self, url: str, meta: Any, filename: str) -> Path:
        """config.json into the Hub cache, bounded in size and time while it downloads
        (``kvcalc.sources.hubfetch``); the cached copy when the commit's file is there."""
        from urllib.parse import urlsplit

        from huggingface_hub import constants
        from huggingface_hub.utils import build_hf_headers

        from kvcalc.sources import hubfetch

        what = f"{filename} of Hub repo {self.label}"
        commit, etag = hubfetch.checked_ids(meta.commit_hash, meta.etag, what)
        if isinstance(meta.size, int) and meta.size > hubfetch.MAX_FILE_BYTES:
            raise ConfigError(f"{what} is {meta.size} bytes; that is not a config (limit {hubfetch.MAX_FILE_BYTES} bytes)")
        hit = hubfetch.cached_pointer(self.cache_dir, self.repo_id, commit, filename)
        if hit is not None:
            return hit
        headers = build_hf_headers(library_name="kvcalc", library_version=_version())
        target = meta.location or url
        if urlsplit(target).netloc != urlsplit(url).netloc:  # a CDN: the token stays with the Hub
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        data = hubfetch.download(target, headers, read_timeout=float(constants.HF_HUB_DOWNLOAD_TIMEOUT), label=what)
        return hubfetch.store(self.cache_dir, self.repo_id, self.revision, commit, etag, filename, data)

    def _fallback(self, filename: str, why: str) -> Path | None:
        cached = self._cached(filename)
        if cached is not None:
            self.served_from = f" from the Hub cache ({why})"
        return cached

    def _gated_message(self, exc: Exception) -> str:
        from huggingface_hub import get_token

        page = f"{self.endpoint}/{self.repo_id}"
        if get_token() is None:
            return (
                f"Hub repo {self.repo_id!r} is gated and no Hugging Face token is set: accept its terms on {page}, "
                "then log in with `hf auth login` (or set HF_TOKEN)"
            )
        return (
            f"Hub repo {self.repo_id!r} is gated and your token has no access to it ({_server_message(exc)}); "
            f"request access on {page}"
        )

    # ---- checkpoint

    def checkpoint(self, *, mistral: bool = False) -> tuple[dict | None, str]:
        """(exact checkpoint facts or None, note). Read from kvcalc's cache first (keyed by commit)."""
        label = f"{self.label} (commit {self.commit[:12]})" if self.commit else self.label
        estimated = "the weights are estimated from the config"
        cache = _checkpoint_cache_path(self.repo_id, self.commit)
        if cache is not None and cache.is_file():
            try:
                stored = json.loads(cache.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                stored = None
            if isinstance(stored, dict) and isinstance(stored.get("bytes"), int):
                return stored, ""
            if isinstance(stored, dict) and stored.get("unavailable"):
                return None, f"{stored['unavailable']}: {estimated}"
        if self.offline:
            return None, f"no safetensors metadata of {label} cached and HF_HUB_OFFLINE=1: {estimated}"
        if not _COMMIT_RE.match(self.commit):
            return None, f"no commit hash for {label}: {estimated}"
        try:
            facts = self._read_metadata(label, mistral=mistral)
        except _Unavailable as exc:
            if exc.final:
                _store(cache, {"unavailable": str(exc)})
            return None, f"{exc}: {estimated}"
        _store(cache, facts)
        return facts, ""

    def _read_metadata(self, label: str, *, mistral: bool) -> dict:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, NotASafetensorsRepoError, SafetensorsParsingError

        api = HfApi(library_name="kvcalc", library_version=_version())
        self._prefetch_index(label)
        try:
            try:
                meta = api.get_safetensors_metadata(self.repo_id, revision=self.commit)
                files = meta.files_metadata
            except NotASafetensorsRepoError:
                if not mistral or not api.file_exists(self.repo_id, "consolidated.safetensors", revision=self.commit):
                    raise
                one = api.parse_safetensors_file_metadata(self.repo_id, "consolidated.safetensors", revision=self.commit)
                files = {"consolidated.safetensors": one}
        except NotASafetensorsRepoError:
            raise _Unavailable(f"{label} has no safetensors weights", final=True) from None
        except SafetensorsParsingError as exc:
            raise _Unavailable(f"the safetensors headers of {label} could not be parsed ({_one_line(exc)})", final=True) from None
        except (*_transport_errors(), HfHubHTTPError, OSError) as exc:  # type: ignore[misc]  # classes found at run time
            raise _Unavailable(f"the safetensors metadata of {label} could not be read ({type(exc).__name__})") from None
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
            # huggingface_hub trusts the headers' shapes: lists, strings, deep nesting break it
            raise _Unavailable(f"the safetensors headers of {label} are malformed ({type(exc).__name__})", final=True) from None
        try:
            return checkpoint_facts(files, f"safetensors metadata of {label}")
        except ValueError as exc:
            raise _Unavailable(f"the safetensors headers of {label} are malformed ({_one_line(exc)})", final=True) from None


    def _prefetch_index(self, label: str) -> None:
        """The safetensors index, downloaded bounded (``_download``) before huggingface_hub asks
        for it: at a commit it then reads the cached copy instead of an unbounded download."""
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

        name = "model.safetensors.index.json"
        try:
            url = hf_hub_url(self.repo_id, name, revision=self.commit)
            meta = get_hf_file_metadata(url, timeout=constants.HF_HUB_ETAG_TIMEOUT)
            self._download(url, meta, name)
        except EntryNotFoundError:
            return
        except ConfigError as exc:
            raise _Unavailable(f"the safetensors index of {label} was not read ({exc.message})", final=False) from None
        except (*_transport_errors(), HfHubHTTPError, OSError, ValueError) as exc:  # type: ignore[misc]  # classes found at run time
            raise _Unavailable(f"the safetensors index of {label} could not be read ({type(exc).__name__})") from None


class _Unavailable(Exception):
    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final  # a property of the commit (cache it), not of the network


# --------------------------------------------------------------------------- pure helpers


def _checkpoint_cache_path(repo_id: str, commit: str) -> Path | None:
    if not _COMMIT_RE.match(commit or ""):
        return None
    home = os.environ.get("KVCALC_HOME")
    if home:
        base = Path(home) / "cache"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvcalc"
    return base / "hub" / f"{repo_id.replace('/', '--')}--{commit}.json"


def _store(path: Path | None, data: dict) -> None:
    """Best effort: a read-only home only costs the next offline run its exact figures."""
    if path is None:
        return
    try:
        from kvcalc.sources.files import atomic_write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    except Exception:  # noqa: BLE001 - a cache write never fails the run
        pass


def _transport_errors(*, timeouts: bool = False) -> tuple[type[BaseException], ...]:
    """The HTTP client's connection/timeout errors: huggingface_hub 2.x uses httpx2, 1.x httpx,
    0.x requests (its timeouts are also OSErrors)."""
    import importlib

    found: list[type[BaseException]] = [TimeoutError]
    for module, timeout, transport in (
        ("httpx2", "TimeoutException", "TransportError"),
        ("httpx", "TimeoutException", "TransportError"),
        ("requests", "Timeout", "ConnectionError"),
    ):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        found.append(getattr(mod, timeout))
        if not timeouts:
            found.append(getattr(mod, transport))
            # redirect loops, invalid URLs: every request error of the client
            for extra in ("TooManyRedirects", "RequestError", "InvalidURL"):  # not HTTPError: HfHubHTTPError is one
                if isinstance(getattr(mod, extra, None), type):
                    found.append(getattr(mod, extra))
    return tuple(found)


def _quiet_huggingface_hub() -> None:
    """No progress bars or retry warnings on kvcalc's output (HF_HUB_VERBOSITY still wins)."""
    from huggingface_hub.utils import disable_progress_bars, logging

    disable_progress_bars()
    if not os.environ.get("HF_HUB_VERBOSITY"):
        logging.set_verbosity_error()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _server_message(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    message = response.headers.get("X-Error-Message") if response is not None else None
    return " ".join(str(message).split())[:300] if message else _one_line(exc).split(". ")[0]


def _version() -> str:
    from kvcalc import __version__

    return __version__
