"""Issue 17, hostile Hubs: endless bodies, trickles, delays, redirect loops, a '../' commit id and
malformed safetensors headers get one line and exit 2 (or the estimate), bounded in bytes and
seconds; one such deployment never aborts a gate."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

try:
    from hubserver import FakeHub, Repo
except ImportError:  # tests/ imported as a package
    from tests.hubserver import FakeHub, Repo

from kvcalc.sources.presets import find

pytestmark = pytest.mark.slow  # a local Hub server answering hostile (slow, trickling, endless) responses: seconds per case

CFG = json.dumps(find("qwen3-0.6b").load()["config"]).encode()
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ETAG = hashlib.sha1(CFG).hexdigest()


class _Hostile(BaseHTTPRequestHandler):
    """/org/<behaviour>/resolve/<rev>/config.json"""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, *, body: bool) -> None:
        behaviour = self.path.split("/")[2]
        if behaviour == "endlessindex":  # config.json is fine, the safetensors index never ends
            behaviour = "endless" if self.path.endswith(".index.json") else "good"
        if behaviour == "loop":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        commit = "../../../../escape" if behaviour == "dotdot" else COMMIT
        self.send_response(200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{ETAG}"')
        if behaviour == "bigsize" or not body:
            self.send_header("Content-Length", str(1 << 40 if behaviour == "bigsize" else len(CFG)))
            self.end_headers()
            return
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if behaviour == "endless":
                chunk = b" " * (1 << 16)
                while True:
                    self.wfile.write(chunk)
            elif behaviour == "trickle":
                for byte in CFG:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.3)
            elif behaviour == "delay":
                time.sleep(8)
                self.wfile.write(CFG)
            else:
                self.wfile.write(CFG)
        except OSError:
            pass


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    drop = ("HF_", "HUGGING_FACE", "KVCALC", "XDG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k.lower() not in ("http_proxy", "https_proxy")}
    env.update(HOME=str(tmp_path / "home"), HF_HOME=str(tmp_path / "hf"), KVCALC_HOME=str(tmp_path / "kvcalc"),
               HF_ENDPOINT=endpoint, HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="1", NO_PROXY="127.0.0.1")
    return env


def _cache_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "hf").rglob("*") if p.is_file()) if (tmp_path / "hf").exists() else 0


@pytest.mark.parametrize(
    "behaviour,needle",
    [
        ("endless", "larger than 16777216 bytes"),
        ("trickle", "took more than 3 s"),
        ("delay", "no bytes for 1 s"),
        ("loop", "TooManyRedirects"),
        ("dotdot", "not a 40-hex commit"),
        ("bigsize", "that is not a config"),
    ],
)
def test_hostile_hub_answers_are_bounded(tmp_path, hostile, behaviour, needle):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvcalc", "size", f"org/{behaviour}"], capture_output=True, text=True,
                       env=_env(tmp_path, hostile), timeout=60)
    elapsed = time.monotonic() - t0
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
    assert elapsed < 20  # a trickle stops at 3 x HF_HUB_DOWNLOAD_TIMEOUT, an endless body at 16 MiB
    assert _cache_bytes(tmp_path) < 20 << 20
    assert not (tmp_path / "escape").exists() and not list(tmp_path.parent.glob("escape"))


def test_an_endless_safetensors_index_is_bounded(tmp_path, hostile):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvcalc", "size", "org/endlessindex", "--gpu", "H100-80GB", "-f", "json"],
                       capture_output=True, text=True, env=_env(tmp_path, hostile), timeout=60)
    assert r.returncode == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any("safetensors index" in n and "larger than" in n for n in notes), notes  # the weights are estimated
    assert time.monotonic() - t0 < 20 and _cache_bytes(tmp_path) < 20 << 20


def test_the_good_answer_is_cached_for_offline_use(tmp_path, hostile):
    env = _env(tmp_path, hostile)
    r = subprocess.run([sys.executable, "-m", "kvcalc", "size", "org/good", "-f", "json"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "kvcalc", "size", "org/good", "-f", "json"], capture_output=True,
                       text=True, env=dict(env, HF_HUB_OFFLINE="1"), timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["bytes_per_token"] == 114688, r.stderr


def _safetensors(header: object, *, length: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + b"\0" * 64


MALFORMED = {
    "negative": _safetensors({"w": {"dtype": "BF16", "shape": [-1000000, 1000], "data_offsets": [0, 8]}}),
    "list": _safetensors([1, 2, 3]),
    "string-shape": _safetensors({"w": {"dtype": "BF16", "shape": "22", "data_offsets": [0, 8]}}),
    "short-offsets": _safetensors({"w": {"dtype": "X9", "shape": [2], "data_offsets": [8]}}),
    "overflow": _safetensors({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 8]}}, length=1 << 63),
    "deep": struct.pack("<Q", 4000) + (b"[" * 2000 + b"]" * 2000),
}


def test_malformed_safetensors_fall_back_to_the_estimate_and_never_abort_a_gate(tmp_path):
    repos = {f"bad/{k}": Repo({"config.json": CFG, "model.safetensors": v}) for k, v in MALFORMED.items()}
    for i, index in enumerate((b"[1, 2]", b'{"weight_map": "x"}', b'{"weight_map": {"w": ["a"]}}', b'"s"')):
        repos[f"bad/index{i}"] = Repo({"config.json": CFG, "model.safetensors.index.json": index})
    repos["bad/dotdot"] = Repo({"config.json": CFG}, commit="../../../../escape")
    with FakeHub(repos) as hub:
        env = _env(tmp_path, hub.endpoint)
        for name in [*MALFORMED, "index0", "index1", "index2", "index3"]:
            r = subprocess.run([sys.executable, "-m", "kvcalc", "size", f"bad/{name}", "--gpu", "H100-80GB", "-f", "json"],
                               capture_output=True, text=True, env=env, timeout=60)
            assert r.returncode == 0, (name, r.stderr)
            d = json.loads(r.stdout)
            assert "checkpoint" not in d and any("estimated" in n for n in d["notes"]), name
        gate = tmp_path / "cap.yaml"
        gate.write_text("- name: hostile\n  model: bad/dotdot\n  max_kv_bytes_per_rank: 1GiB\n"
                        "- name: fine\n  model: qwen3-0.6b\n  tokens: 1\n  max_kv_bytes_per_rank: 1GiB\n")
        junit = tmp_path / "j.xml"
        r = subprocess.run([sys.executable, "-m", "kvcalc", "gate", str(gate), "--junit", str(junit)],
                           capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "hostile" in r.stderr and "internal error" not in r.stderr
    assert "fine" in r.stdout and "PASS" in r.stdout and junit.is_file()

