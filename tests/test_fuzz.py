"""Hostile input (issue 9): the config loader, the config file reader, preset lookups and the
gate loader, fuzzed with generated and mutated inputs. A mutated preset of a plain decoder
family must also give the bytes per token of an independent oracle, or be refused when the
mutation made a field it reads invalid (issue 17, tests/kvoracle.py).

The only outcomes allowed: a valid result, or exit 2 with one line `kvcalc: error: ...` on
stderr (the gate: one such line per problem). A traceback, exit 70 (internal error) or a
hang is a bug. The long sweep (every field of every preset x every mutation x four settings)
is scripts/fuzz_configs.py; docs/hardening.md records what ran and for how long.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import signal
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvcalc.app.service import Settings, evaluate
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.render import render
from kvcalc.render.size import size_payload
from kvcalc.sources import files
from kvcalc.sources.config import REVIEWED_TYPES, spec_from_config
from kvcalc.sources.presets import all_presets, bundled_dir, find

try:
    import kvoracle
    from test_fuzz_oracle import kvcalc_answer
except ImportError:  # tests/ imported as a package
    from tests import kvoracle
    from tests.test_fuzz_oracle import kvcalc_answer

pytestmark = pytest.mark.slow  # fuzzing: mutated configs, gate files and pipes

# KVCALC_FUZZ_SCALE=N multiplies every example count (docs/hardening.md: the long runs)
SCALE = max(1, int(os.environ.get("KVCALC_FUZZ_SCALE", "1")))
PRESETS = sorted(all_presets(include_user=False))
CONFIGS = {name: all_presets(include_user=False)[name].load()["config"] for name in PRESETS}
# the settings every fuzzed config is evaluated under: defaults, the pool on a catalog GPU
# (weights and activation estimates read raw config fields), and a split plan with traffic
SETTINGS = (
    Settings(),
    Settings(gpu="H100-80GB"),
    Settings(tp=2, pp=2, tokens=1000, batch=3),
)


class Hang(BaseException):
    """Raised by the deadline; a BaseException so no `except Exception` swallows it."""


@contextmanager
def deadline(seconds: float):
    def _fire(*_):
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _strict_json(text: str):
    def _bad(name):
        raise AssertionError(f"{name} in the JSON output")

    return json.loads(text, parse_constant=_bad)


def pipeline(cfg) -> tuple[str, ...]:
    """spec_from_config -> evaluate -> the JSON of `kvcalc size`, as the CLI runs them, under
    each of SETTINGS. Returns ('error',) when the config is refused, else 'ok' or 'error' per
    setting; anything but a one-line KvcalcError propagates (a bug)."""
    try:
        with deadline(5):
            spec = spec_from_config(cfg, name="fuzz", source="fuzz")
    except KvcalcError as exc:
        assert "\n" not in exc.message and exc.exit_code == 2
        return ("error",)
    outcomes = []
    for s in SETTINGS:
        try:
            with deadline(5):
                _strict_json(render("json", size_payload(evaluate(spec, s)), None))
            outcomes.append("ok")
        except KvcalcError as exc:
            assert "\n" not in exc.message and exc.exit_code == 2
            outcomes.append("error")
    return tuple(outcomes)


# ------------------------------------------------------------------ hostile values

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 1, 3, 2**31, 2**63, 2**70, 10**30, 0.5, 1e300, -1e300]),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["x", "", "4096", "bfloat16", "full_attention", "nan"]),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=3)), max_size=4),
    st.dictionaries(st.sampled_from(["factor", "rope_type", "type", "x"]), st.one_of(st.integers(), st.floats(), st.text(max_size=4)), max_size=3),
)
MUTATIONS = ["delete", None, "x", -1, 0, 1e300, [], {}, True, 2**70, 0.5, float("nan"), float("inf"), float("-inf"), [1], ["x"]]

# fields the loader and the estimates read, present in few presets: mutations add them too
EXTRA_KEYS = kvoracle.EXTRA_KEYS


def _paths(cfg: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in cfg.items():
        out.append((*prefix, k))
        if isinstance(v, dict):
            out.extend(_paths(v, (*prefix, k)))
    return out


def _mutation_paths(cfg: dict) -> list[tuple]:
    paths = set(_paths(cfg))
    nested = "text_config" if isinstance(cfg.get("text_config"), dict) else None
    for k in EXTRA_KEYS:
        paths.add((k,))
        if nested:
            paths.add((nested, k))
    return sorted(paths, key=str)


def _mutate(cfg: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(cfg)
    d = out
    for k in path[:-1]:
        d = d[k]
    if isinstance(value, str) and value == "delete":
        d.pop(path[-1], None)
    else:
        d[path[-1]] = copy.deepcopy(value)
    return out


@pytest.mark.parametrize("name", PRESETS)
@settings(max_examples=12 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_presets_give_a_result_or_one_line(name, data):
    cfg = CONFIGS[name]
    path = data.draw(st.sampled_from(_mutation_paths(cfg)), label="path")
    value = data.draw(st.one_of(st.sampled_from(MUTATIONS), HOSTILE), label="value")
    mutated = _mutate(cfg, path, value)
    event(f"default flags: {pipeline(mutated)[0]}")
    expected = kvoracle.expected_bytes_per_token(cfg, mutated)  # a wrong answer is a failure (issue 17)
    if expected != kvoracle.SKIP:
        assert kvcalc_answer(mutated) == expected, (name, path, value)


# plausible values for the fields that steer the loader, so generated configs get deep
# into it; each field may instead take a hostile value or be missing
PLAUSIBLE = {
    "model_type": st.sampled_from(sorted(REVIEWED_TYPES | {"unknown_type"})),
    "num_hidden_layers": st.integers(1, 48),
    "num_attention_heads": st.sampled_from([1, 2, 4, 8, 16, 32]),
    "num_key_value_heads": st.sampled_from([1, 2, 4, 8]),
    "hidden_size": st.sampled_from([256, 512, 1024, 4096]),
    "head_dim": st.sampled_from([64, 128, 256]),
    "intermediate_size": st.integers(1, 20000),
    "vocab_size": st.integers(1, 200000),
    "max_position_embeddings": st.integers(1, 1 << 20),
    "sliding_window": st.integers(1, 8192),
    "use_sliding_window": st.booleans(),
    "max_window_layers": st.integers(0, 48),
    "sliding_window_pattern": st.integers(1, 8),
    "layer_types": st.lists(st.sampled_from(["full_attention", "sliding_attention", "chunked_attention",
                                             "linear_attention", "mamba", "weird"]), max_size=48),
    "attention_chunk_size": st.integers(1, 8192),
    "no_rope_layers": st.lists(st.integers(0, 1), max_size=48),
    "full_attention_interval": st.integers(1, 8),
    "linear_num_key_heads": st.integers(1, 16),
    "linear_num_value_heads": st.integers(1, 32),
    "linear_key_head_dim": st.integers(1, 256),
    "linear_value_head_dim": st.integers(1, 256),
    "linear_conv_kernel_dim": st.integers(1, 8),
    "attn_layer_period": st.integers(1, 8),
    "attn_layer_offset": st.integers(0, 8),
    "mamba_expand": st.integers(1, 4),
    "mamba_d_conv": st.integers(1, 8),
    "mamba_d_state": st.integers(1, 64),
    "kv_lora_rank": st.integers(1, 1024),
    "qk_rope_head_dim": st.integers(1, 128),
    "torch_dtype": st.sampled_from(["bfloat16", "float16", "float32", "fp8", "torch.bfloat16"]),
    "rope_scaling": st.fixed_dictionaries({"rope_type": st.sampled_from(["linear", "yarn", "dynamic"]),
                                           "factor": st.floats(0.001, 64)}),
    "multi_query": st.booleans(),
    "num_experts": st.integers(0, 64),
    "first_k_dense_replace": st.integers(0, 8),
    "mlp_only_layers": st.lists(st.integers(0, 48), max_size=4),
    "decoder_layers": st.integers(1, 32),
    "decoder_attention_heads": st.sampled_from([4, 8, 20]),
    "d_model": st.sampled_from([256, 1280]),
    "max_source_positions": st.integers(1, 3000),
    "max_target_positions": st.integers(1, 1000),
}
CORE = ("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size", "max_position_embeddings")


@st.composite
def generated_configs(draw):  # noqa: ANN001, ANN201
    """Core fields: plausible 8 times in 10, hostile or missing otherwise; other fields:
    absent half the time, then plausible 2 times in 3, hostile otherwise."""
    cfg = {}
    for key, plausible in PLAUSIBLE.items():
        roll = draw(st.integers(0, 9))
        if key in CORE:
            if roll < 8:
                cfg[key] = draw(plausible)
            elif roll == 8:
                cfg[key] = draw(HOSTILE)
        elif roll >= 5:
            cfg[key] = draw(plausible) if roll < 9 else draw(HOSTILE)
    n = cfg.get("num_hidden_layers")
    if isinstance(n, int) and 0 < n <= 48 and draw(st.booleans()):
        for key in ("layer_types", "no_rope_layers"):  # one entry per layer, mostly
            if isinstance(cfg.get(key), list) and cfg[key]:
                cfg[key] = (cfg[key] * n)[:n]
    return cfg


GENERATED = generated_configs()


@settings(max_examples=250 * SCALE, deadline=None)
@given(GENERATED, st.booleans())
def test_generated_configs_give_a_result_or_one_line(cfg, nest):
    if nest:  # the decoder of a multimodal model, under text_config
        cfg = {"model_type": "llava", "text_config": cfg}
    event(f"default flags: {pipeline(cfg)[0]}")


@settings(max_examples=100 * SCALE, deadline=None)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                    max_leaves=30))
def test_arbitrary_json_values_give_a_result_or_one_line(value):
    pipeline(value)


# the bugs the sweep found (scripts/fuzz_configs.py); each raised a traceback (exit 70) or
# hung before the fix. "error": now a one-line ConfigError naming the field; "any": the value
# is passed over by the weights / activation estimate (which does without non-numbers).
REGRESSIONS = [
    ("deepseek-r1", ("num_hidden_layers",), 1e300, "error"),  # OverflowError building 10**300 layers
    ("deepseek-r1", ("num_hidden_layers",), 100_000, "error"),  # minutes building and walking 10**5 layers
    ("qwen3-0.6b", ("num_hidden_layers",), 2**70, "error"),
    ("whisper-large-v3", ("decoder_layers",), 10**9, "error"),
    ("gemma-3-1b-it", ("sliding_window_pattern",), "x", "error"),  # TypeError: int % str
    ("gemma-3-1b-it", ("sliding_window_pattern",), [1], "error"),
    ("llama-4-scout-17b-16e-instruct", ("text_config", "no_rope_layers"), [1], "error"),  # IndexError
    ("llama-4-scout-17b-16e-instruct", ("text_config", "no_rope_layers"), 1e300, "error"),  # float not subscriptable
    ("llama-4-scout-17b-16e-instruct", ("text_config", "no_rope_layer_interval"), "x", "any"),  # absent list: int % str
    ("qwen2.5-7b", ("max_window_layers",), "x", "error"),  # int >= str once sliding is on
    ("deepseek-r1", ("first_k_dense_replace",), float("inf"), "error"),  # weights estimate: int(inf)
    ("deepseek-r1", ("hidden_size",), [1], "any"),  # activation estimate: int([1])
    ("deepseek-r1", ("hidden_size",), "x", "any"),  # int('x')
    ("deepseek-r1", ("hidden_size",), float("nan"), "any"),  # int(nan)
    ("jamba-v0.1", ("hidden_size",), 1e300, "error"),  # int too large to convert to float
    ("jamba-v0.1", ("expert_layer_period",), 0, "error"),  # modulo by zero
    ("qwen3-235b-a22b", ("mlp_only_layers",), 1e300, "error"),  # `in` on a float
    ("qwen3-235b-a22b", ("mlp_only_layers",), "x", "error"),
    ("deepseek-r1", ("max_position_embeddings",), 0.5, "error"),  # max_model_len 0: division by zero in the pool
    ("qwen3-0.6b", ("max_position_embeddings",), 10**400, "error"),  # beyond a float
    ("llama-3.1-8b", ("rope_scaling",), {"rope_type": "linear", "factor": 1e308}, "error"),  # length x factor = inf
    ("qwen3-0.6b", ("head_dim",), 10**100, "error"),  # weights estimate: int / int too large for a float
]


@pytest.mark.parametrize(
    "name,path,value,expected", REGRESSIONS, ids=[f"{n}:{'.'.join(p)}={str(v)[:12]}" for n, p, v, _ in REGRESSIONS]
)
def test_regressions_found_by_the_sweep(name, path, value, expected):
    cfg = _mutate(CONFIGS[name], path, value)
    if name == "qwen2.5-7b":
        cfg["use_sliding_window"] = True
        cfg["sliding_window"] = 4096
    if name == "llama-4-scout-17b-16e-instruct":
        cfg["text_config"].pop("no_rope_layers", None) if path[-1] == "no_rope_layer_interval" else None
    outcomes = pipeline(cfg)  # raises on anything but a result or a one-line KvcalcError
    if expected == "error":
        assert "error" in outcomes


def test_limits_name_the_field():
    cfg = dict(CONFIGS["qwen3-0.6b"], num_hidden_layers=10_001)
    with pytest.raises(ConfigError, match="'num_hidden_layers' is 10001; kvcalc takes at most 10000 layers"):
        spec_from_config(cfg, name="x", source="x")
    # 10,000 layers are still taken (no real model comes near)
    assert spec_from_config(dict(cfg, num_hidden_layers=10_000), name="x", source="x").num_layers == 10_000
    cfg = dict(CONFIGS["qwen3-0.6b"], max_position_embeddings=0.5)
    with pytest.raises(ConfigError, match="maximum length"):
        spec_from_config(cfg, name="x", source="x")


# ------------------------------------------------------------------ the file reader, through the CLI


@pytest.fixture(scope="module")
def cli():
    from kvcalc.cli import build_app

    app = build_app(["size", "presets"])
    runner = CliRunner()

    def _run(*args: str, seconds: float = 20):
        with deadline(seconds):
            r = runner.invoke(app, list(args))
        return r.exit_code, r.stdout, r.stderr

    return _run


def _one_line_error(code: int, err: str, needle: str = "") -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: ") and "Traceback" not in err, err
    assert needle in err, err


def _valid_or_one_line(code: int, out: str, err: str) -> None:
    if code == 0:
        _strict_json(out)
    else:
        _one_line_error(code, err)


@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(GENERATED)
def test_generated_config_files_through_the_cli(cli, tmp_path, cfg):
    # json.dumps writes NaN / Infinity tokens for non-finite floats: the reader refuses them
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg, allow_nan=True))
    code, out, err = cli("size", str(path), "--format", "json")
    if any(isinstance(v, float) and not math.isfinite(v) for v in cfg.values()):
        _one_line_error(code, err, "is not a valid JSON number")
    else:
        _valid_or_one_line(code, out, err)


@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200), st.sampled_from(PRESETS[:5]))
def test_random_and_corrupted_bytes_through_the_cli(cli, tmp_path, junk, name):
    good = json.dumps(CONFIGS[name]).encode()
    for data in (junk, good[: len(good) // 2] + junk, junk + good):
        path = tmp_path / "config.json"
        path.write_bytes(data)
        code, out, err = cli("size", str(path), "--format", "json")
        _valid_or_one_line(code, out, err)


@pytest.mark.parametrize(
    "content,needle",
    [
        (b'{"num_hidden_layers": NaN}', "NaN is not a valid JSON number"),
        (b'{"num_hidden_layers": Infinity}', "Infinity is not a valid JSON number"),
        (b'{"num_hidden_layers": -Infinity}', "-Infinity is not a valid JSON number"),
        (b"\xff\xfe{}", "is not UTF-8 text (byte 0)"),
        (b'{"model_type": "llama", "x": "\xc3\x28"}', "is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"{" + b'"a":{' * 50_000 + b"}" * 50_001, "nested too deeply"),
        (b"", "is not valid JSON"),
        (b"[1, 2, 3]", "must hold a JSON object"),
        (b'"just text"', "must hold a JSON object"),
        (b'{"model_type": "llama"}\n{"second": 1}', "is not valid JSON: Extra data"),
        (b'{"model_type": "llama", "num_hidden_layers": 1' + b"0" * 5000 + b"}", "is not valid JSON"),  # > 4300 digits
    ],
)
def test_broken_files(cli, tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    code, _, err = cli("size", str(path))
    _one_line_error(code, err, needle)


def test_huge_files_are_refused_before_reading(cli, tmp_path):
    # a sparse 17 MiB file: refused from its size, never read (limit 16 MiB)
    path = tmp_path / "config.json"
    with open(path, "wb") as fh:
        fh.truncate(17 * 1024 * 1024)
    code, _, err = cli("size", str(path), seconds=5)
    _one_line_error(code, err, "is 17825792 bytes; that is too large (limit 16777216 bytes)")


def test_large_valid_file_under_the_limit(cli, tmp_path):
    # 10 MiB of padding inside a valid config: read and sized normally
    cfg = dict(CONFIGS["qwen3-0.6b"], padding=["x" * 1000] * 10_000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = cli("size", str(path), "--tokens", "1", "--format", "json")
    assert code == 0, err
    assert _strict_json(out)["bytes_per_token"] == 28 * 2 * 8 * 128 * 2


def test_paths_that_are_folders_links_and_devices(cli, tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(CONFIGS["qwen3-0.6b"]))
    # a folder without config.json; a folder whose config.json is itself a folder
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(*cli("size", str(empty))[::2], "holds no config.json")
    odd = tmp_path / "odd"
    (odd / "config.json").mkdir(parents=True)
    _one_line_error(*cli("size", str(odd))[::2], "holds no config.json")
    # a symlink to a config is followed; to a folder holding one too
    link = tmp_path / "link.json"
    link.symlink_to(good)
    code, out, err = cli("size", str(link), "--tokens", "1", "--format", "json")
    assert code == 0 and _strict_json(out)["bytes_per_token"] == 28 * 2 * 8 * 128 * 2, err
    # dangling link, a loop of links
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    _one_line_error(*cli("size", str(tmp_path / "dangling.json"))[::2], "no file")
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    _one_line_error(*cli("size", str(tmp_path / "a.json"))[::2], "no file")
    # devices: /dev/zero is read only up to the limit; /dev/null is empty
    _one_line_error(*cli("size", "/dev/zero", seconds=10)[::2], "holds more than 16777216 bytes")
    _one_line_error(*cli("size", "/dev/null")[::2], "is not valid JSON")


def test_a_socket_is_refused(cli, tmp_path):
    path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        _one_line_error(*cli("size", str(path))[::2], "is not a regular file")
    finally:
        sock.close()


def test_pipes_are_read_and_a_silent_pipe_gives_up(cli, tmp_path, monkeypatch):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    # a writer that sends a config (what `kvcalc size <(curl ...)` does)
    payload = json.dumps(CONFIGS["qwen3-0.6b"]).encode()

    def write():
        with open(fifo, "wb") as fh:
            fh.write(payload)

    t = threading.Thread(target=write)
    t.start()
    code, out, err = cli("size", str(fifo), "--tokens", "1", "--format", "json", seconds=10)
    t.join(5)
    assert code == 0 and _strict_json(out)["bytes_per_token"] == 28 * 2 * 8 * 128 * 2, err
    # a writer that never writes: the read gives up after the idle wait, not never
    monkeypatch.setattr(files, "PIPE_IDLE_S", 0.3)
    holder = os.open(fifo, os.O_RDWR)  # holds the write end open without writing
    try:
        _one_line_error(*cli("size", str(fifo), seconds=10)[::2], "sent nothing for 0.3 s")
    finally:
        os.close(holder)


def test_unreadable_file(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["qwen3-0.6b"]))
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root (or with CAP_DAC_OVERRIDE): mode 000 does not stop this process reading")
        _one_line_error(*cli("size", str(path))[::2], "cannot be read: Permission denied")
    finally:
        path.chmod(0o644)


# ------------------------------------------------------------------ preset names are never paths

TRAVERSALS = [
    "../../etc/passwd",
    "/etc/passwd",
    "../secret",
    "..",
    ".",
    "presets/../secret",
    "qwen3-0.6b/../../secret",
    "qwen3-0.6b/",
    "./qwen3-0.6b",
    "%2e%2e%2fsecret",
    "secret\x00",
    "~/secret",
    "index",
]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_preset_lookups_never_read_outside_the_preset_folders(cli, tmp_path, monkeypatch, name):
    home = tmp_path / "home"
    (home / "presets").mkdir(parents=True)
    record = {"hub_id": "evil/secret", "source": "outside", "config": CONFIGS["qwen3-0.6b"]}
    (home / "secret.json").write_text(json.dumps(record))  # next to the user presets, not in them
    (tmp_path / "secret.json").write_text(json.dumps(record))
    monkeypatch.setenv("KVCALC_HOME", str(home))
    monkeypatch.chdir(home / "presets")  # relative names would land on the decoys
    allowed = (str(bundled_dir().resolve()), str((home / "presets").resolve()))
    opened: list[str] = []
    real_open = io.open

    def spy(file, *a, **kw):
        if not isinstance(file, int):
            opened.append(str(Path(file).resolve()))
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", spy)
    monkeypatch.setattr("io.open", spy)  # pathlib's read_text goes through io.open
    assert find(name) is None
    code, _, err = cli("presets", "show", name)
    _one_line_error(code, err, "no preset named")
    outside = [p for p in opened if not p.startswith(allowed)]
    assert outside == []
    assert any(p.startswith(allowed[0]) for p in opened)  # the spy saw the index being read


# ------------------------------------------------------------------ the gate loader

@pytest.fixture(scope="module")
def gate_cli():
    from kvcalc.cli import build_app

    app = build_app(["gate"])
    runner = CliRunner()

    def _run(path: Path, seconds: float = 30):
        with deadline(seconds):
            r = runner.invoke(app, ["gate", str(path), "--format", "json"])
        return r.exit_code, r.stdout, r.stderr

    return _run


def _gate_outcome_ok(code: int, out: str, err: str) -> None:
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and all(line.startswith("kvcalc: error: ") for line in lines), err
    if code in (0, 1) or out.strip():
        _strict_json(out)


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["deployments: *i"]
)
QUADRATIC = "x: &x [" + ",".join(["1"] * 1000) + "]\ny: [" + ",".join(["*x"] * 190) + "]\n"


@pytest.mark.parametrize(
    "text,needle",
    [
        (BILLION_LAUGHS, "refused"),
        (QUADRATIC, "refused"),  # 190 aliases of a 1000-element list: 190,000 nodes after expansion
        ("a: &a [*a]\n", ""),  # an alias to itself
        ("!!python/object/apply:os.system ['echo pwned']\n", ""),
        ("- !!python/object/new:os.system [echo pwned]\n", ""),
        ("deployments:\n  - name: !!python/name:os.system x\n", ""),
        ("deployments: !custom {}\n", ""),
        ("deployments:\n  - name: a\n    model: !!binary aGVsbG8=\n", ""),
        ("[" * 10_000 + "]" * 10_000, ""),
        ("{" * 5000 + "}" * 5000, ""),
        ("deployments:\n" + "  " * 2000 + "- x\n", ""),
        ("%YAML 9.9\n---\n[]\n", ""),
        ("--- a\n--- b\n", ""),
        ("\t- tab\n", ""),
        ("", "empty"),
        ("# only a comment\n", "no YAML document"),
        ("deployments: 5\n", ""),
        ("deployments: []\n", ""),
        ("- 1\n- [2]\n- {}\n", ""),
        ("deployments:\n  - {name: a, model: qwen3-0.6b, min_concurrency: .nan}\n", ""),
        ("deployments:\n  - {name: a, model: qwen3-0.6b, kv_cache_memory: 1GiB, min_concurrency: .inf}\n", ""),
        ("deployments:\n  - {name: a, model: qwen3-0.6b, tp: 1e400}\n", ""),
        ("deployments:\n  - {name: a, model: qwen3-0.6b, batch: 99999999999999999999999}\n", ""),
        ("deployments:\n  - {name: a, model: ../../etc/passwd, max_kv_bytes_per_rank: 1GiB}\n", ""),
        ("deployments:\n  - {name: a, model: /dev/zero, max_kv_bytes_per_rank: 1GiB}\n", ""),
        ("deployments:\n  - {name: a, model: qwen3-0.6b, tokens: 1, max_kv_bytes_per_rank: 1GiB}\n" * 2, ""),
    ],
)
def test_hostile_gate_files(gate_cli, tmp_path, text, needle):
    path = tmp_path / "gate.yaml"
    path.write_text(text)
    code, out, err = gate_cli(path)
    _gate_outcome_ok(code, out, err)
    assert needle in err
    assert not (tmp_path / "pwned").exists()


def test_gate_tags_never_run_code(gate_cli, tmp_path):
    target = tmp_path / "pwned"
    for tag in ("!!python/object/apply:os.makedirs", "!!python/object/new:os.makedirs"):
        path = tmp_path / "gate.yaml"
        path.write_text(f"deployments: {tag} [{json.dumps(str(target))}]\n")
        code, out, err = gate_cli(path)
        assert code == 2 and not target.exists(), err


def test_gate_bad_files(gate_cli, tmp_path):
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    for path in (folder, tmp_path / "missing.yaml"):
        code, out, err = gate_cli(path)
        assert code == 2, err
        _gate_outcome_ok(code, out, err)
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to(tmp_path / "loop.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(2 << 20)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"deployments:\n  - name: \xff\xfe\n")
    for path in (tmp_path / "loop.yaml", tmp_path / "dangling.yaml", big, bad):
        code, out, err = gate_cli(path)
        assert code == 2, err
        _gate_outcome_ok(code, out, err)


def _example_gate() -> dict:
    import yaml

    text = (Path(__file__).parent.parent / "examples" / "capacity.yaml").read_text()
    return yaml.safe_load(text)


@settings(max_examples=40 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_gate_files(gate_cli, tmp_path, data):
    import yaml

    doc = _example_gate()
    deployments = doc["deployments"]
    i = data.draw(st.integers(0, len(deployments) - 1), label="deployment")
    keys = sorted({*deployments[i], "tp", "pp", "batch", "tokens", "requests", "gpu_memory_utilization",
                   "kv_dtype", "block_size", "min_headroom", "max_model_len", "model", "name", "pp_layers"})
    key = data.draw(st.sampled_from(keys), label="key")
    value = data.draw(st.one_of(st.sampled_from(MUTATIONS), HOSTILE), label="value")
    target = doc if data.draw(st.booleans(), label="in defaults") and key not in ("name",) else deployments[i]
    if target is doc:
        target = doc.setdefault("defaults", {})
    if isinstance(value, str) and value == "delete":
        target.pop(key, None)
    else:
        target[key] = value
    doc["deployments"] = [deployments[i]]  # one deployment: each evaluation stays short
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    code, out, err = gate_cli(path)
    event(f"exit {code}")
    _gate_outcome_ok(code, out, err)


def _limited_run(args: list[str], timeout: float = 20):
    """`python -m kvcalc ARGS` in a subprocess capped at 1 GiB of address space."""
    import resource
    import subprocess
    import sys

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap)


def test_a_config_device_is_read_only_up_to_the_limit_in_a_capped_process():
    out = _limited_run(["size", "/dev/zero"])
    assert out.returncode == 2 and out.stderr.startswith("kvcalc: error: config file '/dev/zero' holds more than")


def test_a_gate_device_is_read_only_up_to_the_limit():
    out = _limited_run(["gate", "/dev/zero"])
    assert out.returncode == 2 and out.stderr.startswith("kvcalc: error:"), (out.returncode, out.stderr)
