"""Issue 17, files and streams: writers never clobber what is not theirs, every read is bounded,
signals and full disks are one line (values: tests/test_hostile.py; Hub: tests/test_hostile_hub.py)."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.sources import files

FAILING_GATE = "- name: q\n  model: qwen3-0.6b\n  tokens: 1000\n  max_kv_bytes_per_rank: 1KiB\n"
PASSING_GATE = "- name: q\n  model: qwen3-0.6b\n  tokens: 1\n  max_kv_bytes_per_rank: 1GiB\n"


def _one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.startswith("kvcalc: error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def kvcalc(*args: str, env: dict | None = None, stdin=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True, text=True, stdin=stdin,
                          env={**os.environ, **(env or {})}, timeout=timeout)


# ----------------------------------------------------------------------------- writers


def test_writer_replaces_regular_files_only(tmp_path):
    target = tmp_path / "out.xml"
    files.atomic_write_text(target, "one")
    files.atomic_write_text(target, "two")
    assert target.read_text() == "two"
    with pytest.raises(KvcalcError, match="pass --force"):
        files.atomic_write_text(target, "three", force=False)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "link.xml"
    link.symlink_to(victim)
    with pytest.raises(KvcalcError, match="symbolic link"):
        files.atomic_write_text(link, "x")
    assert victim.read_text() == "keep" and link.is_symlink()
    with pytest.raises(KvcalcError, match="folder"):
        files.atomic_write_text(tmp_path, "x")
    with pytest.raises(KvcalcError, match="does not exist"):
        files.atomic_write_text(tmp_path / "no" / "x.xml", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.xml", "out.xml", "victim.txt"]  # no .tmp


def test_writer_writes_through_a_fifo_and_a_device(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KvcalcError, match="FIFO nobody reads"):  # no reader: an error, not a hang
        files.atomic_write_text(fifo, "x")
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.2)
    files.atomic_write_text(fifo, "through the pipe")
    reader.join(5)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if os.geteuid() == 0:  # a /dev/null of our own: it must stay a character device
        null = tmp_path / "null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        files.atomic_write_text(null, "gone")
        assert stat.S_ISCHR(os.lstat(null).st_mode)
    with pytest.raises(KvcalcError, match="No space left"):
        files.atomic_write_text(Path("/dev/full"), "x")
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)  # a link to a FIFO (as /dev/stdout to a pipe) is followed and written through
    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.2)
    files.atomic_write_text(link, "via the link")
    reader.join(5)
    assert got[-1] == b"via the link" and link.is_symlink()


def test_gate_never_overwrites_its_own_file_nor_an_existing_output(run, tmp_path):
    gate = tmp_path / "cap.yaml"
    gate.write_text(PASSING_GATE)
    code, _, err = run("gate", str(gate), "--junit", str(gate))
    assert code == 2 and "the file kvcalc reads" in err and gate.read_text() == PASSING_GATE
    existing = tmp_path / "junit.xml"
    existing.write_text("old")
    for flag in ("--junit", "--markdown"):
        code, _, err = run("gate", str(gate), flag, str(existing))
        assert code == 2 and "--force" in err and existing.read_text() == "old"
    code, _, err = run("gate", str(gate), "--junit", str(existing), "--force")
    assert code == 0 and existing.read_text().startswith("<?xml")
    link = tmp_path / "link.md"
    link.symlink_to(gate)
    code, _, err = run("gate", str(gate), "--markdown", str(link), "--force")
    assert code == 2 and gate.read_text() == PASSING_GATE


def test_report_refuses_links_and_writes_the_markdown_last(run, tmp_path, monkeypatch):
    out = tmp_path / "r.md"
    out.symlink_to(tmp_path / "elsewhere.md")
    code, _, err = run("report", "qwen3-0.6b", "-o", str(out), "--force")
    assert code == 2 and "symbolic link" in err
    out.unlink()
    real = files._write_temp

    def failing(path, text):  # the .md cannot be written: no chart may appear either
        if path.suffix == ".md":
            raise KvcalcError(f"cannot write {str(path)!r}: No space left on device")
        return real(path, text)

    monkeypatch.setattr(files, "_write_temp", failing)
    code, _, err = run("report", "qwen3-0.6b", "-o", str(out))
    assert code == 2 and "No space left" in err
    assert list(tmp_path.iterdir()) == []  # no SVG, no .tmp


def test_full_disk_and_read_only_folder_are_one_line(run, tmp_path, monkeypatch):
    code, _, err = run("report", "qwen3-0.6b", "-o", "/dev/full", "-f", "markdown", "--no-charts")
    assert code == 2 and "No space left" in _one_line(err)
    import tempfile

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    code, _, err = run("report", "qwen3-0.6b", "-o", str(tmp_path / "r.html"))
    assert code == 2 and "Read-only file system" in _one_line(err)
    gate = tmp_path / "cap.yaml"
    gate.write_text(FAILING_GATE)
    code, out, err = run("gate", str(gate), "--junit", str(tmp_path / "j.xml"))
    assert code == 1 and "kvcalc: warning:" in err and "Read-only" in err  # the verdict stands


def test_stdout_full_is_one_line():
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "kvcalc", "size", "qwen3-0.6b"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2 and "No space left" in _one_line(r.stderr)


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    script = f"""
import os, signal, sys, time
from pathlib import Path
import kvcalc.cli as cli
from kvcalc.sources import files
cli.install_signal_handlers()
cli._RUNNING = True
real = os.fsync
def slow(fd):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(2)
    real(fd)
