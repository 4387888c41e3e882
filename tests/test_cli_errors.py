"""Bad input: exit 2 and one line naming the flag or field; never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--tp", "0"], "--tp must be a positive integer"),
        (["--tp", "3"], "--tp 3 does not divide"),
        (["--tp", "32"], "attention heads"),
        (["--tokens", "-5"], "--tokens must be a non-negative integer"),
        (["--block-size", "0"], "--block-size must be a positive integer"),
        (["--kv-dtype", "int3"], "--kv-dtype 'int3' is not known"),
        (["--dtype", "float8"], "--dtype 'float8' is not known"),
        (["--requests", "17,x"], "--requests must be comma-separated integers"),
        (["--pp", "2", "--pp-layers", "10,10"], "--pp-layers sums to 20 but the model has 28 layers"),
        (["--tp", "abc"], "'abc' is not a valid int"),
        (["--format", "xml"], "--format 'xml' is not known"),
        (["--gen", "5"], "--gen needs --prompt"),
        (["--max-model-len", "100000000"], "--max-model-len 100000000 is larger than"),
        (["--gpu", "T4", "--nvidia-driver", "10000000000"], "--nvidia-driver is a driver branch such as 570 or 580"),
        (["--gpu", "T4", "--nvidia-driver", "58"], "--nvidia-driver is a driver branch such as 570 or 580"),
        (["--gpu-memory", "80GiB", "--nvidia-driver", "58"], "--nvidia-driver is a driver branch such as 570 or 580"),
        # the budget's word-valued flags are checked without --gpu too, where no budget is computed
        (["--nvidia-driver", "58"], "--nvidia-driver is a driver branch such as 570 or 580"),
        (["--sampler", "v2"], "--sampler 'v2' is not known; valid: auto, native, flashinfer, triton"),
        (["--compile-cache", "hot"], "--compile-cache 'hot' is not known; valid: cold, warm"),
        (["--quantization", "int3"], "--quantization 'int3' is not known"),
        (["--speculative-config", "eagle"], "--speculative-config takes vLLM's JSON"),
    ],
)
def test_bad_flags(run, args, needle):
    code, out, err = run("size", "qwen3-0.6b", *args)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_tp_between_heads_is_rejected_with_valid_values(run):
    # llama-3.1-8b: 32 query heads, 8 KV heads; TP 16 replicates (16 % 8 == 0), TP 12 fails
    code, _, err = run("size", "llama-3.1-8b", "--tp", "16")
    assert code == 0
    code, _, err = run("size", "llama-3.1-8b", "--tp", "12")
    assert code == 2 and "attention heads" in err


def test_bad_models(run, tmp_path):
    code, _, err = run("size", "no-such-model")
    assert code == 2 and "not a preset" in err
    missing = tmp_path / "config.json"
    missing.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 8, "hidden_size": 512}))
    code, _, err = run("size", str(missing))
    assert code == 2 and "'num_hidden_layers'" in err
    missing.write_text("{not json")
    code, _, err = run("size", str(missing))
    assert code == 2 and "not valid JSON" in err
    code, _, err = run("size", str(tmp_path))
    assert code == 2  # a folder: its config.json is read, and it is broken


def test_local_config_and_folder(run_json, tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
           "hidden_size": 512, "torch_dtype": "float16", "max_position_embeddings": 1024}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for target in (str(tmp_path / "config.json"), str(tmp_path)):
        d = run_json("size", target, "--tokens", "10")
        assert d["bytes_per_token"] == 2 * 2 * 2 * (512 // 8) * 2


def test_nested_text_config(run_json, tmp_path):
    cfg = {"model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 32, "hidden_size": 256, "torch_dtype": "bfloat16",
           "max_position_embeddings": 2048}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    d = run_json("size", str(tmp_path), "--tokens", "1")
    assert d["bytes_per_token"] == 2 * 4 * 1 * 32 * 2


def test_preset_by_hub_id_case_insensitive(run_json):
    a = run_json("size", "Qwen/Qwen3-0.6B", "--tokens", "1")
    b = run_json("size", "QWEN3-0.6B", "--tokens", "1")
    assert a["bytes_per_token"] == b["bytes_per_token"] == 114688


def test_presets_list_and_show(run_json, run):
    rows = run_json("presets")
    assert len(rows) >= 25
    names = {r["name"] for r in rows}
    families = {r["attention"].split(" ")[0] for r in rows}
    assert {"MHA", "GQA", "MQA", "MLA"} <= families
    assert {"qwen3-0.6b", "deepseek-v3", "jamba-v0.1", "whisper-large-v3", "t5-v1_1-base"} <= names
    code, out, _ = run("presets", "show", "mistral-7b-v0.1")
    rec = json.loads(out)
    assert rec["config"]["sliding_window"] == 4096 and "sliding_window_size" not in rec["config"]
    assert rec["source"]
    code, _, err = run("presets", "show", "../../etc/passwd")
    assert code == 2 and "no preset named" in err


def test_no_traceback_from_the_entry_point():
    out = subprocess.run([sys.executable, "-m", "kvcalc", "size", "qwen3-0.6b", "--tp", "7"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.startswith("kvcalc: error:") and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["size", "qwen3-0.6b", "--format", "json"],
        ["size", "qwen3-0.6b", "--gpu", "H100-80GB", "--format", "json"],  # the pool and the budget too
        ["compare", "qwen3-0.6b", "llama-3.1-8b", "--tp", "1,2", "--format", "json"],
        ["fit", "qwen3-0.6b", "--concurrency", "4", "--gpu", "H100-80GB", "--format", "json"],
    ],
    ids=lambda argv: " ".join(argv[:2]) + (" --gpu" if "--gpu" in argv and argv[0] == "size" else ""),
)
def test_preset_run_imports_nothing_heavy(argv):
    code = (
        "import sys, io, contextlib\n"
        "from kvcalc.cli import main\n"
        "buf = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stdout(buf):\n"
        f"        main({argv!r})\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = [m for m in ('huggingface_hub', 'torch', 'transformers', 'yaml', 'rich') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
