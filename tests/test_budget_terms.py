"""Budget terms per release line (core/budget_rules), the local checkpoint header reader,
--gpu auto without a GPU, and the probe's term-by-term comparison."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.core.budget_device import PER_GRAPH, capture_sizes, cudagraph_estimate, flashinfer_workspace
from kvcalc.core.budget_rules import Shapes, default_max_num_seqs, dequant_bytes, sampler_bytes_per_element
from kvcalc.core.gpus import find_gpu
from kvcalc.core.quant import mxfp4_kernel, mxfp4_marlin
from kvcalc.core.vllm_rules import rules_for
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.probe.budget_log import budget_rows, parse_budget
from kvcalc.sources.checkpoint import folder_facts, read_header
from kvcalc.sources.resolve import resolve

GIB = 1 << 30
DATA = Path(__file__).parent / "data"


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


@pytest.mark.parametrize(
    ("device", "entry"),
    [("NVIDIA H100 80GB HBM3", "H100-80GB"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("Tesla T4", "T4"),
     ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA RTX A6000", "RTX-A6000"),
     ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"), ("AMD Instinct MI300X", "MI300X"),
     ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"), ("NVIDIA RTX A5000", "RTX-A5000"), ("NVIDIA A40", "A40"), ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti"), ("NVIDIA L40", "L40"), ("NVIDIA A30", "A30"),
     ("NVIDIA GeForce RTX 4090 D", "RTX-4090-D"), ("NVIDIA GeForce RTX 4080 SUPER", "RTX-4080-SUPER"), ("NVIDIA H20", "H20"),
     ("NVIDIA H800", "H800"), ("NVIDIA GeForce RTX 3060 Ti", "RTX-3060-Ti"), ("Quadro RTX 8000", "Quadro-RTX-8000"),
     # another card than the catalog's shorter name: None, not the RTX 3070 / RTX 5090 / RTX 4060 Ti 16GB
     ("NVIDIA GeForce RTX 3070 Ti", None), ("NVIDIA GeForce RTX 5090 D", None), ("NVIDIA GeForce RTX 4060 Laptop GPU", None),
     ("NVIDIA B200", "B200"),
     # AWS's A10G and the A10 PCIe are two cards (80 and 72 SMs)
     ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10")],
)
def test_device_names_match_the_catalog(device: str, entry: str | None) -> None:
    from kvcalc.core.gpus import match_device

    found = match_device(device)  # names as torch.cuda.get_device_name / nvidia-smi print them
    assert (found.name if found else None) == entry


def test_gpu_auto_takes_the_catalog_rules_of_the_local_card(monkeypatch: pytest.MonkeyPatch) -> None:
    """--gpu auto on an H100 applies the Hopper-only rules (FA3's FULL-graph split accumulators) as
    --gpu H100-80GB does; a card the catalog lacks, with the same total, gets neither."""
    from kvcalc.sources import localgpu

    h100 = find_gpu("H100-80GB")
    spec = resolve("llama-3.1-8b").spec
    args = {"vllm_version": "0.20.1", "max_model_len": 16000, "gpu_memory_utilization": 0.9}
    named_terms, _ = predict(spec, Settings().with_(gpu="H100-80GB", **args))
    for device, same in (("NVIDIA H100 80GB HBM3", True), ("NVIDIA A40", False)):
        monkeypatch.setattr(localgpu, "_from_torch", lambda d=device: (d, h100.memory_bytes, "test"))
        localgpu.detect.cache_clear()  # a new device for each pass of the loop
        auto_terms, _ = predict(spec, Settings().with_(gpu="auto", **args))
        assert (auto_terms["cudagraphs"] == named_terms["cudagraphs"]) is same
        assert (auto_terms["available"] == named_terms["available"]) is same


def test_size_gpu_auto_reads_the_local_card(monkeypatch: pytest.MonkeyPatch, run_json) -> None:
    """`kvcalc size --gpu auto` sizes from the local device's CUDA total and names it; the figure
    here is an A100-SXM4-40GB's deviceQuery total (42,298,834,944 B, tests/data/gpu-totals/SOURCES.md)."""
    from kvcalc.sources import localgpu

    monkeypatch.setattr(localgpu, "_from_torch", lambda: ("NVIDIA A100-SXM4-40GB", 42_298_834_944, "test device"))
    pool = run_json("size", "llama-3.1-8b", "--gpu", "auto", "--vllm-version", "0.11.0")["pool"]
    assert pool["gpu_memory_bytes"] == 42_298_834_944
    assert pool["requested_bytes"] == int(42_298_834_944 * 0.9)  # 0.11: total x utilization, no ceil
    assert pool["budget"][0][0]["source"] == "test device"


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
    # 0.21+ name FlashInfer's sampler off or unusable; the Triton top-k/top-p runs then (the stored L4 and RTX 2080 Ti logs)
    for log in ("set27-llmrouter-llama32-3b-l4-20k-0.27.1.log", "set18-shani-qwen3-0.6b-rtx2080ti-fp16.log"):
        assert parse_budget((Path(__file__).parent / "data" / "vllm-budget" / log).read_text())[1]["sampler"] == "triton"


def test_non_torch_communicators_nvls_and_fusion_per_release() -> None:
    from kvcalc.core.budget_device import non_torch
    from kvcalc.core.vllm_rules import rules_for

    mib = 1 << 20

    def nt(version: str, tp: int, pp: int = 1, sm: int = 90, nvswitch: bool = True) -> int:
        return non_torch(rules_for(version)[0], tp, pp, sm=sm, nvswitch=nvswitch)[0]

    # 0.19.0 on H100, TP 2: snapshot after init_worker_distributed_environment (vllm==0.19.0:
    # v1/worker/gpu_worker.py:263, :282), so only torch's TP group communicator, created by the profile
    # run's logits all_gather (base_device_communicator.py:196), is charged: 0.48 GiB ~ 492 MiB (init snapshots
    # 1.99 - 1.51 GiB); NVLS off for 2 GPUs in NCCL 2.27.5 (nvls.cc:160); fusion workspace 3 x 512 MiB
    assert nt("0.19.0", 2) == 32 * mib + 492 * mib + 3 * 512 * mib
    # TP 4: + NVLS 16 channels x 2 x (128 KiB x 8 steps) x 4 heads = 128 MiB (nvls.cc:147,152,335-337)
    assert nt("0.19.0", 4) == 32 * mib + 492 * mib + 128 * mib + 3 * 512 * mib
    # PP 2: the pynccl PP communicator is in the baseline and the profile run does not communicate
    assert nt("0.19.0", 1, pp=2) == 32 * mib
    # 0.11.0: snapshot after init too (gpu_worker.py:169, :182); no fusion pass by default before 0.17
    assert nt("0.11.0", 2) == 32 * mib + 492 * mib
    # 0.10.2: snapshot before init (gpu_worker.py:175, :193): pynccl TP + EP (always built, parallel_state.py:1160)
    # + torch's TP group + custom all-reduce 2 x 8 MiB
    assert nt("0.10.2", 2) == 32 * mib + 3 * 492 * mib + 16 * mib
    # 0.21.0 ships NCCL 2.28.9 (torch 2.11.0), where NVLS needs only 2 GPUs (nvls.cc:161): 16 x 2 x 1 MiB x 2
    assert nt("0.21.0", 2) == 32 * mib + 492 * mib + 64 * mib + 3 * 512 * mib
    # A100 (sm80): no measured communicator size, the estimate of one ring's connections 4 MiB x 2 x 16 once;
    # no NVLS, no fusion
    assert nt("0.19.0", 2, sm=80) == 32 * mib + 128 * mib
    # a ring connects each rank to its two neighbours only (nccl v2.27.5-1: src/transport/generic.cc:15-18), and the
    # logits all-gather on one PCIe node is a ring (src/graph/tuning.cc:256-258): the same 128 MiB at TP 4 and 8
    assert nt("0.19.0", 4, sm=89, nvswitch=False) == nt("0.19.0", 8, sm=89, nvswitch=False) == 32 * mib + 128 * mib
    # 0.10.2 charges set-up too: the ring + the PP peer + custom all-reduce 2 x 8 MiB (8 x L40S TP 8 logged 0.21 GiB)
    assert nt("0.10.2", 8, sm=89, nvswitch=False) == 32 * mib + 128 * mib + 16 * mib
    assert nt("0.10.2", 2, pp=2, sm=89, nvswitch=False) == 32 * mib + 2 * 128 * mib + 16 * mib
    # the fusion pass takes compute capability 9.0 or the 10.x family (vllm==0.33.0: config/vllm.py:200-201): B300 (10.3)
    # is charged as B200 (10.0) is
    assert nt("0.33.0", 2, sm=103) == nt("0.33.0", 2, sm=100) and nt("0.33.0", 2, sm=120, nvswitch=False) < nt("0.33.0", 2, sm=100)


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
    # the same checkpoint with 0.12.0 on H100: vendored triton_kernels, so the Triton layout, not Marlin's
    # (test_gpt_oss_mxfp4_triton_layout_on_hopper)
    assert mxfp4_kernel(rules_for("0.12.0")[0], 90) == "triton" and mxfp4_kernel(rules_for("0.11.0")[0], 90) == "marlin"
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


def test_llama_4_scout_weights_per_rank_at_tp4_match_the_vllm_0_19_0_log() -> None:
    # llm-d-incubation/llm-d-planner accuracy/results/v0.19.0/logs/meta-llama-llama-4-scout--h100-80gb--tp4pp1dp1--8192.log
    # (commit d3121e0; tests/data/vllm-budget/llm-d-planner-meta-llama-llama-4-scout--...): "Model loading took
    # 53.12 GiB memory" on each of 4 H100s. Hand count per rank, bf16 (2 B), vllm==0.19.0 model code:
    #   decoder layer (llama4.py): qkv (10 + 2 x 2 heads) x 128 x 5120 = 9,175,040; o 1280 x 5120 = 6,553,600;
    #     2 norms 10,240; router (ReplicatedLinear) 5120 x 16 = 81,920; shared expert (always one, :105-125)
    #     3 x 5120 x 8192/4 = 31,457,280; 16 experts 3 x 5120 x 2048 x 16 = 503,316,480 -> 550,594,560 x 48 layers
    #     = 26,428,538,880; embedding + LM head 2 x 202048/4 x 5120 = 517,242,880; final norm 5,120
    #     -> 26,945,786,880 params = 53,891,573,760 B
    #   RoPE cos/sin table (rotary_embedding/base.py:58-63): 10,485,760 positions x 128 x 2 B = 2,684,354,560 B
    #   vision tower, TP-sharded (mllama4.py, mm_encoder_tp_mode "weights"): per layer qkv 1408 x 1056 + 1056,
    #     o 352 x 1408 + 1408, fc1 1408 x 1408 + 1408, fc2 1408 x 1408 + 1408, 2 LayerNorms 5632 = 5,958,304
    #     x 34 = 202,582,336; patch 588 x 352 = 206,976; class 1408; positions 577 x 1408 = 812,416; LayerNorms
    #     5632; adapter 5632 x 1024 + 1024 x 4096 = 9,961,472; projector 4096 x 1280 = 5,242,880
    #     -> 218,813,120 params = 437,626,240 B
    #   total 57,013,554,560 B = 53.0985 GiB (the log: 53.12). kvcalc splits the router by TP (-5,898,240 B).
    #   PyTorch's allocator (core/allocator.py) counts whole blocks where under 1 MiB would be left: qkv 17.5 MiB
    #   takes an 18 MiB block (+0.5 MiB x 48 layers), embedding and LM head 517,242,880 B each take 494 MiB
    #   (+753,664 B each); o (12.5 MiB of 14) is split. +26,673,152 B -> 53.1233 GiB
    slack = 48 * (1 << 19) + 2 * (494 * (1 << 20) - 517_242_880)
    model = resolve("llama-4-scout").spec
    s = Settings().with_(gpu="H100-80GB", vllm_version="0.19.0", gpu_memory_utilization=0.95, max_model_len=8192, tp=4)
    weights = predict(model, s, stage=None)[0]["weights"]
    assert weights == 57_013_554_560 - 5_898_240 + slack
    assert round(weights / GIB, 2) == 53.12
    # the table alone follows max_position_embeddings: Llama-3.1-8B, 131072 x 128 x 2 B = 32 MiB over the layers
    # (every planner Llama-3.1-8B run logs 14.99 GiB; 14.96 without it)
    from kvcalc.core.weights import rope_table_bytes

    llama = resolve("llama-3.1-8b-instruct").spec
    assert rope_table_bytes(llama, llama.arch, 2)[0] == 131072 * 128 * 2


def test_llava_next_mistral_weights_count_the_clip_tower_vllm_0_10_2_builds() -> None:
    # tests/data/vllm-budget/gh-llava-v1.6-mistral-7b-h100-0.10.2.log: "Model loading took 14.0786 GiB" (TP 1).
    # Hand count, 2 B per parameter, vllm==0.10.2 model code, config tests/data/vllm-budget/configs/
    # llava-v1.6-mistral-7b-hf.json (CLIP hidden 1024, intermediate 4096, 16 heads, 24 layers, patch 14, image 336):
    #   CLIP layers built: vision_feature_layer -2 -> 24 - 2 + 1 = 23 (llava.py:437-448); per layer (clip.py:90-200)
    #     qkv 1024 x 3072 + 3072, out_proj 1024 x 1024 + 1024, fc1 1024 x 4096 + 4096, fc2 4096 x 1024 + 1024,
    #     two LayerNorms 4 x 1024 -> 12,596,224; x 23 = 289,713,152
    #   embeddings (clip.py:58-71): class 1024 + patch conv 3 x 14 x 14 x 1024 = 602,112 + positions
    #     (24^2 + 1) x 1024 = 590,848; pre_layrnorm 2048 (:282); no post_layernorm -> 1,196,032
    #   projector (llava.py:96-117, biases: transformers' default True): 1024 x 4096 + 4096 + 4096 x 4096 + 4096
    #     = 20,979,712; image_newline 4096 (llava_next.py:259-260)
    #   -> 311,892,992 vision parameters = 623,785,984 B
    #   decoder (MistralForCausalLM -> LlamaForCausalLM, registry.py:112): per layer qkv 4096 x 6144, o 4096 x 4096,
    #     gate_up + down 3 x 4096 x 14336, two norms 8192 = 218,112,000 x 32 = 6,979,584,000; embedding + LM head
    #     2 x 32064 x 4096 = 262,668,288; final norm 4096 -> 7,242,256,384 = 14,484,512,768 B
    #   RoPE cos/sin table (llama.py:228-236, model dtype): 32768 positions x 128 x 2 B = 8,388,608
    #   total 15,116,687,360 B = 14.07851 GiB (the log: 14.0786; the 0.0001 GiB left is not derived)
    from kvcalc.core.towers import llava_clip_params

    model = resolve("tests/data/vllm-budget/configs/llava-v1.6-mistral-7b-hf.json").spec
    assert llava_clip_params(model.arch, 4096, 1) == 23 * 12_596_224 + 1_196_032 + 20_979_712 + 4096 == 311_892_992
    s = Settings().with_(gpu="H100-80GB", vllm_version="0.10.2", max_model_len=4096, max_num_batched_tokens=16384)
    weights = predict(model, s, stage=None)[0]["weights"]
    assert weights == 14_484_512_768 + 623_785_984 + 8_388_608 == 15_116_687_360
    assert weights / GIB == pytest.approx(14.0786, abs=0.0002)
    # TP 2: qkv 8 of 16 heads (1024 x 1536 + 1536), out_proj 512 x 1024 + 1024, fc1 1024 x 2048 + 2048, fc2 2048 x
    # 1024 + 1024, LayerNorms 4096 -> 6,301,184 x 23 = 144,927,232; embeddings whole 1,196,032; linear_1 1024 x 2048
    # + 2048, linear_2 2048 x 4096 + 4096 (RowParallel: bias whole) = 10,491,904; image_newline 4096
    assert llava_clip_params(model.arch, 4096, 2) == 144_927_232 + 1_196_032 + 10_491_904 + 4096
    # vision_feature_layer -1 builds all 24 layers; a list builds up to the deepest and widens LLaVA-NeXT's
    # linear_1 (llava_next.py:235-245); LLaVA (llava.py:545) keeps the vision hidden size and has no image_newline
    last = dict(model.arch, vision_feature_layer=-1)
    assert llava_clip_params(last, 4096, 1) == 311_892_992 + 12_596_224
    multi = dict(model.arch, vision_feature_layer=[-2, -5])
    assert llava_clip_params(multi, 4096, 1) == 311_892_992 + 1024 * 4096
    llava = dict(model.arch, wrapper_architectures=["LlavaForConditionalGeneration"])
    assert llava_clip_params(llava, 4096, 1) == 311_892_992 - 4096
    assert llava_clip_params(dict(model.arch, multimodal_projector_bias=False), 4096, 1) == 311_892_992 - 2 * 4096
    # a SigLIP tower, or a feature layer beyond the tower (vLLM refuses it: clip.py:292-296), is not counted
    siglip = dict(model.arch, vision_config=dict(model.arch["vision_config"], model_type="siglip_vision_model"))
    assert llava_clip_params(siglip, 4096, 1) == 0
    assert llava_clip_params(dict(model.arch, vision_feature_layer=30), 4096, 1) == 0


def test_0_20_1_keeps_the_triton_topk_buffer_that_0_21_0_drops() -> None:
    # vllm==0.20.1: envs.py:717-721 VLLM_USE_FLASHINFER_SAMPLER defaults to None, so the dummy sampler
    # (top_p 0.9, top_k vocab - 1: v1/worker/gpu_model_runner.py:5646-5647) runs the Triton kernel
    # (v1/sample/ops/topk_topp_sampler.py:251) and caches its fp32 buffer (topk_topp_triton.py:1015-1019);
    # vllm==0.21.0: envs.py:726-730 defaults it to True (FlashInfer, no buffer).
    # Hand count, Llama-3.1-8B on H100 SXM (132 SMs), 1024 seqs, 8192 batched tokens (serve defaults):
    #   sampler 1024 x 128256 x 14 B = 1,838,678,016 + retained hidden states 8192 x 4096 x 2 B = 67,108,864
    #   = 1,905,786,880 (the forward, 8192 x (3 x 14336 + 2 x 4096) x 2 B = 838,860,800, is lower);
    #   buffer min(next_pow2(min(132, 1024)), 132) = 132 rows x 128256 x 4 B = 67,719,168
    kw = dict(gpu="H100-80GB", max_model_len=16000)
    assert _budget(vllm_version="0.21.0", **kw)["torch_peak"] == 1_905_786_880
    assert _budget(vllm_version="0.20.1", **kw)["torch_peak"] == 1_905_786_880 + 67_719_168
    assert _budget(vllm_version="0.20.0", **kw)["torch_peak"] == 1_905_786_880 + 67_719_168
    assert rules_for("0.20.2")[0].topk_sm_buffer and not rules_for("0.21.0")[0].topk_sm_buffer
    # the two lines differ in nothing else but the path's name (same 14 B per element: FlashInfer's
    # top-k/top-p and the Triton kernel both hold bf16 logits, an fp32 copy, masked logits and probs)
    a, b = rules_for("0.20.1")[0], rules_for("0.21.0")[0]
    assert [k for k in a.__dataclass_fields__ if getattr(a, k) != getattr(b, k)] == [
        "first", "last", "sampler_path", "topk_sm_buffer"
    ]
    assert "Triton" in a.sampler_path and "FlashInfer" in b.sampler_path and a.sampler_bytes == b.sampler_bytes == 14


def test_model_runner_v2_default_architectures_0_22_to_0_28() -> None:
    # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (config/vllm.py): 0.22.0 Qwen3 only; 0.23.0 + Llama, Mistral;
    # 0.24.0 + DeepSeek-V2, Qwen2-MoE, GraniteMoE; 0.25.0 drops Qwen3 and Llama. Under V2 the dummy sampler
    # keeps top_k = vocab, top_p = 1.0 (vllm==0.24.0: v1/worker/gpu/sample/states.py:31-35): bf16 logits 2 B
    # + fp32 copy 4 B per element (sample/sampler.py:157), and profile_cudagraph_memory returns 0
    # (v1/worker/gpu/model_runner.py:684-686). RTX 4090 (< 70 GiB): 256 seqs, 2048 batched tokens
    # (vllm==0.24.0: engine/arg_utils.py:2416-2422). Qwen3-8B (hidden 4096, intermediate 12288, vocab 151936):
    #   sampler 256 x 151936 x 6 B = 233,373,696 + retained 2048 x 4096 x 2 B = 16,777,216 = 250,150,912
    #   (the forward, 2048 x (3 x 12288 + 2 x 4096) x 2 B = 184,549,376, is lower)
    # (warm compile cache: the cold compile's autotune examples, 1.19 GiB here, would hide the sampler;
    # test_cold_compile_autotunes_on_a_copy_of_the_embedding_table covers them)
    qwen = resolve("qwen3-8b").spec
    s = Settings().with_(gpu="RTX-4090", gpu_memory_utilization=0.92, max_model_len=32768, compile_cache="warm")
    v24 = predict(qwen, s.with_(vllm_version="0.24.0"))[0]
    assert v24["torch_peak"] == 250_150_912 and v24["cudagraphs"] == 0
    # 0.27.1 runs V2 for Qwen3 too (not MoE); the log's "Using FlashInfer for top-p & top-k sampling" passed as
    # --sampler flashinfer changes nothing there: V2's dummy run applies no top-k/top-p. From 0.26 it keeps the
    # logits in bf16 (vllm==0.27.0: v1/worker/gpu/sample/sampler.py:155-159): 256 x 151936 x 2 B + the retained
    # states 16,777,216 + Gumbel tables 256 x 149 x 12 B = 95,026,176, below the forward, which is the peak
    v27 = predict(qwen, s.with_(vllm_version="0.27.1", sampler="flashinfer"))[0]
    assert v27["torch_peak"] == 184_549_376 and v27["cudagraphs"] == 0
    # 0.21.0: V1 runner, FlashInfer sampler 14 B per element, CUDA-graph estimate subtracted
    v21 = predict(qwen, s.with_(vllm_version="0.21.0"))[0]
    assert v21["torch_peak"] == 256 * 151936 * 14 + 16_777_216 and v21["cudagraphs"] > 0
    # Llama (LlamaForCausalLM, dense): V1 in 0.22 (not listed), V2 in 0.23 and 0.24 (listed), and V2 in 0.25-0.28
    # too, where any model that is not MoE or hybrid takes V2 (_is_default_v2_model_runner_model, vllm==0.25.0:
    # config/vllm.py:556-574, `... or not model_config.is_moe`; 0.28.0: :691-712); 0.21: V1 for all
    versions = ("0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0")
    graphs = [_budget(gpu="RTX-4090", max_model_len=8192, vllm_version=v)["cudagraphs"] for v in versions]
    assert graphs[0] > 0 and graphs[1] > 0 and graphs[2:] == [0] * 6
    # 0.22/0.23 take V2 only for an unquantized listed model (vllm==0.23.0: config/vllm.py:538-553): FP8 Llama is V1
    assert _budget(gpu="RTX-4090", max_model_len=8192, vllm_version="0.23.0", quantization="fp8")["cudagraphs"] > 0
    # 0.25-0.28: an MoE model not on the list (Qwen3MoeForCausalLM) and a hybrid (Qwen3-Next) stay on V1
    moe = predict(resolve("qwen3-30b-a3b").spec, Settings().with_(gpu="H100", vllm_version="0.27.0", max_model_len=8192))[0]
    assert moe["cudagraphs"] > 0
    nxt = predict(resolve("qwen3-next-80b-a3b-thinking").spec,
                  Settings().with_(gpu="H200", vllm_version="0.26.0", max_model_len=8192, tp=2))[0]
    assert nxt["cudagraphs"] > 0
    # the logged figure (tests/data/vllm-budget/thunderagent-qwen3-8b-rtx4090-u0.92-0.24.0.log): 6.03 GiB, which the
    # warm-cache prediction meets (the log has no timestamps to tell the cache state); a cold cache would charge the
    # embedding kernel's autotune examples instead of the sampler run:
    #   151936 x 4096 x 2 + 2 x 2048 x 4096 x 2 + 2048 x 4 + 4096 x 2 = 1,278,230,528 B in place of 250,150,912
    assert v24["available"] / GIB == pytest.approx(6.03, abs=0.25)
    cold = predict(qwen, s.with_(vllm_version="0.24.0", compile_cache="cold"))[0]
    assert cold["torch_peak"] == 1_278_230_528 and v24["available"] - cold["available"] == 1_278_230_528 - 250_150_912


def test_model_runner_v2_dummy_sampler_0_29_to_0_32_keeps_the_logits_in_the_model_dtype() -> None:
    # V2 for every architecture from 0.29 (vllm==0.29.0: config/vllm.py:645-677). _dummy_sampler_run builds
    # InputBatch.make_dummy and calls the sampler with no request added (v1/worker/gpu/model_runner.py:832-843), so
    # needs_logits_processing stays all False (np.zeros, sample/sampler.py:61) and apply_sampling_params returns the
    # bf16 logits without the fp32 copy (:218-219; 0.31.0 :235-236); top_k/top_p are None (initial top_k = vocab,
    # top_p = 1.0: sample/states.py:32-34), so FlashInfer and top-k/top-p are skipped and gumbel_sample runs on the
    # logits, allocating rows x cdiv(vocab, 1024) int64 argmax + fp32 max (gumbel.py:275-279).
    # Hand count, Qwen3-14B (hidden 5120, intermediate 17408, vocab 151936), 1024 batched tokens, 1024 seqs:
    #   retained hidden states 1024 x 5120 x 2 B = 10,485,760; logits 1024 x 151936 x 2 B = 311,164,928;
    #   Gumbel tables 1024 x 149 x (8 + 4) B = 1,830,912 -> 323,481,600
    #   (the forward, 1024 x (3 x 17408 + 2 x 5120) x 2 B = 127,926,272, is lower)
    # (warm compile cache, as in the test above)
    qwen = resolve(str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen3-14b.json")).spec
    s = Settings().with_(gpu="L40S", max_model_len=40960, max_num_batched_tokens=1024, max_num_seqs=1024, compile_cache="warm")
    for v in ("0.29.0", "0.31.0", "0.32.0"):
        assert predict(qwen, s.with_(vllm_version=v))[0]["torch_peak"] == 10_485_760 + 311_164_928 + 1_830_912, v


def test_model_runner_v2_0_33_warmup_pass_runs_the_fp32_pipeline_with_flashinfer_or_triton() -> None:
    # 0.33's _dummy_sampler_run gives every dummy request SamplingParams.for_sampler_warmup() (top_k 50, top_p 0.9,
    # penalties, logit bias; vllm==0.33.0: sampling_params.py:1477-1493) and runs the sampler again
    # (v1/worker/gpu/model_runner.py:1008-1014). Live at the peak: the bf16 logits (2 B) and their fp32 copy
    # (sample/sampler.py:242); with FlashInfer's sampler (CUDA, capability 8.0-12.1, > 16 SMs: v1/sample/ops/
    # topk_topp_sampler.py:118-146, attention/backends/flashinfer.py:696-704) top_k is a per-row tensor, so
    # flashinfer-python 0.7.2.post1 (pinned by the 0.33.0 wheel) masks into a new fp32 tensor and softmaxes into another
    # (sampling.py:1794-1795, :676) under a 1 MiB row-states buffer (:2231-2238). Otherwise the Triton top-k/top-p works
    # in place with its cached min(next_pow2(min(SMs, rows)), SMs) x vocab fp32 buffer (topk_topp_triton.py:1688-1697)
    # and Gumbel adds rows x cdiv(vocab, 1024) x 12 B (gumbel.py:384-388).
    # Hand count, Qwen3-14B (hidden 5120, vocab 151936), 1024 batched tokens, 1024 seqs: logits 1024 x 151936 =
    # 155,582,464 elements; retained hidden states 1024 x 5120 x 2 B = 10,485,760.
    qwen = resolve(str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen3-14b.json")).spec
    s = Settings().with_(
        gpu="L40S", max_model_len=40960, max_num_batched_tokens=1024, max_num_seqs=1024, compile_cache="warm",
        vllm_version="0.33.0",
    )
    # L40S (capability 8.9, 142 SMs): FlashInfer, 155,582,464 x 14 B = 2,178,154,496 + 10,485,760 + 1,048,576
    assert predict(qwen, s)[0]["torch_peak"] == 2_189_688_832
    # PyTorch's sort is not taken while Triton exists (ops/topk_topp_sampler.py:515-518): --sampler native changes nothing
    assert predict(qwen, s.with_(sampler="native"))[0]["torch_peak"] == 2_189_688_832
    # VLLM_USE_FLASHINFER_SAMPLER=0: 155,582,464 x 6 B = 933,494,784 + 10,485,760
    #   + Triton buffer min(256, 142) = 142 x 151936 x 4 B = 86,299,648 + Gumbel 1024 x 149 x 12 B = 1,830,912
    assert predict(qwen, s.with_(sampler="triton"))[0]["torch_peak"] == 1_032_111_104
    # MI300X (ROCm: no FlashInfer sampler; 304 CUs): 933,494,784 + 10,485,760 + 304 x 151936 x 4 B = 184,754,176
    #   + 1,830,912
    assert predict(qwen, s.with_(gpu="MI300X"))[0]["torch_peak"] == 1_130_565_632
    # T4 (capability 7.5, outside 8.0-12.1; 40 SMs), Qwen3-0.6B (hidden 1024, vocab 151936), 256 seqs:
    #   256 x 151936 x 6 B = 233,373,696 + retained 1024 x 1024 x 2 B = 2,097,152 + buffer min(64, 40) = 40 x 151936
    #   x 4 B = 24,309,760 + Gumbel 256 x 149 x 12 B = 457,728 (the forward, 1024 x (3 x 3072 + 2 x 1024) x 2 B, is lower)
    small = resolve("qwen3-0.6b").spec
    assert predict(small, s.with_(gpu="T4", max_num_seqs=256))[0]["torch_peak"] == 260_238_336
    # with the serve defaults on an L40S (2048 tokens, 256 seqs) the forward is the peak:
    # 2048 x (3 x 17408 + 2 x 5120) x 2 B = 255,852,544
    default = Settings().with_(gpu="L40S", max_model_len=40960, vllm_version="0.29.0", compile_cache="warm")
    assert predict(qwen, default)[0]["torch_peak"] == 255_852_544


def test_pp_receive_buffers_charged_on_every_stage_but_the_first_with_the_v1_runner() -> None:
    # vllm==0.19.0: v1/worker/gpu_model_runner.py:5437-5451, a rank other than the first creates
    # self.intermediate_tensors in the profile run's _dummy_run: torch.zeros (max_num_tokens, hidden)
    # for "hidden_states" and "residual" (models/llama.py:393-395, models/utils.py:694-705).
    # Hand count, Llama-3.1-8B bf16 on H100, 8192 batched tokens, 1024 seqs (0.19.0 defaults):
    #   receive buffers 2 x 8192 x 4096 x 2 B = 134,217,728
    #   forward 8192 x (3 x 14336 + 2 x 4096) x 2 B = 838,860,800
    #   sampler side: 1024 x 128256 x 14 B = 1,838,678,016 + retained 8192 x 4096 x 2 B = 67,108,864
    #     + Triton top-k/top-p buffer 132 x 128256 x 4 B = 67,719,168 -> 1,973,506,048
    #   (warm compile cache; the cold compile's examples on the first stage are asserted at the end)
    def peak(version: str, pp: int, stage: int, cache: str = "warm") -> int:
        s = Settings().with_(gpu="H100-80GB", vllm_version=version, max_model_len=8192, pp=pp, compile_cache=cache)
        return predict(resolve("llama-3.1-8b").spec, s, stage=stage)[0]["torch_peak"]

    bufs = 2 * 8192 * 4096 * 2
    forward = 8192 * (3 * 14336 + 2 * 4096) * 2
    sampler_side = 1024 * 128256 * 14 + 8192 * 4096 * 2 + 132 * 128256 * 4
    assert peak("0.19.0", 1, 0) == sampler_side
    assert peak("0.19.0", 2, 0) == forward  # the first rank receives nothing
    assert peak("0.19.0", 2, 1) == sampler_side + bufs  # the log: 2.01 GiB (PP 1: 1.89)
    assert peak("0.19.0", 4, 0) == forward
    assert peak("0.19.0", 4, 1) == peak("0.19.0", 4, 2) == forward + bufs
    assert peak("0.19.0", 4, 3) == sampler_side + bufs
    # model runner V2 (0.29+) creates them in load_model, before the profiling window
    # (vllm==0.29.0: v1/worker/gpu/model_runner.py:480-489): charged nowhere
    assert peak("0.29.0", 2, 1) == peak("0.29.0", 1, 0)
    assert peak("0.29.0", 4, 1) == peak("0.29.0", 4, 0) == forward
    # ... and from 0.27 the free-memory delta counts them among the memory consumed beyond the weights
    s29 = Settings().with_(gpu="H100-80GB", vllm_version="0.29.0", max_model_len=8192, pp=2, compile_cache="warm")
    llama = resolve("llama-3.1-8b").spec
    first, last = (predict(llama, s29, stage=k)[0]["non_torch"] for k in (0, 1))
    # the last stage also holds V2's penalty state: 1024 x 128256 x 4 B + 1024 x cdiv(128256, 32) x 4 B
    assert last - first == bufs + 1024 * 128256 * 4 + 1024 * 4008 * 4
    # a cold compile on the first stage (the default): the embedding kernel's autotune examples,
    # 128256 x 4096 x 2 + 2 x 8192 x 4096 x 2 + 8192 x 4 + 4096 x 2 = 1,184,931,840 B, above the forward;
    # the planner's PP 2 and PP 4 logs print 1.10 GiB for stage 0 (torch peak memory increase,
    # tests/data/vllm-budget/CALIBRATION.json planner-llama-3.1-8b-h100x2-pp2-0.19.0)
    assert peak("0.19.0", 2, 0, "cold") == peak("0.19.0", 4, 0, "cold") == 1_184_931_840
    assert round(1_184_931_840 / GIB, 2) == 1.10
    assert peak("0.19.0", 2, 1, "cold") == peak("0.19.0", 2, 1)  # only the stage with the embedding compiles it


def test_the_cuda_graph_estimate_of_a_release_that_does_not_subtract_it_is_not_compared() -> None:
    # vLLM 0.19 prints "Estimated CUDA graph memory: 0.84 GiB total" (tests/data/vllm-budget/llm-d-planner-meta-llama-
    # llama-3-1-8b--h100-80gb--tp1pp1dp1--16384.log) but does not take it out of the KV budget (0.20 does): kvcalc's term
    # is 0 there, and a row "0 vs 0.84" would read as an error. 0.20 subtracts it: the row is kept.
    from kvcalc.app.budget_check import compare

    for version, kept in (("0.19.0", False), ("0.20.0", True)):
        s = Settings().with_(gpu="H100-80GB", vllm_version=version, max_model_len=16384)
        predicted, sources = predict(resolve("llama-3.1-8b").spec, s)
        rows = compare({"cudagraph_gib": 0.84, "available_kv_gib": 58.11}, predicted, sources)
        assert [r.term for r in rows] == (["cudagraphs", "available"] if kept else ["available"]), version


def _parameters(model: str) -> int:
    from kvcalc.core.plan import ParallelPlan
    from kvcalc.core.weights import estimate_weights
    from kvcalc.sources.resolve import resolve

    return estimate_weights(resolve(model).spec, ParallelPlan()).parameters


def test_tied_lm_head_by_the_config_class_default(tmp_path: Path) -> None:
    """Gemma 3, StarCoder2 and Falcon configs that leave out tie_word_embeddings are tied (their transformers
    config classes default it to True; vLLM ties on it), so the LM head adds no parameters."""
    cfg = json.loads((Path(__file__).parent.parent / "presets" / "gemma-3-1b-it.json").read_text())
    cfg = cfg.get("config", cfg)
    assert "tie_word_embeddings" not in cfg
    absent, untied = tmp_path / "absent.json", tmp_path / "untied.json"
    absent.write_text(json.dumps(cfg))
    untied.write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    assert _parameters(str(untied)) - _parameters(str(absent)) == cfg["vocab_size"] * cfg["hidden_size"]
    # falcon-7b by hand: per layer query_key_value 4544 x (4544 + 2 x 64) (multi-query), dense 4544 x 4544, a plain
    # GELU MLP 4544 x 18176 x 2, one LayerNorm (weight + bias); the tied 65024 x 4544 embedding; the final LayerNorm
    layer = 4544 * (4544 + 128) + 4544 * 4544 + 2 * 4544 * 18176 + 2 * 4544
    by_hand = 32 * layer + 65024 * 4544 + 2 * 4544
    assert by_hand == 6_921_720_704
    assert abs(_parameters("falcon-7b") - by_hand) <= 2 * 4544  # kvcalc counts one vector for the final norm


def test_fa3_split_accumulators_in_the_full_graph_estimate_on_hopper() -> None:
    # Llama-3.1-8B on H100 (FA3), 0.20.1 defaults: max_num_seqs 1024, mnbt 8192, so 51 sizes up to 512 and
    # FULL graphs for all 51. FA3 with num_splits 32: out_accum 32 x 32 heads x 512 x 128 x 4 B and
    # softmax_lse_accum 32 x 32 x 512 x 4 B, held once by the warm-up and once by the capture; then
    # 3.4 MiB (3,565,158 B) per graph for the 102 graphs (budget_device.PER_GRAPH, measured from vLLM's own estimates).
    by_hand = 2 * (32 * 32 * 512 * 128 * 4 + 32 * 32 * 512 * 4) + 102 * 3_565_158
    h100 = _budget(gpu="H100-80GB", vllm_version="0.20.1", max_model_len=16384)
    assert h100["cudagraphs"] == by_hand
    # vLLM 0.19 printed its own estimate for this run, 0.84 GiB (tests/data/vllm-budget/llm-d-planner-meta-llama-
    # llama-3-1-8b--h100-80gb--tp1pp1dp1--16384.log); without the accumulators kvcalc said 0.25 (this log is one of
    # the six the per-graph figure is the median of, so only the accumulators are checked independently here)
    assert abs(by_hand / GIB - 0.84) < 0.05
    # A100 runs FA2 (no fixed split count): the largest piecewise graph's activations, warm-up + capture:
    # 2 x 512 tokens x (3 x 14336 MLP + 2 x 4096 residual/hidden) x 2 B, and FULL graphs only up to 256
    # (max_num_seqs 256 on a 40 GB card): 51 + 35 graphs
    a100 = _budget(gpu="A100-40GB", vllm_version="0.20.1", max_model_len=16384)
    assert a100["cudagraphs"] == 2 * 512 * (3 * 14336 + 2 * 4096) * 2 + 86 * 3_565_158
    # a backend other than FlashAttention asked for: no accumulators
    # (FlashInfer instead: its 394 MiB workspace and the 20 MiB segment of the first wrapper's int workspace are the
    # first FULL sample, larger than the activations' 104 MiB)
    fi = _budget(gpu="H100-80GB", vllm_version="0.20.1", max_model_len=16384, attention_backend="FLASHINFER")
    assert fi["cudagraphs"] == (394 + 20) * 2**20 + 102 * 3_565_158


def test_chunked_local_attention_keeps_piecewise_graphs_only() -> None:
    # Llama 4's chunked local attention reports AttentionCGSupport.NEVER, so vLLM falls back to PIECEWISE
    # (vllm==0.20.1: model_executor/layers/attention/chunked_local_attention.py:42-49, config/compilation.py:1345-1360)
    from kvcalc.app.budget_check import predict as budget_predict

    s = Settings().with_(gpu="H100-80GB", vllm_version="0.20.1", tp=4, max_model_len=8192)
    _, sources = budget_predict(resolve("llama-4-scout-17b-16e-instruct").spec, s)
    assert "PIECEWISE 51 + FULL 0" in sources["cudagraphs"]


def test_fp8_block_scales_under_marlin_on_gpus_without_fp8() -> None:
    # An A100 (compute capability 8.0) has no FP8 units: vLLM runs FP8 weights through Marlin, which turns the
    # 128 x 128 fp32 block scales into one bf16 scale per 128 inputs of every output (marlin_utils_fp8.py:174-186,
    # :299-309). Qwen3-Coder-30B-A3B-FP8, per layer: attention 2048 x 4096 + 2 x 2048 x 512 + 4096 x 2048, the router
    # 2048 x 128 (kvcalc counts it with the layer) and 128 experts x 3 x 2048 x 768; 48 layers
    from kvcalc.core.weights import quant_bytes

    block = {"weight_block_size": [128, 128]}
    assert quant_bytes(block, "fp8", 2, fp8_marlin=True)[0] == 1 + 2 / 128
    assert quant_bytes(block, "fp8", 2)[0] == 1 + 4 / (128 * 128)
    per_layer = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2048 * 128 + 128 * 3 * 2048 * 768
    extra = 48 * per_layer * (2 / 128 - 4 / (128 * 128))
    cfg = str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen3-coder-30b-a3b-instruct-fp8.json")
    model = resolve(cfg).spec
    a100, h100 = (
        predict(model, Settings().with_(gpu=g, vllm_version="0.19.1", max_model_len=32768))[0]["weights"]
        for g in ("A100-40GB", "H100-80GB")
    )
    assert abs((a100 - h100) - extra) < 64
    # vLLM 0.19.1 on an A100-SXM4-40GB logs "Model loading took 29.54 GiB" for it
    # (tests/data/vllm-budget/durango-qwen3coder30b-fp8-a100-40g-v0191.log); the fp32 block scales alone give 29.08
    assert round(a100 / GIB, 2) == 29.51 and round(h100 / GIB, 2) == 29.08


def test_gemma3_builds_a_second_rope_table_for_its_sliding_layers() -> None:
    # gemma-3-1b-it: 22 of 26 layers slide (default RoPE at rope_local_base_freq), the others use rope_theta: two
    # get_rope keys, two tables of 32768 positions x head_dim 256 x 2 B (vllm==0.19.0: models/gemma3.py:168-186)
    from kvcalc.core.plan import ParallelPlan
    from kvcalc.core.weights import rope_table_bytes

    spec = resolve("gemma-3-1b-it").spec
    assert rope_table_bytes(spec, spec.arch, 2)[0] == 2 * 32768 * 256 * 2
    # vLLM 0.13.0 logs "Model loading took 1.9148 GiB" (tests/data/vllm-budget/eole-gemma3-1b-5090-v013-cg.log)
    from kvcalc.core.weights import estimate_weights

    assert round(estimate_weights(spec, ParallelPlan()).bytes_per_stage[0] / GIB, 3) == 1.915


def test_usage_context_batch_defaults(run) -> None:
    """vLLM's batch defaults depend on how it was started (get_batch_defaults; vllm==0.11.0 engine/arg_utils.py):
    on an H100 (>= 70 GiB, not A100) `vllm serve` takes 8192 batched tokens and 1024 seqs, the LLM class 16384 and
    1024; LLMEngine built directly has no entry there and keeps SchedulerConfig's 2048 tokens and 128 seqs. On an
    L40S (< 70 GiB) serve takes 2048, the LLM class 8192. Engine context on Llama-3.1-8B, 0.11.0 (native sort,
    38 B per element): 128 x 128256 x 38 + 2048 retained states x 4096 x 2 B = 640,614,400 B of torch peak."""
    base = {"vllm_version": "0.11.0", "max_model_len": 16000}
    terms = {u: _budget(gpu="H100-80GB", usage_context=u, **base) for u in ("serve", "llm", "engine")}
    assert terms["engine"]["torch_peak"] == 640_614_400
    # serve and the LLM class both run 1024 dummy rows; the retained hidden states follow the batched tokens
    assert terms["llm"]["torch_peak"] - terms["serve"]["torch_peak"] == (16384 - 8192) * 4096 * 2
    code, out, err = run("size", "llama-3.1-8b", "--gpu", "L40S", "--usage-context", "llm", "--format", "json")
    assert code == 0 and json.loads(out)["pool"]["max_num_batched_tokens"] == 8192
    code, out, err = run("size", "llama-3.1-8b", "--gpu", "H100-80GB", "--usage-context", "llm", "--format", "json")
    assert code == 0 and json.loads(out)["pool"]["max_num_batched_tokens"] == 16384
    code, _, err = run("size", "llama-3.1-8b", "--gpu", "H100-80GB", "--usage-context", "offline")
    assert code == 2 and "--usage-context 'offline' is not known; valid: serve, llm, engine" in err


def test_fp8_w8a8_mlp_activation_is_fp8_under_compile() -> None:
    # Llama-3.1-70B with --quantization fp8 on an RTX PRO 6000 (compute capability 12.0, FP8 units), vLLM 0.23.0,
    # LLM class: 16384 batched tokens. The profile forward's widest moment is the MLP: gate_up out (2 x 28672, bf16)
    # + the SiLU-and-mul output, which the FP8 down projection takes as FP8 (1 B, fused with its quantization under
    # torch.compile) + residual and hidden (2 x 8192, bf16). By hand: 16384 x (2 x 28672 x 2 + 28672 x 1 + 2 x 8192 x 2)
    # = 2,885,681,152 B; eager (no fusion) keeps the bf16 activation: 16384 x (3 x 28672 x 2 + 2 x 8192 x 2).
    # A public start with these settings (satyan0/stress-testing-gpu results/BASELINE.md @ e92e37bd, held-out set 16)
    # logs 14.54 GiB available at utilization 0.9; with the bf16 activation kvcalc gave 14.09 (-0.45), with FP8 14.55.
    base = dict(gpu="RTX-PRO-6000", vllm_version="0.23.0", max_model_len=16384, quantization="fp8", usage_context="llm")
    spec = resolve("llama-3.1-70b").spec
    compiled, _ = predict(spec, Settings().with_(gpu_memory_utilization=0.9, **base))
    assert compiled["torch_peak"] == 16384 * (2 * 28672 * 2 + 28672 * 1 + 2 * 8192 * 2) == 2_885_681_152
    eager, _ = predict(spec, Settings().with_(gpu_memory_utilization=0.9, enforce_eager=True, **base))
    assert eager["torch_peak"] == 16384 * (3 * 28672 * 2 + 2 * 8192 * 2)
    assert abs(compiled["available"] / GIB - 14.54) <= 0.25
    a100, _ = predict(
        spec, Settings().with_(**{**base, "gpu": "A100-80GB"}, gpu_memory_utilization=0.95, max_num_batched_tokens=16384)
    )
    assert a100["torch_peak"] >= 16384 * (3 * 28672 * 2 + 2 * 8192 * 2)  # sm80: Marlin, weight-only, bf16 activations


def test_fp4_checkpoints_cost_half_a_byte_and_a_scale_byte_per_group(tmp_path: Path) -> None:
    # NVFP4: two 4-bit weights a byte and one FP8 scale per 16 (vLLM's CompressedTensorsW4A4Fp4 weight (N, K/2) uint8,
    # weight_scale (N, K/16) float8_e4m3fn), 0.5 + 1/16 B; MXFP4 in compressed-tensors: group 32, 0.5 + 1/32 B.
    from kvcalc.core.weights import quant_bytes

    nvfp4 = {"config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}
    assert quant_bytes(nvfp4, "compressed-tensors", 2)[:2] == (0.5625, 0.5625)
    mxfp4 = {"config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 32}}}}
    assert quant_bytes(mxfp4, "compressed-tensors", 2)[0] == 0.53125
    assert quant_bytes({"quant_algo": "NVFP4", "group_size": 16}, "modelopt", 2)[0] == 0.5625
    assert quant_bytes({"quant_algo": "FP8"}, "modelopt", 2)[0] == 1.0
    # a multimodal wrapper keeps quantization_config at its top level, where vLLM reads it
    cfg = json.loads((Path(__file__).parent / "data" / "vllm-budget" / "configs" / "gemma-3-4b-it.reconstructed.json").read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "config_groups": nvfp4["config_groups"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert resolve(str(path)).spec.arch["quantization_config"]["quant_method"] == "compressed-tensors"


def test_modelopt_nvfp4_activation_is_not_fp8() -> None:
    # ModelOpt names FP8 and NVFP4 checkpoints alike (quant_method "modelopt"); only quant_algo FP8 feeds the MLP
    # activation to an FP8 GEMM
    from kvcalc.core.budget_rules import fp8_mlp_activation

    fp8 = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}
    nvfp4 = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}}
    assert fp8_mlp_activation(fp8, None, 90, True)
    assert not fp8_mlp_activation(nvfp4, None, 100, True)


def test_flashinfer_full_graphs_carry_its_workspace_in_the_first_sample() -> None:
    """FlashInfer's FULL graphs under model runner V1: the profiling's fresh metadata builder first allocates the
    394 MiB float workspace, and the first decode wrapper's 8 MiB int workspace (a 20 MiB segment), inside the first
    FULL sample; the second wrapper's fits in that segment, so nothing more is extrapolated. Two real vLLM 0.19.0 starts
    of the same model and settings on an A100-40GB print 0.53 GiB with FlashAttention 2
    (tests/data/vllm-budget/hpml-llama-3.1-8b-instruct-a100-40gb-8k-0.19.0.log) and 0.81 GiB with FlashInfer, which
    vLLM picks for the FP8 KV cache (hpml-llama-3.1-8b-w8a8-fp8kv-a100-40gb-8k-0.19.0.log), both FULL=35: the first
    sample grows from the activations' 2 x 512 x (3 x 14336 + 2 x 4096) x 2 B = 104 MiB to 394 + 20 MiB, 0.30 GiB of
    the 0.28 between them."""
    logs = DATA / "vllm-budget"
    for name, estimate in (("hpml-llama-3.1-8b-instruct-a100-40gb-8k-0.19.0.log", "0.53"),
                           ("hpml-llama-3.1-8b-w8a8-fp8kv-a100-40gb-8k-0.19.0.log", "0.81")):
        text = (logs / name).read_text()
        assert "FULL=35 (largest=256)" in text and f"Estimated CUDA graph memory: {estimate} GiB total" in text
    fa2 = _budget(gpu="A100-40GB", vllm_version="0.20.1", max_model_len=8192)
    fi = _budget(gpu="A100-40GB", vllm_version="0.20.1", max_model_len=8192, kv_dtype="fp8")
    assert fi["cudagraphs"] - fa2["cudagraphs"] == (394 + 20) * 2**20 - 2 * 512 * (3 * 14336 + 2 * 4096) * 2
    assert abs((fi["cudagraphs"] - fa2["cudagraphs"]) / GIB - (0.81 - 0.53)) < 0.03
    # no wrappers where vLLM keeps FlashAttention (FA3 takes an FP8 KV cache on H100)
    h100 = _budget(gpu="H100-80GB", vllm_version="0.20.1", max_model_len=8192)
    assert _budget(gpu="H100-80GB", vllm_version="0.20.1", max_model_len=8192, kv_dtype="fp8")["cudagraphs"] == h100["cudagraphs"]


def test_flashinfer_is_vllms_pick_for_an_fp8_kv_cache_on_rtx_50xx() -> None:
    """On the sm120 family (RTX 5090, RTX PRO 6000) FLASH_ATTN refuses an FP8 KV cache ("FP8 KV cache requires FA3 on
    SM90 or FA4 on SM100", vllm==0.27.1: v1/attention/backends/flash_attn.py:229), so vLLM takes FlashInfer; its FULL
    graphs then carry the 394 MiB float workspace and the first wrapper's 20 MiB segment in the first sample, in
    place of the activations' (Llama-3.1-8B on 0.24.0, whose model runner V1 serves it)."""
    kw = dict(gpu="RTX-5090", vllm_version="0.22.0", max_model_len=8192, max_num_batched_tokens=8192)
    bf16 = _budget(**kw)["cudagraphs"]
    fp8 = _budget(kv_dtype="fp8", **kw)["cudagraphs"]
    assert fp8 - bf16 == (394 + 20) * 2**20 - 2 * 512 * (3 * 14336 + 2 * 4096) * 2
    assert _budget(kv_dtype="fp8", attention_backend="FLASH_ATTN", **kw)["cudagraphs"] == bf16


def test_flashinfer_is_vllms_pick_on_turing_up_to_0_23() -> None:
    """On a T4 (sm75) FlashAttention is out (it needs sm80), so vLLM 0.18-0.23 takes FlashInfer, next in its order;
    from 0.24 FlashInfer's floor is sm80 and Turing gets Triton attention (docs/vllm-releases.md; RuleLine
    .flashinfer_on_turing). A real 0.21.0 start on a T4 prints "Using FLASHINFER attention backend out of potential
    backends: ['FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']" and FULL=35 graphs
    (tests/data/vllm-budget/set16-winny1673-t4-qwen25-05b.log): FlashInfer's 394 MiB workspace and its first decode
    wrapper's 20 MiB segment replace the activations' first sample as the estimate's largest: for Llama-3.1-8B at TP 2
    with the log's settings, 2 x 512 tokens x (3 x 14336 / 2 MLP + 2 x 4096 residual/hidden) x 2 B."""
    text = (DATA / "vllm-budget" / "set16-winny1673-t4-qwen25-05b.log").read_text()
    assert "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'" in text and "FULL=35" in text
    kw = dict(gpu="T4", tp=2, dtype="float16", max_model_len=2048, max_num_seqs=256, max_num_batched_tokens=8192)
    fi = _budget(vllm_version="0.21.0", **kw)["cudagraphs"]
    forced_off = _budget(vllm_version="0.21.0", attention_backend="TRITON_ATTN", **kw)["cudagraphs"]
    assert fi - forced_off == (394 + 20) * 2**20 - 2 * 512 * (3 * 14336 // 2 + 2 * 4096) * 2
    triton = _budget(vllm_version="0.24.0", **kw)["cudagraphs"]
    assert triton == _budget(vllm_version="0.24.0", attention_backend="TRITON_ATTN", **kw)["cudagraphs"]


def test_gpt_oss_mxfp4_triton_layout_on_hopper() -> None:
    """vLLM's Triton MXFP4 MoE backend (Hopper, 0.12+) pads the per-rank intermediate size to 64, keeps the
    checkpoint's scales as layer parameters beside the swizzled copy the kernel reads (whose rows pad to 256), and
    casts the expert biases to fp32 (vllm==0.15.1: quantization/mxfp4.py:322-329, 745-785). gpt-oss-120b at TP 2:
    I = round_up(2880 / 2, 64) = 1472, H = 2880, per expert: values 3 x 1472 x 2880 / 2 = 6,359,040; scales
    3 x 1472 x 2880 / 32 = 397,440; swizzled scales round_up(2944, 256) x 90 + round_up(2880, 256) x 46 = 417,792;
    fp32 biases (2944 + 2880) x 4 = 23,296: 7,197,568 B x 128 experts."""
    from kvcalc.core.weights import triton_mxfp4_expert_bytes

    assert triton_mxfp4_expert_bytes(128, 2880, 2880, 2) == 7_197_568 * 128
    # the whole rank against real logs: gpt-oss-120b, TP 2 on H200, 0.15.1, "Using Triton backend"
    # (tests/data/vllm-budget/set19-activate-rag-gptoss120b-h200-tp2-u0.85-0.15.1.log: "Model loading took 32.98 GiB"),
    # and gpt-oss-20b, TP 2 on H100, 0.19.0 (llm-d-planner-openai-gpt-oss-20b--h100-80gb--tp2pp1dp1--8192.log: 7.01 GiB)
    logs = DATA / "vllm-budget"
    assert "Model loading took 32.98 GiB" in (logs / "set19-activate-rag-gptoss120b-h200-tp2-u0.85-0.15.1.log").read_text()
    assert "Model loading took 7.01 GiB" in (logs / "llm-d-planner-openai-gpt-oss-20b--h100-80gb--tp2pp1dp1--8192.log").read_text()
    h200 = Settings().with_(gpu="H200", vllm_version="0.15.1", tp=2, gpu_memory_utilization=0.85, max_model_len=131072)
    assert predict(resolve("gpt-oss-120b").spec, h200, stage=None)[0]["weights"] / GIB == pytest.approx(32.98, abs=0.1)
    h100 = Settings().with_(gpu="H100-80GB", vllm_version="0.19.0", tp=2, gpu_memory_utilization=0.95, max_model_len=8192)
    assert predict(resolve("gpt-oss-20b").spec, h100, stage=None)[0]["weights"] / GIB == pytest.approx(7.01, abs=0.2)


def test_forced_awq_kernel_holds_a_dequantized_weight() -> None:
    """With --quantization awq given for an AWQ checkpoint, vLLM keeps its plain AWQ kernel ("Detected that the model
    can run with awq_marlin, however you specified quantization=awq explicitly, so forcing awq"), which dequantizes a
    weight whole to fp16 for inputs of 256 tokens and more (vllm==0.17.0: quantization/awq.py:269-273). Qwen3-32B's
    widest layer on one GPU is gate_up: 5120 x 2 x 25600 x 2 B = 524,288,000 B beside the 2048-token forward. A public
    0.17.1 RTX 5090 start of Qwen3-32B-AWQ forced this way, eager, 4 seqs (tests/data/vllm-budget/set22-culturedx-
    qwen3-32b-awq-5090-eager-0.17.1.log) logs 9.24 GiB available; kvcalc predicted 9.86 without the rule (HELDOUT22.md).
    The checkpoint's config: tests/data/vllm-budget/configs/qwen3-32b-awq.reconstructed.json (SOURCES.md)."""
    text = (DATA / "vllm-budget" / "set22-culturedx-qwen3-32b-awq-5090-eager-0.17.1.log").read_text()
    assert "forcing awq" in text and "Available KV cache memory: 9.24 GiB" in text
    spec = resolve("tests/data/vllm-budget/configs/qwen3-32b-awq.reconstructed.json").spec
    s = Settings().with_(gpu="RTX-5090", vllm_version="0.17.1", max_model_len=16384, enforce_eager=True, max_num_seqs=4)
    marlin = predict(spec, s)[0]
    forced = predict(spec, s.with_(quantization="awq"))[0]
    assert marlin["torch_peak"] - forced["torch_peak"] == -5120 * 2 * 25600 * 2
    assert abs(forced["available"] / GIB - 9.24) <= 0.25 < abs(marlin["available"] / GIB - 9.24)


def test_probe_reads_the_quantization_the_user_gave(run_json) -> None:
    """`probe --from-vllm-log` takes --quantization from the log's non-default args (what the user passed): 'awq' for
    an AWQ checkpoint forces vLLM's plain kernel, so the probe's budget uses the dequantizing forward (2.3.8)."""
    d = run_json("probe", "tests/data/vllm-budget/configs/qwen3-32b-awq.reconstructed.json", "--from-vllm-log",
                 "tests/data/vllm-budget/set22-culturedx-qwen3-32b-awq-5090-eager-0.17.1.log", "--gpu", "RTX-5090")
    assert "'quantization': 'awq'" in json.dumps(d)


def test_gpu_auto_reaches_the_state_page_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.33 adds a prefill-checkpoint page for gated-delta-net layers where FlashInfer runs their prefill
    (Hopper); --gpu auto on a local H100 gets it as --gpu H100-80GB does (docs/vllm-releases.md 7)."""
    from kvcalc.app.mamba_state import mamba_fields
    from kvcalc.sources import localgpu

    spec = resolve("tests/data/vllm-budget/configs/qwen3.5-27b.json").spec
    named_fields, _ = mamba_fields(spec, Settings().with_(gpu="H100-80GB"), "0.33.0")
    monkeypatch.setattr(localgpu, "_from_torch", lambda: ("NVIDIA H100 80GB HBM3", 85_020_000_000, "test"))
    auto_fields, _ = mamba_fields(spec, Settings().with_(gpu="auto"), "0.33.0")
    assert auto_fields == named_fields and named_fields["mamba_checkpoint_blocks"] == 1


def test_rtx_4090_total_follows_the_driver_a_cuda13_release_needs(run_json) -> None:
    """vLLM 0.20.1+ pins CUDA 13 builds of torch (2.11.0 requires nvidia-nccl-cu13), which need driver 580 or later;
    under those drivers the RTX 4090 reports 23.52 GiB (a 0.27.1 log), under older ones 23.64 (a torch OOM message)."""
    def total(version: str) -> int:
        return run_json("size", "qwen3-8b", "--gpu", "RTX-4090", "--vllm-version", version)["pool"]["gpu_memory_bytes"]

    assert total("0.19.0") == round(23.64 * 2**30)
    assert total("0.20.1") == total("0.33.0") == round(23.52 * 2**30)
    # a CUDA 12 variant of a new release on an older driver, or an old release on a newer one: --nvidia-driver says so
    pool = run_json("size", "qwen3-8b", "--gpu", "RTX-4090", "--vllm-version", "0.26.0", "--nvidia-driver", "550")["pool"]
    assert pool["gpu_memory_bytes"] == round(23.64 * 2**30) and "--nvidia-driver 550" in pool["budget"][0][0]["source"]
    pool = run_json("size", "qwen3-8b", "--gpu", "RTX-4090", "--vllm-version", "0.19.0", "--nvidia-driver", "580")["pool"]
    assert pool["gpu_memory_bytes"] == round(23.52 * 2**30)
    # the 570 series already reports the lower totals: deviceQuery under "CUDA Driver Version 12.8" prints 7817 MBytes
    # (8197111808 B) for an RTX 3070 (SOURCES.md, role r580) against 7.78 GiB in older torch OOM lines
    pool = run_json("size", "qwen3-0.6b", "--gpu", "RTX-3070", "--vllm-version", "0.19.0", "--nvidia-driver", "570")["pool"]
    assert pool["gpu_memory_bytes"] == 8197111808
    pool = run_json("size", "qwen3-0.6b", "--gpu", "RTX-3070", "--vllm-version", "0.19.0")["pool"]
    assert pool["gpu_memory_bytes"] == round(7.78 * 2**30)
    # data-centre cards have no R580 figure: the same total either way
    h100 = [run_json("size", "qwen3-8b", "--gpu", "H100-80GB", "--vllm-version", v)["pool"]["gpu_memory_bytes"]
            for v in ("0.19.0", "0.33.0")]
    assert h100[0] == h100[1] == round(79.18 * 2**30)


def test_mxfp4_triton_path_frees_the_checkpoint_scales_from_0_25() -> None:
    """vLLM 0.25+ deletes the checkpoint-layout MXFP4 scales once swizzled for the Triton MoE kernel (vllm==0.25.0:
    fused_moe/oracle/mxfp4.py:1150-1157); before, they stayed beside the swizzled copy."""
    from kvcalc.core.weights import MXFP4_LAYOUTS

    assert mxfp4_kernel(rules_for("0.24.0")[0], 90) == "triton"
    assert mxfp4_kernel(rules_for("0.25.0")[0], 90) == mxfp4_kernel(rules_for("0.33.0")[0], 90) == "triton_freed"
    assert mxfp4_kernel(rules_for("0.25.0")[0], 80) == "marlin"
    # gpt-oss-20b, one layer's 32 experts at TP 1: the scales are 1/32 B per value, 3 x 2880 x 2880 values an expert
    kept, freed = (MXFP4_LAYOUTS[k][0](32, 2880, 2880, 1) for k in ("triton", "triton_freed"))
    assert kept - freed == 32 * (3 * 2880 * 2880 // 32)  # 24,883,200 B a layer, 0.56 GiB over 24 layers
    # a public 0.26.0 start on an H100 PCIe logs "Model loading took 13.03 GiB" (tests/data/vllm-budget/
    # set27-lossyspec-...): 13.44 predicted with the scales kept, 12.88 without (calibration, weights term)


def test_gpt_oss_raises_the_largest_cuda_graph_to_1024() -> None:
    """gpt-oss's config class sets max_cudagraph_capture_size = 1024 unless sizes are given (vllm==0.28.0:
    model_executor/models/config.py:393-412): [1, 2, 4] + 8..248 step 8 + 256..1024 step 16 = 3 + 31 + 49 = 83
    sizes, as a public 0.28.0 start on an L40 logs ("PIECEWISE=83 (largest=1024), FULL=5 (largest=16)" with 16 seqs)."""
    from kvcalc.core.budget_device import capture_sizes

    sizes = capture_sizes(16, 2048, 1024)
    assert len(sizes) == 83 and max(sizes) == 1024 and len([x for x in sizes if x <= 16]) == 5
    assert max(capture_sizes(16, 2048)) == 32  # any other model: 2 x max_num_seqs
    assert max(capture_sizes(256, 512, 1024)) == 512  # never above max_num_batched_tokens


def test_expandable_segments_leave_no_slack_in_the_weights(run_json) -> None:
    # Qwen3-4B-Thinking-2507 (tests/data/vllm-budget/configs), counted by hand: a tied 151,936 x 2560 embedding and 36
    # layers of qkv 2560 x (32 + 2 x 8) x 128, o 4096 x 2560, gate/up/down 3 x 2560 x 9728 and norms (2 x 2560 + 2 x
    # 128), the final norm; 2 B each, and the RoPE table 262,144 x 128 x 2 B
    layer = 2560 * 48 * 128 + 4096 * 2560 + 3 * 2560 * 9728 + 2 * 2560 + 2 * 128
    hand = 2 * (151936 * 2560 + 36 * layer + 2560) + 262144 * 128 * 2
    config = "tests/data/vllm-budget/configs/qwen3-4b-thinking-2507.json"
    base = ("size", config, "--gpu", "A100-40GB", "--vllm-version", "0.20.1")
    # a notebook start with PYTORCH_ALLOC_CONF=expandable_segments:True, fp16 (set44-trevis-qwen3-4b-a100.log,
    # Trevis8688/151B_SP26_Competition @5e2b062): "Model loading took 7.56 GiB"; every block is split, so the
    # figure is the tensors' sum, each rounded up to 512 B (kvcalc sums the parameters, and leaves Qwen3's q/k norms and
    # the final norm out: 23 KB); both within the log's last printed digit
    flat = run_json(*base, "--dtype", "float16", "--expandable-segments")["pool"]["weights_bytes_per_rank"]
    assert 0 <= hand - flat < 64 << 10 and abs(flat / 2**30 - 7.56) < 0.01 and abs(hand / 2**30 - 7.56) < 0.01
    # without it (set44-kz-full-qwen3-4b-bf16-a100.log, the same model in bf16: 7.61 GiB) the large pool's blocks keep
    # their unsplit remainders, as core.allocator counts them
    slack = run_json(*base, "--dtype", "bfloat16")["pool"]["weights_bytes_per_rank"]
    assert slack - flat > 32 << 20 and f"{slack / 2**30:.2f}" == "7.61"


def test_bitsandbytes_dequantizes_one_shard_at_a_time() -> None:
    # vLLM calls matmul_4bit per shard of a merged layer, and bitsandbytes dequantizes the shard whole in the model dtype
    # for a many-row input: for Qwen3-4B's shapes the widest shard is gate, up or down, 9728 x 2560 x 2 B (q and o are
    # 4096 x 2560); at TP 2 half of it. A profile batch bitsandbytes 0.50 multiplies with its fused kernel (<= 1536
    # rows) leaves it out; plain AWQ dequantizes the packed gate_up, 2 x 9728 x 2560 x 2 B, from 256 tokens.
    qwen3_4b = dict(hidden=2560, intermediate=9728, moe_intermediate=0, experts=0, top_k=0, q_width=4096, kv_width=1024,
                    vocab=151936, dtype_bytes=2)
    bnb = Shapes(**qwen3_4b, bnb_dequant=True)
    assert dequant_bytes(bnb, 1, 8192)[0] == 9728 * 2560 * 2 == 49_807_360
    assert dequant_bytes(bnb, 2, 8192)[0] == 9728 // 2 * 2560 * 2
    assert dequant_bytes(bnb, 1, 1536)[0] == 0
    assert dequant_bytes(Shapes(**qwen3_4b, awq_dequant=True), 1, 256)[0] == 2 * 9728 * 2560 * 2
    assert dequant_bytes(Shapes(**qwen3_4b), 1, 8192)[0] == 0


def test_flashinfer_workspace_is_first_allocated_in_the_first_full_sample() -> None:
    # Model runner V1 profiles CUDA graphs with fresh attention metadata builders, and only FULL captures build
    # attention metadata: FlashInfer's 394 MiB float workspace (torch.zeros) and its first decode wrapper's 8 MiB int
    # workspace (a 20 MiB segment: under 10 MiB) land in the first FULL sample; the second wrapper's fits in that
    # segment. Qwen2.5-0.5B's shapes, 51 PIECEWISE sizes up to 512 and 35 FULL up to 256: 394 + 20 MiB, then 86 x PER_GRAPH.
    mib = 1 << 20
    qwen = Shapes(hidden=896, intermediate=4864, moe_intermediate=0, experts=0, top_k=0, q_width=896, kv_width=128,
                  vocab=151936, dtype_bytes=2)
    sizes = capture_sizes(256, 8192)
    assert len(sizes) == 51 and max(sizes) == 512
    total, why = cudagraph_estimate(qwen, 1, sizes, 256, flashinfer=True, flashinfer_ws=394 * mib)
    assert total == 394 * mib + 20 * mib + 86 * PER_GRAPH and "workspace" in why
    # under model runner V2 the workspace is shared and allocated before: the activations' sample stays the first
    v2, _ = cudagraph_estimate(qwen, 1, sizes, 256, flashinfer=True, flashinfer_ws=0)
    assert total - v2 > 350 * mib
    # the workspace's size: 394 MiB, from 0.26 at least batched tokens x query heads x head size x 16 B
    assert flashinfer_workspace(rules_for("0.25.0")[0], 65536, 32, 128) == 394 * mib
    assert flashinfer_workspace(rules_for("0.26.0")[0], 65536, 32, 128) == 65536 * 32 * 128 * 16 == 4096 * mib
    assert flashinfer_workspace(rules_for("0.26.0")[0], 8192, 32, 128) == 8192 * 32 * 128 * 16 == 512 * mib
    assert flashinfer_workspace(rules_for("0.26.0")[0], 4096, 32, 128) == 394 * mib  # 256 MiB: the default stays