os.fsync = slow
try:
    files.atomic_write_text(Path({str(tmp_path / 'out.json')!r}), "x" * 1000)
except cli.Signalled as exc:
    sys.exit(exc.exit_code)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 143, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("when", ["start-up", "running"])
@pytest.mark.parametrize("signum", [2, 15])
def test_signals_are_one_line_never_a_traceback(when, signum):
    # start-up: kvcalc.cli imported (its handlers set), the command not yet running; running:
    # inside the evaluation. (An interrupt inside the interpreter's own start-up, before any
    # kvcalc code, is Python's.)
    script = f"""
import os, sys
sys.argv[0] = "kvcalc"  # as the kvcalc command starts
import kvcalc.cli as cli
import kvcalc.app.service as service
if {when!r} == "start-up":
    os.kill(os.getpid(), {signum})
real = service.evaluate
def evaluate(*a, **kw):
    os.kill(os.getpid(), {signum})
    return real(*a, **kw)
service.evaluate = evaluate
cli.main(["size", "qwen3-0.6b"])
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 128 + signum, (r.returncode, r.stderr)
    assert r.stderr.strip() == "kvcalc: error: interrupted", r.stderr
    assert r.stdout == ""


# ----------------------------------------------------------------------------- bounded reads


def test_gate_from_stdin_is_bounded_and_decoded():
    with open("/dev/zero", "rb") as zero:
        t0 = time.perf_counter()
        r = kvcalc("gate", "-", stdin=zero)
    assert r.returncode == 2 and "more than" in _one_line(r.stderr) and time.perf_counter() - t0 < 20
    r = subprocess.run([sys.executable, "-m", "kvcalc", "gate", "-"], input=b"- name: \xff\n", capture_output=True,
                       timeout=60)
    assert r.returncode == 2 and b"not UTF-8" in r.stderr and b"Traceback" not in r.stderr


@pytest.mark.parametrize(
    "text,needle",
    [
        # memory but no figure to compare it with: the log names no length to size a request
        ("Available KV cache memory: 2.89 GiB\nGPU KV cache size: , tokens\n", "no max_model_len"),
        ("Available KV cache memory: 2.89 GiB\nGPU KV cache size: " + "9" * 5000 + " tokens\n", "no max_model_len"),
        ("Available KV cache memory: " + "9" * 5000 + " GiB\n# GPU blocks: 12\n", "no 'Available KV cache memory"),
    ],
)
def test_crafted_vllm_logs_are_one_line(run, tmp_path, text, needle):
    log = tmp_path / "vllm.log"
    log.write_text(text)
    code, _, err = run("probe", "qwen3-0.6b", "--from-vllm-log", str(log))
    assert code == 2 and needle in _one_line(err)


def test_vllm_log_reads_are_bounded(run, tmp_path, monkeypatch):
    big = tmp_path / "big.log"
    with open(big, "wb") as fh:
        fh.truncate(300 << 20)  # 300 MB, sparse
    t0 = time.perf_counter()
    code, _, err = run("probe", "qwen3-0.6b", "--from-vllm-log", str(big))
    assert code == 2 and "too large" in _one_line(err)
    code, _, err = run("probe", "qwen3-0.6b", "--from-vllm-log", "/dev/zero")
    assert code == 2 and "too large" in _one_line(err)
    monkeypatch.setattr(files, "PIPE_IDLE_S", 0.5)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    code, _, err = run("probe", "qwen3-0.6b", "--from-vllm-log", str(fifo))
    assert code == 2 and "sent nothing" in _one_line(err)
    assert time.perf_counter() - t0 < 20


def test_user_presets_are_read_lazily_and_bounded(tmp_path):
    presets = tmp_path / "home" / "presets"
    presets.mkdir(parents=True)
    (presets / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(presets / "fifo.json")
    with open(presets / "huge.json", "wb") as fh:
        fh.truncate(200 << 20)
    env = {"KVCALC_HOME": str(tmp_path / "home")}
    t0 = time.perf_counter()
    r = kvcalc("size", "no-such-model", env=env, timeout=30)
    assert r.returncode == 2 and "not a preset" in _one_line(r.stderr)
    r = kvcalc("size", "org/not-there", "--format", "json", env={**env, "HF_HUB_OFFLINE": "1"}, timeout=30)
    assert r.returncode == 2
    r = kvcalc("size", "huge", env=env, timeout=30)
    assert r.returncode == 2 and "too large" in _one_line(r.stderr)
    r = kvcalc("presets", env=env, timeout=30)
    assert r.returncode == 0 and "user preset huge cannot be used" in r.stdout, r.stderr  # the bundled ones listed
    assert time.perf_counter() - t0 < 30


def test_user_preset_import_rules(tmp_path, monkeypatch):
    from kvcalc.errors import ConfigError
    from kvcalc.sources.presets import find, save_user_preset

    monkeypatch.setenv("KVCALC_HOME", str(tmp_path))
    record = find("qwen3-0.6b").load()
    for shadowed in ("jamba", "jamba-v0.1", "qwen3-0.6b"):  # an alias, a name: `kvcalc size` would give the bundled
        with pytest.raises(ConfigError, match="bundled preset"):
            save_user_preset(shadowed, record)
    with pytest.raises(ConfigError, match="more than kvcalc reads back"):
        save_user_preset("big", {**record, "pad": "x" * (17 << 20)})
    with pytest.raises(ConfigError, match="'num_hidden_layers'"):
        save_user_preset("broken", {"config": {"model_type": "llama"}})
    results: list[str] = []

    def one() -> None:
        try:
            save_user_preset("mine", record)
            results.append("ok")
        except ConfigError as exc:
            results.append(str(exc))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1 and all("--force" in r for r in results if r != "ok")
    assert sorted(p.name for p in (tmp_path / "presets").iterdir()) == ["mine.json"]
    assert find("mine").user


# ----------------------------------------------------------------------------- hostile names and paths


def test_surrogates_and_undecodable_paths(tmp_path):
    from kvcalc.sources.presets import find

    cfg = dict(find("qwen3-0.6b").load()["config"], _name_or_path="x\ud800y")
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/\xff\xfe"))
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    for fmt in ("table", "json", "markdown"):
        r = subprocess.run([sys.executable, "-m", "kvcalc", "size", os.fsencode(folder), "-f", fmt], capture_output=True,
                           env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"}, timeout=60)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    bad_type = dict(cfg, model_type="llama\udcff")
    (tmp_path / "c.json").write_text(json.dumps(bad_type))
    r = kvcalc("size", str(tmp_path / "c.json"))
    assert r.returncode in (0, 2) and "internal error" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("model", ["a" * 300, "a/" + "b" * 300, "~unknownuser-kvcalc/config.json"])
def test_odd_model_arguments(run, model):
    code, _, err = run("size", model)
    assert code == 2 and _one_line(err)


def test_bad_hub_environment(run, monkeypatch):
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "abc")
    code, _, err = run("size", "org/model")
    assert code == 2 and "HF_HUB_ETAG_TIMEOUT" in _one_line(err)


@pytest.mark.parametrize("revision", ["../../../../victim.txt", "main/../../x", "..", ".hidden", "a b", "x.lock", ""])
def test_revisions_are_checked_before_any_hub_call(run, tmp_path, monkeypatch, revision):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a call would be another error
    code, _, err = run("size", "org/model", "--revision", revision)
    assert code == 2 and "not a branch, tag or commit" in _one_line(err)
    gate = tmp_path / "cap.yaml"
    gate.write_text(f"- name: a\n  model: org/model\n  revision: {json.dumps(revision)}\n  max_kv_bytes_per_rank: 1GiB\n")
    code, _, err = run("gate", str(gate))
    assert code == 2 and "revision" in err
    assert not (tmp_path / "hf").exists()


def test_report_never_overwrites_the_config_it_reads(run, tmp_path):
    from kvcalc.sources.presets import find

    cfg = tmp_path / "config.json"
    text = json.dumps(find("qwen3-0.6b").load()["config"])
    cfg.write_text(text)
    code, _, err = run("report", str(cfg), "-o", str(cfg), "--force")
    assert code == 2 and "the file kvcalc reads" in err and cfg.read_text() == text
