"""Bytes per weight of a quantized checkpoint, as vLLM loads it (kvcalc.core.weights counts the parameters)."""

from __future__ import annotations

from kvcalc.core.vllm_rules import (
    MXFP4_NO_TRITON_KERNELS,
    MXFP4_TORCH27,
    MXFP4_VENDORED,
    MXFP4_VENDORED_FREED,
    RuleLine,
)
from kvcalc.errors import ConfigError


def config_groups(quant: dict) -> list[dict]:
    """compressed-tensors' quantization groups (quantization_config.config_groups: name -> scheme)."""
    groups = quant.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise ConfigError(
            f"config field 'quantization_config.config_groups' must be an object of named groups, "
            f"got {type(groups).__name__}"
        )
    return [g for g in groups.values() if isinstance(g, dict)]


QUANTIZATIONS = ("fp8", "fp8_e4m3", "mxfp4", "awq", "gptq", "compressed-tensors", "bitsandbytes")
# quantization_config methods whose weights are FP8 with per-tensor, per-channel or block scales
FP8_METHODS = ("fp8", "fp8_e4m3", "fbgemm_fp8", "modelopt")


def forced_awq(arch: dict, cli_method: str | None) -> bool:
    """vLLM keeps its plain AWQ kernel for an AWQ checkpoint only when --quantization awq is given ("Detected that
    the model can run with awq_marlin, however you specified quantization=awq explicitly, so forcing awq":
    vllm==0.17.0 quantization/awq_marlin.py override_quantization_method); otherwise it converts to awq_marlin. A
    --quantization awq beside a config without quantization_config stands for an AWQ checkpoint here, so Marlin."""
    raw = arch.get("quantization_config")
    return cli_method == "awq" and isinstance(raw, dict) and str(raw.get("quant_method") or "").lower() == "awq"


def bnb_4bit(arch: dict, cli_method: str | None) -> bool:
    """bitsandbytes 4-bit weights: --quantization bitsandbytes on an unquantized checkpoint (vLLM quantizes in flight to
    NF4) or a checkpoint quantized with bitsandbytes, unless it says load_in_8bit."""
    raw = arch.get("quantization_config")
    q: dict = raw if isinstance(raw, dict) else {}
    method = str(q.get("quant_method") or cli_method or "").lower()
    return method == "bitsandbytes" and not q.get("load_in_8bit")


