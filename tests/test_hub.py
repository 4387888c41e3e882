"""Hub models through the real huggingface_hub code paths, against a local stand-in for the
Hub (tests/hubserver.py) that HF_ENDPOINT points at. The CLI runs in a subprocess with its
own environment, because huggingface_hub reads HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE and the
timeouts when it is imported. Nothing of huggingface_hub is patched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    from hubserver import TOKEN, FakeHub, Repo, safetensors_file
except ImportError:  # tests/ imported as a package
    from tests.hubserver import TOKEN, FakeHub, Repo, safetensors_file

pytestmark = pytest.mark.slow  # a local Hub-protocol server per test

# the published config, copied verbatim (provenance: tests/data/configs/SOURCES.md)
LLAMA_8B = Path(__file__).resolve().parent / "data" / "configs" / "meta-llama--Llama-3.1-8B.json"


def _llama_config() -> dict:
    data = json.loads(LLAMA_8B.read_text())
    return data["config"] if "config" in data and isinstance(data["config"], dict) else data


# Llama 3.1 8B (config: 32 layers, 8 KV heads, head_dim 4096 / 32 = 128, bfloat16):
LLAMA_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x layers x KV heads x head_dim x 2 B = 131072

# element sizes of the safetensors dtypes used below (safetensors format: BF16/F16 2, F32 4, F8/I8/U8 1)
EB = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I8": 1, "U8": 1}

# one-file checkpoint: a BF16 [4, 8], an F32 [3], an F8_E4M3 [2, 5]
MINI_TENSORS = {"a": ("BF16", [4, 8]), "b": ("F32", [3]), "c": ("F8_E4M3", [2, 5])}
MINI = {
    "parameters": 4 * 8 + 3 + 2 * 5,  # 45
    "bytes": 4 * 8 * 2 + 3 * 4 + 2 * 5 * 1,  # 64 + 12 + 10 = 86
    "parameters_by_dtype": {"BF16": 32, "F32": 3, "F8_E4M3": 10},
}
# sharded checkpoint: shard 1 = BF16 [16, 16] + I8 [7]; shard 2 = F16 [5, 3] + U8 [9]
SHARD1 = {"x": ("BF16", [16, 16]), "y": ("I8", [7])}
SHARD2 = {"z": ("F16", [5, 3]), "w": ("U8", [9])}
SHARDED = {
    "parameters": 256 + 7 + 15 + 9,  # 287
    "bytes": 256 * 2 + 7 * 1 + 15 * 2 + 9 * 1,  # 512 + 7 + 30 + 9 = 558
    "parameters_by_dtype": {"BF16": 256, "F16": 15, "I8": 7, "U8": 9},
}
# Mistral-format params.json as mistralai/Mistral-7B-v0.3 publishes it (its 'params.json')
MISTRAL_PARAMS = {
    "dim": 4096, "n_layers": 32, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32, "n_kv_heads": 8,
    "norm_eps": 1e-05, "vocab_size": 32768, "rope_theta": 1000000.0,
}
COMMIT_MINI = "1111111111111111111111111111111111111111"
COMMIT_SHARDED = "2222222222222222222222222222222222222222"


def _repos() -> dict[str, Repo]:
    cfg = json.dumps(_llama_config(), indent=2).encode()
    index = {
        "metadata": {"total_size": SHARDED["bytes"]},
        "weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
                       "z": "model-00002-of-00002.safetensors", "w": "model-00002-of-00002.safetensors"},
    }
    multimodal = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
                  "text_config": _llama_config(), "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024}}
    return {
        "kvtest/llama-mini": Repo({"config.json": cfg, "model.safetensors": safetensors_file(MINI_TENSORS, EB)},
                                  commit=COMMIT_MINI),
        "kvtest/llama-sharded": Repo(
            {"config.json": cfg, "model.safetensors.index.json": json.dumps(index).encode(),
             "model-00001-of-00002.safetensors": safetensors_file(SHARD1, EB),
             "model-00002-of-00002.safetensors": safetensors_file(SHARD2, EB)},
            commit=COMMIT_SHARDED,
        ),
        "kvtest/gated": Repo({"config.json": cfg}, gated=True),
        "kvtest/stalled": Repo({"config.json": cfg}, stall=8.0),
        "kvtest/broken": Repo({"config.json": b'{"model_type": "llama", "num_hidden_layers": 32,'}),
        "kvtest/multimodal": Repo({"config.json": json.dumps(multimodal).encode()}),
        "kvtest/newarch": Repo({"config.json": json.dumps({"model_type": "zeta_next", "n_layer": 12, "n_embd": 512}).encode()}),
        "kvtest/mistral-format": Repo({"params.json": json.dumps(MISTRAL_PARAMS).encode(),
                                       "consolidated.safetensors": safetensors_file({"t": ("BF16", [2, 2])}, EB)}),
        "kvtest/no-config": Repo({"README.md": b"# nothing to see\n"}),
    }


@pytest.fixture(scope="module")
def hub():
    with FakeHub(_repos()) as server:
        yield server


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def env(tmp_path: Path, hub: FakeHub) -> dict[str, str]:
    drop = ("HF_", "HUGGING_FACE", "KVCALC", "TRANSFORMERS_", "XDG_")
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    e = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k.lower() not in proxies}
    e.update(
        HOME=str(tmp_path / "home"),
        HF_HOME=str(tmp_path / "hf"),
        KVCALC_HOME=str(tmp_path / "kvcalc"),
        HF_ENDPOINT=hub.endpoint,
        HF_HUB_ETAG_TIMEOUT="2",
        HF_HUB_DOWNLOAD_TIMEOUT="2",
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return e


def kvcalc(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvcalc", *args], env=env, cwd=cwd or env["HOME"].rsplit("/", 1)[0],
        capture_output=True, text=True, timeout=60,
    )


def size_json(env: dict[str, str], *args: str) -> dict:
    r = kvcalc(env, "size", *args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: "), r.stderr  # one line, no traceback
    return lines[0]


def _same_facts(checkpoint: dict, expected: dict) -> None:
    for key, value in expected.items():
        assert checkpoint[key] == value, (key, checkpoint[key], value)


# ----------------------------------------------------------------------------- success paths


def test_online_then_offline_from_cache(env, hub, tmp_path):
    d = size_json(env, "kvtest/llama-mini")
    assert d["bytes_per_token"] == LLAMA_BYTES_PER_TOKEN
    assert d["model"]["source"] == f"Hub kvtest/llama-mini@main (commit {COMMIT_MINI[:12]}), config.json"
    ck = d["checkpoint"]
    _same_facts(ck, MINI)
    assert ck["source"] == f"safetensors metadata of kvtest/llama-mini@main (commit {COMMIT_MINI[:12]})"
    # weights were never downloaded: the only safetensors reads are range requests of the header
    weight_gets = [x for x in hub.log if x[0] == "GET" and x[1].startswith("/lfs/")]
    assert weight_gets, hub.log
    cache = tmp_path / "hf" / "hub" / "models--kvtest--llama-mini"
    assert (cache / "snapshots" / COMMIT_MINI / "config.json").is_file()
    assert (cache / "refs" / "main").read_text() == COMMIT_MINI
    assert not list(cache.rglob("*.safetensors"))

    hub.clear_log()
    offline = dict(env, HF_HUB_OFFLINE="1")
    d2 = size_json(offline, "kvtest/llama-mini")
    assert hub.log == []  # not one request
    assert d2["model"]["source"].endswith("config.json from the Hub cache (HF_HUB_OFFLINE=1)")
    assert d2["bytes_per_token"] == LLAMA_BYTES_PER_TOKEN
    assert d2["checkpoint"] == ck


def test_sharded_checkpoint_through_the_index(env):
    d = size_json(env, "kvtest/llama-sharded")
    _same_facts(d["checkpoint"], SHARDED)
    assert d["checkpoint"]["files"] == 2


def test_table_output_names_both_sources(env):
    r = kvcalc(env, "size", "kvtest/llama-mini")
    assert r.returncode == 0, r.stderr
    assert f"source: Hub kvtest/llama-mini@main (commit {COMMIT_MINI[:12]}), config.json" in r.stdout
    assert f"checkpoint: {MINI['parameters']} parameters, {MINI['bytes']} B of weights (safetensors metadata of" in r.stdout


def test_gated_repo_with_a_token_is_served(env, hub):
    hub.clear_log()
    d = size_json(dict(env, HF_TOKEN=TOKEN), "kvtest/gated")
    assert d["bytes_per_token"] == LLAMA_BYTES_PER_TOKEN
    assert all(auth == f"Bearer {TOKEN}" for method, path, auth in hub.log if path.startswith("/kvtest/"))
    assert d.get("checkpoint") is None  # the repo holds no weights
    assert any("weights are estimated" in n for n in d["notes"])


def test_multimodal_text_config(env):
    d = size_json(env, "kvtest/multimodal")
    assert d["bytes_per_token"] == LLAMA_BYTES_PER_TOKEN
    assert d["model"]["model_type"] == "llama"


def test_mistral_params_json(env):
    d = size_json(env, "kvtest/mistral-format")
    m = d["model"]
    assert (m["num_layers"], m["num_kv_heads"], m["head_dim"]) == (32, 8, 128)
    assert d["bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    # vLLM's mistral parser: no max_position_embeddings in params.json nor a config.json -> 128000
    assert m["max_model_len"] == 128_000
    assert m["dtype"] == "bfloat16"  # inferred from consolidated.safetensors (BF16), as vLLM does
    assert m["source"].endswith("params.json")
    assert d["checkpoint"]["parameters"] == 2 * 2 and d["checkpoint"]["bytes"] == 2 * 2 * 2
    # offline: params.json from the Hub cache (config.json is remembered as absent), same figures
    d2 = size_json(dict(env, HF_HUB_OFFLINE="1"), "kvtest/mistral-format")
    assert d2["model"] == dict(m, source=m["source"] + " from the Hub cache (HF_HUB_OFFLINE=1)")
    assert d2["checkpoint"] == d["checkpoint"]


def test_pool_uses_the_checkpoint_bytes(env):
    pytest.importorskip("kvcalc.app.budget")
    d = size_json(env, "kvtest/llama-sharded", "--gpu", "H100-80GB")
    pool = d["pool"]
    assert pool["weights_bytes_per_rank"] == SHARDED["bytes"]  # 558, from the headers served
    weights = [t for t in pool["budget"][0] if "weights" in t["term"]]
    assert weights and weights[0]["bytes"] == SHARDED["bytes"]
    assert "safetensors metadata of kvtest/llama-sharded@main" in weights[0]["source"]


# ----------------------------------------------------------------------------- errors


def test_repo_not_found(env, hub):
    line = error_line(kvcalc(env, "size", "kvtest/does-not-exist"))
    assert "Hub repo 'kvtest/does-not-exist' was not found at " + hub.endpoint in line
    assert "hf auth login" in line


def test_gated_without_token(env, hub):
    line = error_line(kvcalc(env, "size", "kvtest/gated"))
    assert "'kvtest/gated' is gated and no Hugging Face token is set" in line
    assert "`hf auth login`" in line and "HF_TOKEN" in line
    line = error_line(kvcalc(dict(env, HF_TOKEN="hf_no_access"), "size", "kvtest/gated"))
    assert "your token has no access" in line and "not in the authorized list" in line


def test_revision_not_found(env, hub):
    line = error_line(kvcalc(env, "size", "kvtest/llama-mini", "--revision", "v9.9"))
    assert f"revision 'v9.9' of Hub repo 'kvtest/llama-mini' was not found at {hub.endpoint}" in line


def test_network_unreachable(env):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    line = error_line(kvcalc(dict(env, HF_ENDPOINT=endpoint), "size", "kvtest/llama-mini"))
    assert f"cannot reach the Hugging Face Hub at {endpoint}" in line
    assert "HF_HUB_OFFLINE=1" in line and "preset" in line


def test_timeout(env, hub):
    start = time.monotonic()
    line = error_line(kvcalc(env, "size", "kvtest/stalled"))
    elapsed = time.monotonic() - start
    assert f"cannot reach the Hugging Face Hub at {hub.endpoint} (no answer within 2 s" in line
    assert "HF_HUB_OFFLINE=1" in line
    # one 2 s attempt, not huggingface_hub's retries (5 more at 60 s each) nor the 8 s stall
    assert elapsed < 8.0


def test_malformed_json(env):
    line = error_line(kvcalc(env, "size", "kvtest/broken"))
    assert "config.json of Hub repo kvtest/broken@main" in line and "is not valid JSON" in line


def test_offline_not_cached(env, hub):
    hub.clear_log()
    line = error_line(kvcalc(dict(env, HF_HUB_OFFLINE="1"), "size", "kvtest/llama-mini"))
    assert "HF_HUB_OFFLINE=1 and config.json of kvtest/llama-mini@main is not in the Hub cache" in line
    assert hub.log == []


def test_unknown_model_type(env):
    line = error_line(kvcalc(env, "size", "kvtest/newarch"))
    assert "model_type 'zeta_next' is not known to kvcalc" in line
    assert "num_hidden_layers" in line and "num_attention_heads" in line


def test_repo_without_config(env):
    line = error_line(kvcalc(env, "size", "kvtest/no-config"))
    assert "kvtest/no-config@main has no config.json (nor a Mistral-format params.json)" in line


# ----------------------------------------------------------------------------- user presets


def test_presets_import_then_size_offline(env, tmp_path):
    r = kvcalc(env, "presets", "import", "kvtest/llama-sharded", "--name", "team-llama", "--format", "json")
    assert r.returncode == 0, r.stderr
    saved = json.loads(r.stdout)
    path = Path(saved["path"])
    assert path == tmp_path / "kvcalc" / "presets" / "team-llama.json"
    record = json.loads(path.read_text())
    assert record["hub_id"] == "kvtest/llama-sharded" and record["config"] == _llama_config()
    assert record["source"].startswith(f"Hub kvtest/llama-sharded@main (commit {COMMIT_SHARDED}), config.json, downloaded ")

    # no Hub, no Hub cache: the preset alone
    off = dict(env, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty-hf"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    d = size_json(off, "team-llama")
    assert d["model"]["source"].startswith("user preset team-llama: Hub kvtest/llama-sharded@main")
    assert d["bytes_per_token"] == LLAMA_BYTES_PER_TOKEN
    _same_facts(d["checkpoint"], SHARDED)

    again = kvcalc(env, "presets", "import", "kvtest/llama-sharded", "--name", "team-llama")
    assert "pass --force" in error_line(again)
    clash = kvcalc(env, "presets", "import", "kvtest/llama-sharded", "--name", "qwen3-0.6b")
    assert "is a bundled preset" in error_line(clash)


# ----------------------------------------------------------------------------- lazy import

PROBE = """
import sys
from kvcalc.cli import main
try:
    main(sys.argv[1:])
