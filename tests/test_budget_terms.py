"""Budget terms per release line (core/budget_rules), the local checkpoint header reader,
--gpu auto without a GPU, and the probe's term-by-term comparison."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import capture_sizes, default_max_num_seqs, mxfp4_marlin, sampler_bytes_per_element
from kvcalc.core.gpus import find_gpu
from kvcalc.core.vllm_rules import rules_for
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.probe.budget_log import budget_rows, parse_budget
from kvcalc.sources.checkpoint import folder_facts, read_header
from kvcalc.sources.resolve import resolve

GIB = 1 << 30


def test_max_num_seqs_defaults_per_release_and_gpu() -> None:
    h100, a100, l4 = find_gpu("H100"), find_gpu("A100-80GB"), find_gpu("L4")
    assert default_max_num_seqs(rules_for("0.11.0")[0], h100.memory_bytes, h100.name)[0] == 1024
    assert default_max_num_seqs(rules_for("0.11.0")[0], a100.memory_bytes, a100.name)[0] == 256
    assert default_max_num_seqs(rules_for("0.8.5")[0], a100.memory_bytes, a100.name)[0] == 1024  # no A100 rule yet
    assert default_max_num_seqs(rules_for("0.33.0")[0], l4.memory_bytes, l4.name)[0] == 256


def test_sampler_bytes_per_release() -> None:
    assert sampler_bytes_per_element(rules_for("0.11.0")[0], None, 2)[0] == 38
    assert sampler_bytes_per_element(rules_for("0.11.0")[0], "flashinfer", 2)[0] == 14
    assert sampler_bytes_per_element(rules_for("0.20.0")[0], None, 2)[0] == 14
    assert sampler_bytes_per_element(rules_for("0.16.0")[0], None, 4)[0] == 40  # fp32 logits


def test_capture_sizes_default() -> None:
    sizes = capture_sizes(1024, 8192)
    assert sizes[:4] == (1, 2, 4, 8) and max(sizes) == 512 and len(sizes) == 51


def _budget(**kw: object) -> dict:
    from kvcalc.app.budget_check import predict

    s = Settings().with_(**kw)
    return predict(resolve("llama-3.1-8b").spec, s)[0]


def test_terms_per_release() -> None:
    old = _budget(gpu="H100-80GB", gpu_memory_utilization=0.9, max_model_len=16000, vllm_version="0.11.0")
    new = _budget(gpu="H100-80GB", gpu_memory_utilization=0.9, max_model_len=16000, vllm_version="0.20.0")
    assert old["cudagraphs"] == 0 < new["cudagraphs"]  # subtracted from 0.20
    assert old["torch_peak"] > 4 * GIB > new["torch_peak"]  # native sort vs Triton sampler
    eager = _budget(gpu="H100-80GB", vllm_version="0.20.0", enforce_eager=True, max_model_len=16000)
    assert eager["cudagraphs"] == 0
    assert old["available"] == old["requested"] - old["weights"] - old["torch_peak"] - old["non_torch"]
    v08 = _budget(gpu="H100-80GB", gpu_memory_utilization=0.9, max_model_len=16000, vllm_version="0.8.5")
    assert v08["non_torch"] - old["non_torch"] == 512 << 20  # the CUDA context, charged in 0.8.x


def test_quantization_flag_shrinks_weights() -> None:
    plain = _budget(gpu="H100-80GB", vllm_version="0.11.0", max_model_len=16000)
    fp8 = _budget(gpu="H100-80GB", vllm_version="0.11.0", max_model_len=16000, quantization="fp8")
    assert fp8["weights"] < 0.6 * plain["weights"]
    with pytest.raises(KvcalcError):
        _budget(gpu="H100-80GB", max_model_len=16000, quantization="int3")


def _write_safetensors(path: Path, header: dict, data: int) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data)


def test_local_checkpoint_headers(tmp_path: Path) -> None:
    _write_safetensors(tmp_path / "model.safetensors",
                       {"a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}, "__metadata__": {}}, 64)
    (tmp_path / "config.json").write_text(json.dumps(json.loads(Path("presets/llama-3.2-1b.json").read_text())["config"]))
    facts = folder_facts(tmp_path)
    assert facts is not None and facts["bytes"] == 64 and facts["parameters"] == 32
    assert resolve(str(tmp_path)).checkpoint["bytes"] == 64


@pytest.mark.parametrize("header", [
    {"a": {"dtype": "BF16", "shape": [-1, 8], "data_offsets": [0, 64]}},
    {"a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 10**9]}},
    {"a": "x"},
])
def test_bad_headers_refused(tmp_path: Path, header: dict) -> None:
    _write_safetensors(tmp_path / "m.safetensors", header, 64)
    with pytest.raises(ConfigError):
        read_header(tmp_path / "m.safetensors")


def test_header_length_bounded(tmp_path: Path) -> None:
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ConfigError):
        read_header(tmp_path / "m.safetensors")


def test_gpu_auto_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc.sources import localgpu

    monkeypatch.setattr(localgpu, "_from_torch", lambda: None)
    monkeypatch.setattr(localgpu, "_from_nvidia_smi", lambda: None)
    with pytest.raises(KvcalcError) as e:
        localgpu.detect()
    assert e.value.exit_code == 2


def test_probe_budget_rows() -> None:
    log = "tests/data/vllm-logs/dennislee22-qwen2-7b-instruct-gmu0.5-0.10.1.1.log"
    figures, settings = parse_budget(Path(log).read_text())
    assert figures["weights_gib"] == 14.2488 and figures["available_kv_gib"] == 24.83
    s = Settings().with_(gpu="A100-80GB", vllm_version="0.10.1.1", max_model_len=16384, gpu_memory_utilization=0.5,
                         max_num_batched_tokens=2048, sampler="flashinfer")
    rows, _ = budget_rows(resolve("qwen2.5-7b").spec, s, log)
    by = {r.what.split(":")[1].split("(")[0].strip(): r for r in rows}
    assert set(by) == {"weights", "available"} and all(r.info for r in rows)
    assert abs(by["available"].predicted - by["available"].measured) < 0.25 * GIB


def test_parse_budget_reads_the_sampler_and_the_actual_usage_line() -> None:
    text = ("INFO [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k sampling.\n"
            "INFO [gpu_worker.py:391] Free memory on device (23.08/23.53 GiB) on startup. Desired GPU memory utilization is "
            "(0.8, 18.82 GiB). Actual usage is 8.8 GiB for weight, 1.4 GiB for peak activation, 0.02 GiB for non-torch "
            "memory, and 0.68 GiB for CUDAGraph memory.\nINFO Available KV cache memory: 8.60 GiB\n")
    figures, settings = parse_budget(text)
    assert figures == {"weights_gib": 8.8, "torch_peak_gib": 1.4, "non_torch_gib": 0.02, "available_kv_gib": 8.6,
                       "total_gib": 23.53}
    assert settings == {"gpu_memory_utilization": 0.8, "sampler": "flashinfer"}


def test_nvls_buffers_only_on_hopper_nvswitch_with_tp() -> None:
    h100_tp2 = _budget(gpu="H100-80GB", vllm_version="0.19.0", max_model_len=8192, tp=2)["non_torch"]
    a100_tp2 = _budget(gpu="A100-80GB", vllm_version="0.19.0", max_model_len=8192, tp=2)["non_torch"]
    h100_tp1 = _budget(gpu="H100-80GB", vllm_version="0.19.0", max_model_len=8192)["non_torch"]
    assert h100_tp2 - a100_tp2 == 2415919104  # NCCL NVLS (vllm#9699)
    assert h100_tp1 < a100_tp2 < GIB


def test_gpt_oss_120b_mxfp4_weights_on_h100_match_the_vllm_0_10_1_1_log() -> None:
    # vllm-project/vllm#23278 (tests/data/vllm-logs/issue-23278-...): "Model loading took 65.9651 GiB"
    # on one H100 with 0.10.1.1. The wheel pins torch 2.7.1, so Mxfp4MoEMethod._should_use_marlin
    # picks Marlin on sm90 too (mxfp4.py:123-135), whose create_weights pads (mxfp4.py:154-167):
    #   I = round_up(2880, 128) = 2944, H = round_up(2880, 256) = 3072, 128 experts x 36 layers
    #   per layer: values 3 I H / 2 = 13,565,952 x 128 B = 1,736,441,856; scales 3 I H / 32 x 128 = 108,527,616;
    #              bf16 biases (2 I + H) x 2 x 128 = 2,293,760  -> 1,847,263,232 B; x 36 = 66,501,476,352
    #   bf16 rest, 2 B x (attention (5120 + 4096) x 2880 x 36 = 955,514,880 + router 128 x 2880 x 36 = 13,271,040
    #   + norms 2 x 2880 x 36 = 207,360 + embedding and LM head 2 x 201088 x 2880 = 1,158,266,880 + 2880)
    #   = 4,254,526,080; fp32 YaRN table 4096 x 32 positions x 64 x 4 B = 33,554,432 (gpt_oss.py:48-66)
    #   total 70,789,556,864 B = 65.928 GiB (the log: 65.965; the 0.037 left matches the torch allocator's
    #   rounding: each layer's 69 MiB w13 scale tensor holds an unsplit 70 MiB block, 36 MiB in all)
    model = resolve("gpt-oss-120b").spec
    s = Settings().with_(gpu="H100-80GB", vllm_version="0.10.1.1", gpu_memory_utilization=0.9, max_model_len=16384)
    weights = predict(model, s, stage=None)[0]["weights"] / GIB
    assert weights == pytest.approx(65.9651, abs=0.05)
    # the same checkpoint with 0.12.0 on H100: vendored triton_kernels, Triton, no Marlin padding
    s12 = s.with_(vllm_version="0.12.0")
    assert predict(model, s12, stage=None)[0]["weights"] / GIB < 61.0
    # gpt-oss-20b on A100 (Marlin below sm90 in every release): 0.19.0 log 13.72 GiB
    a100 = Settings().with_(gpu="A100-80GB", vllm_version="0.19.0", gpu_memory_utilization=0.65, max_model_len=131072)
    assert predict(resolve("gpt-oss-20b").spec, a100, stage=None)[0]["weights"] / GIB == pytest.approx(13.72, abs=0.05)


def test_mxfp4_marlin_per_release_and_gpu() -> None:
    assert mxfp4_marlin(rules_for("0.10.1.1")[0], 90)  # torch 2.7.1 < 2.8.0
    assert mxfp4_marlin(rules_for("0.11.0")[0], 90)  # no triton_kernels in a pip install
    assert not mxfp4_marlin(rules_for("0.12.0")[0], 90)  # vllm/third_party/triton_kernels
    assert mxfp4_marlin(rules_for("0.12.0")[0], 80) and mxfp4_marlin(rules_for("0.19.0")[0], 120)
    assert not mxfp4_marlin(rules_for("0.11.0")[0], 100) and not mxfp4_marlin(rules_for("0.11.0")[0], 0)


def test_triton_topk_buffer_is_sms_x_vocab_fp32_on_0_17_to_0_20() -> None:
    """vllm==0.19.0 v1/sample/ops/topk_topp_triton.py:1010-1021: P = min(SMs, rows) programs, a cached
    buffer of min(next_pow2(P), SMs) rows x vocab in the fp32 logits' dtype; rows < 8 take the sort."""
    from kvcalc.core.budget_rules import Shapes, profile_peak, topk_sm_buffer

    # H100 SXM, max_num_seqs 1024, Qwen3 vocab 151936: P = 132, next_pow2 = 256, min(256, 132) = 132
    assert find_gpu("H100").sms == 132
    assert topk_sm_buffer(1024, 151936, 132)[0] == 132 * 151936 * 4 == 80_222_208  # 0.0747 GiB
    # 100 rows: P = 100, next_pow2 = 128 <= 132 SMs -> 128 rows
    assert topk_sm_buffer(100, 128256, 132)[0] == 128 * 128256 * 4
    assert topk_sm_buffer(7, 128256, 132)[0] == 0  # PyTorch sort below 8 rows
    # the release lines whose dummy sampler goes through the kernel by default
    assert [rules_for(v)[0].topk_sm_buffer for v in ("0.16.0", "0.17.0", "0.19.0", "0.20.0", "0.21.0", "0.33.0")] == [
        False, True, True, True, False, False]
    # added on the sampler side of the peak
    shapes = Shapes(hidden=4096, intermediate=12288, moe_intermediate=0, experts=0, top_k=0, q_width=4096,
                    kv_width=1024, vocab=151936, dtype_bytes=2)
    base = profile_peak(shapes, 1, 8192, 1024, 14)[0]
    assert profile_peak(shapes, 1, 8192, 1024, 14, scratch=80_222_208)[0] == base + 80_222_208