def _group_size(v: object) -> int:
    """A config's FP4 group size, 16 (NVFP4's) where it names none or an unusable one."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 4096 else 16


def fp4_group(quant: dict, method: str) -> int:
    """The group size of a 4-bit float (NVFP4/MXFP4) checkpoint, 0 for any other: compressed-tensors with 4-bit
    "float" weights (llm-compressor's NVFP4 scheme: group 16) or ModelOpt's quant_algo NVFP4 (group 16)."""
    if method == "compressed-tensors":
        for group in config_groups(quant):
            w = group.get("weights")
            if isinstance(w, dict) and w.get("num_bits") == 4 and w.get("type") == "float":
                return _group_size(w.get("group_size"))
        return 0
    if method == "modelopt" and "FP4" in str(quant.get("quant_algo") or "").upper():
        return _group_size(quant.get("group_size"))
    return 0


def quant_bytes(quant: dict, method: str, dt: int, fp8_marlin: bool = False) -> tuple[float, float, str]:
    """(bytes per linear-layer parameter, per expert parameter, how) for a quantization. ``fp8_marlin``:
    the GPU has no FP8 units (compute capability 7.5-8.8), so vLLM serves FP8 weights through Marlin
    (weight-only), which turns block scales into one model-dtype scale per 128 inputs of every output
    (vllm==0.19.0: model_executor/kernels/linear/scaled_mm/marlin.py is_supported; fused_moe/oracle/fp8.py
    backend order, Marlin last; quantization/utils/marlin_utils_fp8.py:174-186 linear, :299-309 experts)."""
    method = method.lower().replace("_marlin", "")
    fp4 = fp4_group(quant, method)
    if fp4:
        # NVFP4 (group 16, FP8 E4M3 scales) / MXFP4 (group 32, E8M0 scales): 4-bit weights packed two to a byte and
        # one 1-byte scale per group, under the CUTLASS/FlashInfer kernels and under Marlin's W4A16 fallback alike
        # (vllm==0.23.0: compressed_tensors/schemes/compressed_tensors_w4a4_nvfp4.py:50-75, weight (N, K/2) uint8 and
        # weight_scale (N, K/group) float8_e4m3fn; vllm==0.10.2: utils/marlin_utils_fp4.py:25-55, the Marlin scales
        # stay one FP8 byte per group); the per-tensor global scales are not counted
        b = 0.5 + 1 / fp4
        return b, b, f"{method} 4-bit float (FP4) weights, group {fp4}, 1-byte scales"
    if method in FP8_METHODS:
        block = quant.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
            if fp8_marlin:
                b = 1 + dt / block[1]  # (K / block_k, N) scales in the model dtype
                return b, b, f"fp8 with {block[0]}x{block[1]} block scales, as Marlin group-{block[1]} scales ({dt} B)"
            b = 1 + 4 / (block[0] * block[1])  # an fp32 scale per block
            return b, b, f"fp8 with {block[0]}x{block[1]} block scales"
        return 1.0, 1.0, "fp8 (per-tensor or dynamic scales)"
    if method in ("awq", "gptq"):
        bits = quant.get("bits", quant.get("w_bit", 4))
        group = quant.get("group_size", quant.get("q_group_size", 128))
        bits = bits if isinstance(bits, int) and 0 < bits <= 16 else 4
        group = group if isinstance(group, int) and group > 0 else 128
        b = bits / 8 + (2 + bits / 8) / group  # fp16 scale + packed zero point per group
        return b, b, f"{method} {bits}-bit, group {group}"
    if method == "bitsandbytes":
        double = bool(quant.get("bnb_4bit_use_double_quant"))
        if quant.get("load_in_8bit"):
            return 1 + 4 / 4096, 1 + 4 / 4096, "bitsandbytes int8"
        b = (4.127 if double else 4.5) / 8
        return b, b, "bitsandbytes nf4" + (" (double quant)" if double else "")
    if method == "compressed-tensors":
        bits = 8
        for group in config_groups(quant):
            w = group.get("weights")
            if isinstance(w, dict) and isinstance(w.get("num_bits"), int) and 0 < w["num_bits"] <= 16:
                bits = w["num_bits"]
        b = bits / 8 + (2 / 128 if bits < 8 else 0)
        return b, b, f"compressed-tensors {bits}-bit weights"
    if method == "mxfp4":
        return float(dt), 4.25 / 8, "mxfp4 experts (4.25 bits)"
    return float(dt), float(dt), ""


def mxfp4_kernel(line: RuleLine, sm: int) -> str:
    """The MoE kernel whose layout a pip install of the release gives MXFP4 experts on compute capability ``sm``:
    "marlin" (mxfp4_marlin), "triton" on Hopper from 0.12 (triton_kernels ships in the wheel and TRITON comes
    before Marlin in the order: vllm==0.12.0: mxfp4.py:150-162; vllm==0.19.0: fused_moe/oracle/mxfp4.py:169-184,
    204-207; "triton_freed" from 0.25, which frees the checkpoint's scales), or "" (unpadded: unknown GPU, sm100's
    FlashInfer/Triton layouts, not modelled)."""
    if mxfp4_marlin(line, sm):
        return "marlin"
    if not 90 <= sm < 100 or line.mxfp4_kernel not in (MXFP4_VENDORED, MXFP4_VENDORED_FREED):
        return ""
    return "triton_freed" if line.mxfp4_kernel == MXFP4_VENDORED_FREED else "triton"


def mxfp4_marlin(line: RuleLine, sm: int) -> bool:
    """Whether a pip install of the release loads MXFP4 MoE experts through the Marlin kernel
    (padded: kvcalc.core.weights.marlin_mxfp4_expert_bytes) on a GPU of compute capability ``sm``
    (0: unknown, no padding assumed). 0.10.1.x: torch 2.7.1 fails the >= 2.8.0 check, so every
    GPU but sm100 (vllm==0.10.1.1: mxfp4.py:123-135); 0.10.2-0.11.x: the optional triton_kernels
    package is absent, so Marlin on sm90 too (vllm==0.11.0: mxfp4.py:95-99); 0.12+: triton_kernels
    ships in the wheel, Triton on sm90-sm10x (vllm==0.12.0: mxfp4.py:150-162). sm100 (FlashInfer
    or Triton, with their own padding) is not modelled: no padding assumed."""
    if sm <= 0 or 100 <= sm < 110:
        return False
    if line.mxfp4_kernel in (MXFP4_TORCH27, MXFP4_NO_TRITON_KERNELS):
        return True
    return sm < 90 or sm >= 110


def fp8_moe_kernel(line: RuleLine, sm: int, block: bool, expert_parallel: bool) -> str:
    """The experts class vLLM's FP8 MoE oracle gives FP8 experts on compute capability ``sm``, where its
    workspace has TritonExperts' shapes: "Marlin" before sm89 (no native FP8: TritonExperts and the CUTLASS,
    DeepGEMM and FlashInfer kernels need sm89/sm90+, MarlinExperts sm75: vllm==0.19.0 fused_moe/fused_moe.py:
    1934, fused_marlin_moe.py:565-567, flashinfer_cutlass_moe.py:125-133, _custom_ops.py:879-881; 0.14.0's
    weight-only branch, oracle/fp8.py:104-109), "Triton" on sm89 and, from 0.17, on sm90 for 128x128 block
    scales without expert parallelism (RuleLine.fp8_moe_hopper_triton); "" where another kernel (FlashInfer,
    DeepGEMM, CUTLASS, AITER) or an unknown GPU (0) leaves the workspace not modelled. MarlinExperts' workspace
    (M x top_k x max(I, K), M x top_k x max(2I, K), output M x K: fused_marlin_moe.py:686-694, I the sharded
    intermediate size, :625-650) is TritonExperts' (fused_moe.py:1976-1991 with N = 2I)."""
    if sm < 75:
        return ""
    if sm < 89:
        return "Marlin"
    if sm == 89 or (sm == 90 and block and not expert_parallel and line.fp8_moe_hopper_triton):
        return "Triton"
    return ""


def workspace_kernel(line: RuleLine, method: str, quant: dict, sm: int, expert_parallel: bool) -> str:
    """The experts class, with TritonExperts' workspace shapes, that quantized MoE experts run on: FP8 (fp8_moe_kernel)
    and, from 0.17, MXFP4 on Marlin (RuleLine.mxfp4_modular; mxfp4_marlin: before sm90 and from sm110); "" elsewhere."""
    if method in ("fp8", "fp8_e4m3") and quant.get("quant_method", "fp8") == "fp8":
        return fp8_moe_kernel(line, sm, bool(quant.get("weight_block_size")), expert_parallel)
    if method == "mxfp4" and line.mxfp4_modular and mxfp4_marlin(line, sm):
        return "Marlin"
    return ""
