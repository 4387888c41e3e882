"""A small stand-in for the Hugging Face Hub, on 127.0.0.1, for tests without the internet.

It answers what huggingface_hub 2.x asks (read in its ``file_download.py``, ``hf_api.py``
and ``utils/_http.py``):

- ``HEAD|GET /{org}/{name}/resolve/{revision}/{file}``: ``X-Repo-Commit``, ``ETag`` (the git
  blob sha1 of a regular file), ``Content-Length``. Large (LFS) files - here ``*.safetensors``
  - answer ``302`` to a second server on another port (the "CDN", as the real Hub redirects
  to its CDN) with ``X-Linked-Etag`` (sha256) and ``X-Linked-Size``; huggingface_hub does not
  follow a HEAD redirect off the Hub's origin and reads the metadata from the 302 itself.
- the CDN serves blobs with ``Range`` requests (``206`` + ``Content-Range``), which
  ``parse_safetensors_file_metadata`` uses to read the 8-byte header length and the header.
- errors with the headers ``hf_raise_for_status`` reads: ``X-Error-Code: RepoNotFound``
  (401 without a token, 404 with one), ``GatedRepo`` (401 without a token, 403 with a token
  that has no access), ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with X-Repo-Commit).
- a repo with ``stall`` set sleeps that long before answering (timeouts).

Every request is logged in ``FakeHub.log`` as ``(method, path, authorization)``.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

TOKEN = "hf_kvcalc_test_token_with_access"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def safetensors_file(tensors: dict[str, tuple[str, list[int]]], element_bytes: dict[str, int]) -> bytes:
    """A valid safetensors file: 8-byte little-endian header length, JSON header, zeroed data."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = n * element_bytes[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    stall: float = 0.0
    branches: dict[str, str] = field(default_factory=dict)  # extra branch/tag -> commit

    def commit_for(self, revision: str) -> str | None:
        if revision in ("main", self.commit):
            return self.commit
        return self.branches.get(revision)


class FakeHub:
    def __init__(self, repos: dict[str, Repo]) -> None:
        self.repos = repos
        self.log: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        for repo in repos.values():
            for data in repo.files.values():
                self._blobs[hashlib.sha256(data).hexdigest()] = data
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(cdn=False))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(cdn=True))
        for s in (self.hub, self.cdn):
            s.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.hub, self.cdn)]

    def __enter__(self) -> FakeHub:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def _record(self, method: str, path: str, auth: str | None) -> None:
        with self._lock:
            self.log.append((method, path, auth))

    def _handler(self, *, cdn: bool) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(body=True)

            def _send(self, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _error(self, status: int, code: str, message: str, body: bool, extra: dict | None = None) -> None:
                data = json.dumps({"error": message}).encode()
                headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
                headers.update(extra or {})
                self._send(status, headers, data, body)

            def _answer(self, *, body: bool) -> None:
                auth = self.headers.get("Authorization")
                hub._record(self.command, self.path, auth)
                if cdn:
                    return self._cdn(body)
                parts = self.path.split("?")[0].lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "NotFound", "Not Found", body)
                repo_id = f"{parts[0]}/{parts[1]}"
                revision = unquote(parts[3])
                filename = unquote("/".join(parts[4:]))
                repo = hub.repos.get(repo_id)
                if repo is not None and repo.stall:
                    time.sleep(repo.stall)
                if repo is None:
                    return self._error(401 if auth is None else 404, "RepoNotFound", "Repository not found", body)
                if repo.gated and auth != f"Bearer {TOKEN}":
                    if auth is None:
                        msg = (f"Access to model {repo_id} is restricted. You must have access to it and be "
                               "authenticated to access it. Please log in.")
                        return self._error(401, "GatedRepo", msg, body)
                    msg = f"Access to model {repo_id} is restricted and you are not in the authorized list."
                    return self._error(403, "GatedRepo", msg, body)
                commit = repo.commit_for(revision)
                if commit is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
                data = repo.files.get(filename)
                if data is None:
                    return self._error(404, "EntryNotFound", "Entry not found", body, {"X-Repo-Commit": commit})
                if filename.endswith(".safetensors"):  # LFS: redirect to the CDN
                    sha = hashlib.sha256(data).hexdigest()
                    headers = {
                        "X-Repo-Commit": commit,
                        "X-Linked-Etag": f'"{sha}"',
                        "X-Linked-Size": str(len(data)),
                        "ETag": f'"{git_blob_sha1(data)}"',
                        "Location": f"{hub.cdn_url}/lfs/{sha}",
                    }
                    return self._send(302, headers, b"", body)
                headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"', "Accept-Ranges": "bytes"}
                return self._send(200, headers, data, body)

            def _cdn(self, body: bool) -> None:
                sha = self.path.split("?")[0].rsplit("/", 1)[-1]
                data = hub._blobs.get(sha)
                if data is None:
                    return self._send(404, {}, b"no such blob", body)
                rng = self.headers.get("Range")
                if not rng:
                    return self._send(200, {"Accept-Ranges": "bytes"}, data, body)
                first, _, last = rng.split("=", 1)[1].partition("-")
                start = int(first)
                end = min(int(last) if last else len(data) - 1, len(data) - 1)
                if start >= len(data):
                    return self._send(416, {"Content-Range": f"bytes */{len(data)}"}, b"", body)
                headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Accept-Ranges": "bytes"}
                return self._send(206, headers, data[start : end + 1], body)

        return Handler