finally:
    sys.stderr.write("\\nHFHUB_LOADED=%s\\n" % ("huggingface_hub" in sys.modules))
"""


def test_preset_run_does_not_import_huggingface_hub(env):
    r = subprocess.run([sys.executable, "-c", PROBE, "size", "qwen3-0.6b", "--format", "json"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "HFHUB_LOADED=False" in r.stderr
    # the probe sees the import when the Hub path runs (offline, not cached: it fails fast)
    r = subprocess.run([sys.executable, "-c", PROBE, "size", "kvtest/llama-mini"],
                       env=dict(env, HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "HFHUB_LOADED=True" in r.stderr


# ----------------------------------------------------------------------------- pure helper


def test_checkpoint_facts_by_hand():
    from kvcalc.sources.hub import checkpoint_facts

    def t(dtype, shape, span):
        return SimpleNamespace(dtype=dtype, shape=shape, data_offsets=(0, span))

    files = {
        "a.safetensors": SimpleNamespace(tensors={"w": t("BF16", [3, 4], 24), "s": t("F8_E4M3", [10], 10)}),
        "b.safetensors": SimpleNamespace(tensors={"p": t("F4", [3, 5], 8), "q": t("X9", [2], 7), "e": t("F32", [], 4)}),
    }
    facts = checkpoint_facts(files, "here")
    # BF16 12 x 2 = 24; F8 10 x 1 = 10; F4 15 x 4 bits = 60 bits -> 8 B; unknown X9 -> its data span 7 B;
    # a scalar F32 (shape []) is 1 element x 4 B
    assert facts["parameters"] == 12 + 10 + 15 + 2 + 1
    assert facts["bytes"] == 24 + 10 + 8 + 7 + 4
    assert facts["parameters_by_dtype"] == {"BF16": 12, "F32": 1, "F4": 15, "F8_E4M3": 10, "X9": 2}
    assert facts["files"] == 2 and facts["source"] == "here"

