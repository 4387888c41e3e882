"""The terms of vLLM's ``determine_available_memory`` that kvcalc derives from the code,
per release line (``RuleLine``): the default ``max_num_seqs``, the profile run's peak
(forward over ``max_num_batched_tokens``, the dummy sampler over ``max_num_seqs x vocab``,
the fused-MoE workspace kept under the sampler from 0.14, a cold compile's autotune examples, model
runner V2's state). Non-torch memory and the CUDA-graph estimate are in budget_device.

docs/vllm-budget.md cites the vLLM source behind each rule. Pure: stdlib only, bytes as
integers. Every function returns ``(bytes, how)`` where ``how`` says what was counted.
"""

from __future__ import annotations

from kvcalc.core.engine import usage_tier
from kvcalc.core.quant import FP8_METHODS, config_groups, fp4_group
from kvcalc.core.record import record
from kvcalc.core.specs import cdiv
from kvcalc.core.units import figure
from kvcalc.core.vllm_rules import (
    BATCH_70GIB,
    BATCH_160GIB_NO_GB10,
    BATCH_BY_NAME,
    BATCH_BY_NAME_SEQS,
    SAMPLER_NATIVE_OR_FI,
    V2_LISTED,
    V2_LISTED_DENSE_UNQUANTIZED,
    V2_LISTED_OR_DENSE,
    RuleLine,
)

MIB = 1 << 20
GIB = 1 << 30

# bytes per (row x vocab) element of FlashInfer's top_k_top_p_sampling_from_logits path
# (bf16 logits 2 + fp32 copy 4 + masked logits 4 + probs 4; docs/vllm-budget.md section 3)
FLASHINFER_SAMPLER_BYTES = 14
SAMPLERS = ("auto", "native", "flashinfer", "triton")
COMPILE_CACHES = ("cold", "warm")  # --compile-cache (compile_examples)
_SAMPLER_BYTES = {"native": 38, "flashinfer": FLASHINFER_SAMPLER_BYTES, "triton": 14}
# vLLM 0.33's second dummy sampler pass (RuleLine.sampler_path SAMPLER_V2_WARMUP), per (row x vocab) element with a
# bf16 model: the logits (2 B, held by _dummy_sampler_run) + their fp32 copy (4 B, vllm==0.33.0: v1/worker/gpu/sample/
# sampler.py:242; the logits processors, temperature and min_p then write in place). FlashInfer's sampler gets a per-row
# top_k tensor, so top_k_top_p_sampling_from_logits takes its masked path: top_k_mask_logits into a new fp32 tensor,
# softmax into another (flashinfer-python==0.7.2.post1, the release vLLM 0.33.0 pins: sampling.py:1783-1795, :676),
# under a cached 1 MiB row-states buffer (:2231-2238): 2 + 4 + 4 + 4 B. Where FlashInfer's sampler is not taken
# (flashinfer_sampler) the Triton top-k/top-p masks the copy in place with its cached buffer (no 8-row minimum here:
# v1/sample/ops/topk_topp_sampler.py:515-518, topk_topp_triton.py:1688-1697) and Gumbel samples it: 2 + 4 B
V2_WARMUP_FLASHINFER_BYTES = 14
V2_WARMUP_TRITON_BYTES = 6
FLASHINFER_ROW_STATES = 1 << 20
# FlashInfer's sampler in 0.33: CUDA, compute capability 8.0-12.1 (FlashInferBackend.supports_compute_capability,
# vllm==0.33.0: v1/attention/backends/flashinfer.py:696-704; Turing excluded until a FlashInfer fix) and more than
# 16 SMs (v1/sample/ops/topk_topp_sampler.py:118-146); VLLM_USE_FLASHINFER_SAMPLER=0 (--sampler triton) turns it off
FLASHINFER_SAMPLER_SM = (80, 121)
FLASHINFER_SAMPLER_MIN_SMS = 17

# Triton top-k/top-p (0.17+): rows below 8 take the PyTorch sort instead (vllm==0.19.0:
# v1/sample/ops/topk_topp_sampler.py:251-255); the kernel keeps a per-program fp32 buffer of
# min(next_pow2(P), SMs) x vocab, P = min(SMs, rows), in the module-level _TRITON_BUFFER_CACHE
# (topk_topp_triton.py:19, :1010-1021; SMs = torch.cuda.get_device_properties().multi_processor_count,
# platforms/cuda.py:520-521). Without a catalog GPU kvcalc assumes H100/H200 SXM's 132 SMs.
TRITON_TOPK_MIN_ROWS = 8
DEFAULT_SM_COUNT = 132
# model runner V2's dummy sampler in 0.22-0.25 (RuleLine.v2_default_archs, v2_logits_fp32_copy): no top-k/top-p (the dummy requests
# keep top_k = vocab, top_p = 1.0: vllm==0.24.0 v1/worker/gpu/sample/states.py:31-35, :94-101), so the peak per
# (row x vocab) element is the bf16 logits (2 B, held by _dummy_sampler_run: v1/worker/gpu/model_runner.py:633-644)
# + their fp32 copy (4 B, sample/sampler.py:157); gumbel_sample's buffers are rows x blocks (gumbel.py)
V2_DUMMY_SAMPLER_BYTES = 6
# model runner V2's Gumbel sampler (0.29-0.32 dummy run, RuleLine.sampler_path SAMPLER_V2_DUMMY): one program per
# (row, 1024-wide vocab block) writes an int64 argmax and an fp32 max per block (vllm==0.29.0: v1/worker/gpu/sample/
# gumbel.py:275-279; the same in 0.30.0 :275-279, 0.31.0 :350-354, 0.32.0 :376-380); use_fp64_gumbel is off by default
V2_GUMBEL_BLOCK = 1024
V2_GUMBEL_BYTES = 8 + 4
ALLOC_BLOCK = 512
VOCAB_PAD = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE (vllm==0.29.0: vocab_parallel_embedding.py:33)


def runner_v2(line: RuleLine, architectures: object, *, moe: bool = False, quantized: bool = False, hybrid: bool = False) -> str:
    """Why this release runs model runner V2 by default for the model before 0.29 (the listed architecture,
    or "dense models"), or '' when it runs V1 (RuleLine.v2_default_rule)."""
    names = architectures if isinstance(architectures, list) else []
    listed = next((a for a in names if isinstance(a, str) and a in line.v2_default_archs), "")
    rule = line.v2_default_rule
    if rule == V2_LISTED_DENSE_UNQUANTIZED:
        return listed if not (moe or quantized) else ""
    if rule == V2_LISTED:
        return listed
    if rule == V2_LISTED_OR_DENSE:
        return listed or ("" if moe or hybrid else "models that are not MoE or hybrid")
    return ""


@record
class Shapes:
    """The architecture numbers the profile run depends on (per model, not per rank)."""

    hidden: int
    intermediate: int  # dense MLP (0: none)
    moe_intermediate: int  # per expert (0: not MoE)
    experts: int
    top_k: int
    q_width: int  # heads x head_dim
    kv_width: int  # KV heads x head_dim
    vocab: int
    dtype_bytes: int  # model dtype
    # TP slices every expert's intermediate width; under expert parallelism each rank holds whole experts, so the
    # fused-MoE buffers are (tokens, top_k, full width) with the non-local slots skipped (vllm==0.19.0:
    # model_executor/layers/fused_moe/layer.py determine_expert_map; fused_moe.py:1976-1991 workspace_shapes)
    experts_sliced: bool = True
    # bytes per element of the MLP activation's output (0: the model dtype); 1 where it is FP8 (fp8_mlp_activation)
    mlp_act_bytes: int = 0
    # vLLM's plain AWQ kernel (quant.forced_awq) dequantizes a weight whole, in the model dtype, for inputs of 256
    # tokens and more, then multiplies (vllm==0.17.0: quantization/awq.py:269-273): the widest layer's weight on a
    # rank sits beside the forward's activations
    awq_dequant: bool = False
    # bitsandbytes 4-bit: each linear shard (q, k, v, gate, up, down apart: vLLM calls matmul_4bit per shard,
    # vllm==0.19.0: quantization/bitsandbytes.py:390-410) is dequantized whole in the model dtype for a multi-row input
    # and freed after its matmul (bitsandbytes 0.48.1: autograd/_functions.py:373, backends/cuda/ops.py:351-362; 0.50.2
    # above 1536 rows: backends/cuda/ops.py:904-926): the widest shard on a rank sits beside the activations
    bnb_dequant: bool = False


def default_max_num_seqs(line: RuleLine, total: int | None, gpu_name: str | None, usage: str | None = None) -> tuple[int, str]:
    """vLLM's default max_num_seqs for the GPU (engine/arg_utils.py get_batch_defaults), for how vLLM was
    started (core.engine.usage_tier: LLMEngine built directly keeps the scheduler's 128)."""
    seqs, why = _serve_max_num_seqs(line, total, gpu_name)
    return usage_tier(0, seqs, why, usage, line)[1:] if usage is not None else (seqs, why)


def _serve_max_num_seqs(line: RuleLine, total: int | None, gpu_name: str | None) -> tuple[int, str]:
    name = (gpu_name or "").lower()
    rule = line.batch_defaults
    if total is None:
        return 256, f"vLLM default for a GPU under {figure(70 * GIB)} (no GPU given)"
    if rule == BATCH_BY_NAME:
        return 1024, "vLLM 0.8.0-0.8.3 default (every GPU)"
    if rule == BATCH_BY_NAME_SEQS:
        big = "h100" in name or "h200" in name
        return (1024 if big else 256), "vLLM 0.8.4 default: 1024 on H100/H200, else 256"
    big = total >= 70 * GIB
    why = f"vLLM default: 1024 on GPUs >= {figure(70 * GIB)}"
    if rule != BATCH_70GIB:
        big = big and "a100" not in name
        why += " other than A100"
    if rule == BATCH_160GIB_NO_GB10 and "gb10" in name.replace("-", "").replace(" ", "") and "gb100" not in name:
        big, why = False, why + " and GB10"
    return (1024 if big else 256), why + ", else 256"


def sampler_bytes_per_element(line: RuleLine, sampler: str | None, dtype_bytes: int) -> tuple[int, str]:
    """Peak bytes per (row x vocab) element of the dummy sampler run."""
    if sampler and sampler != "auto":
        base, how = _SAMPLER_BYTES[sampler], f"{sampler} sampler (--sampler)"
    else:
        base, how = line.sampler_bytes, line.sampler_path
        if line.sampler_path == SAMPLER_NATIVE_OR_FI:
            how = "native sort (pip install without FlashInfer; --sampler flashinfer for images that ship it)"
    extra = dtype_bytes - 2 if dtype_bytes > 2 else 0  # fp32 logits: 4 B, not 2
    return base + extra, how


def fp8_marlin(sm: int) -> bool:
    """Whether FP8 weights run through vLLM's weight-only Marlin kernel: CUDA GPUs of compute capability
    7.5-8.8, which lack FP8 units (vllm==0.19.0: model_executor/kernels/linear/scaled_mm/marlin.py
    is_supported, Marlin refused from 8.9 unless forced; fused_moe/fused_marlin_moe.py:567)."""
    return 75 <= sm < 89


def sampler_peak(rows: int, vocab: int, bpe: int) -> int:
    """The dummy sampler run's peak over ``rows`` full-vocabulary logits (every TP rank)."""
    return rows * vocab * bpe


def flashinfer_sampler(sm: int | None, sms: int) -> tuple[bool, str]:
    """Whether vLLM 0.33 samples with FlashInfer's top-k/top-p on this GPU (FLASHINFER_SAMPLER_SM): ``sm`` None for
    no catalog GPU (assumed yes), 0 for a GPU that is not NVIDIA's; ``sms`` 0 when the catalog has no SM count."""
    if sm is None:
        return True, "FlashInfer's sampler assumed (no catalog GPU)"
    low, high = FLASHINFER_SAMPLER_SM
    if not sm:
        return False, "not CUDA: no FlashInfer sampler"
    if not low <= sm <= high:
        return False, f"compute capability {sm / 10:.1f} outside FlashInfer's sampler range {low / 10:.1f}-{high / 10:.1f}"
    if sms and sms < FLASHINFER_SAMPLER_MIN_SMS:
        return False, f"{sms} SMs: FlashInfer's sampler needs more than {FLASHINFER_SAMPLER_MIN_SMS - 1}"
    return True, f"compute capability {sm / 10:.1f} takes FlashInfer's sampler"


def topk_sm_buffer(rows: int, vocab: int, sms: int, min_rows: int = TRITON_TOPK_MIN_ROWS) -> tuple[int, str]:
    """The Triton top-k/top-p kernel's cached fp32 buffer: min(next_pow2(P), SMs) x vocab x 4 B,
    P = min(SMs, rows) (vllm==0.19.0: v1/sample/ops/topk_topp_triton.py:1010-1021). It is
    allocated by the dummy sampler run through torch's caching allocator and stays referenced by
    _TRITON_BUFFER_CACHE (nothing in vLLM calls reset_buffer_cache), so it counts in the profile peak.
    ``min_rows``: fewer rows take PyTorch's sort instead (before 0.33)."""
    if rows < min_rows:
        return 0, f"{rows} rows < {TRITON_TOPK_MIN_ROWS}: PyTorch sort, no Triton buffer"
    programs = min(sms, rows)
    size = min(1 << (programs - 1).bit_length(), sms)
    total = size * vocab * 4
    return total, f"Triton top-k/top-p buffer min(next_pow2({programs}), {sms} SMs) = {size} x vocab {vocab} x 4 B = {figure(total)}"


def v2_gumbel_tables(rows: int, vocab: int) -> tuple[int, str]:
    """The Gumbel kernel's per-block argmax (int64) and max (fp32) tables over ``rows`` logits rows:
    rows x cdiv(vocab, 1024) x 12 B (vllm==0.29.0: v1/worker/gpu/sample/gumbel.py:275-279)."""
    blocks = cdiv(vocab, V2_GUMBEL_BLOCK)
    total = rows * blocks * V2_GUMBEL_BYTES
    return total, f"Gumbel tables {rows} rows x {blocks} blocks x {V2_GUMBEL_BYTES} B = {figure(total)}"


def forward_per_token(s: Shapes, tp: int) -> tuple[int, str]:
    """Largest live intermediates of one decoder layer per token on one rank, plus the
    residual and hidden states (2 x hidden)."""
    dt = s.dtype_bytes
    attn = (2 * s.q_width + 2 * s.kv_width) // tp * dt  # q, k, v and the attention output
    # gate_up output (2 I) + the activation's output (I), FP8 where the next GEMM takes FP8 input
    act = s.mlp_act_bytes or dt
    mlp = 3 * s.intermediate // tp * dt if act == dt else 2 * s.intermediate // tp * dt + s.intermediate // tp * act
    moe_tp = tp if s.experts_sliced else 1
    moe = (s.top_k * (3 * s.moe_intermediate // moe_tp + s.hidden) + 4 * s.experts) * dt if s.experts else 0
    width = max(attn, mlp, moe)
    which = "fused-MoE workspace" if width == moe and moe else ("MLP" if width == mlp else "attention")
    if which == "MLP" and s.mlp_act_bytes and s.mlp_act_bytes != dt:
        which = f"MLP, activation output in FP8 ({s.mlp_act_bytes} B)"
    return width + 2 * s.hidden * dt, which


def fp8_mlp_activation(arch: dict, cli_method: str | None, sm: int, compiled: bool) -> bool:
    """Whether the profile forward's MLP activation output is FP8 rather than the model dtype: W8A8 FP8
    weights on a GPU with FP8 units (compute capability 8.9+, else Marlin serves them weight-only: fp8_marlin),
    torch.compile on. The down projection quantizes its input to FP8 (QuantFP8, vllm==0.23.0:
    model_executor/layers/quantization/input_quant_fp8.py); the SiLU-and-mul before it is fused with that
    quantization, by vLLM's fuse_act_quant pass where the custom ops are on and by Inductor otherwise
    (config/vllm.py:116-126 enable_act_fusion, "otherwise Inductor handles fusion"), so the model-dtype
    activation is never materialized. Not block FP8 (weight_block_size): its 1 x 128 group quantization of the
    activation is vLLM's own Triton kernel (per_token_group_quant_fp8), which Inductor does not fuse; a public
    0.10.2 H100 start of Qwen3-32B-FP8 (set 16) fits the model-dtype activation. --enforce-eager runs the ops one
    by one. ROCm (sm 0 here): not read."""
    if not compiled or sm < 89:
        return False
    raw = arch.get("quantization_config")
    q: dict = raw if isinstance(raw, dict) else {}
    method = (cli_method or str(q.get("quant_method") or "")).lower()
    if fp4_group(q, method):  # ModelOpt's NVFP4 shares its method name with ModelOpt FP8
        return False
    if method in FP8_METHODS:
        return not q.get("weight_block_size")
    if method != "compressed-tensors":
        return False
    for group in config_groups(q):
        w, a = group.get("weights"), group.get("input_activations")
        if isinstance(w, dict) and isinstance(a, dict) and w.get("num_bits") == 8 and a.get("num_bits") == 8:
            return w.get("type") == "float" and a.get("type") == "float" and w.get("strategy") != "block"
    return False


def _round256(n: int) -> int:
    return cdiv(n, 256) * 256


def moe_workspace(s: Shapes, tp: int, mnbt: int, line: RuleLine) -> tuple[int, str]:
    """The fused-MoE workspace the profile forward leaves in the WorkspaceManager (TritonExperts,
    the unquantized CUDA path). Per chunk of M tokens, N = 2 x moe_intermediate / TP (w13 shard),
    K = hidden: workspace13 (M, top_k, max(N/2, K)), shared with the output (M, K), and
    workspace2 (M, top_k, max(N, K)) in the activation dtype, each rounded up to 256 B
    (vllm==0.19.0: model_executor/layers/fused_moe/fused_moe.py:1976-1991 workspace_shapes,
    modular_kernel.py:1033-1066 _allocate_buffers, v1/worker/workspace.py:90-117 get_simultaneous).
    0.14-0.17 chunk M at VLLM_FUSED_MOE_CHUNK_SIZE and then hold the full output apart."""
    if not s.experts or not line.moe_workspace_kept:
        return 0, "no MoE layer" if not s.experts else "freed after each fused_experts call (vLLM before 0.14)"
    n, k, dt = 2 * s.moe_intermediate // (tp if s.experts_sliced else 1), s.hidden, s.dtype_bytes
    chunk = min(mnbt, line.moe_chunk_tokens) if line.moe_chunk_tokens else mnbt
    ws13 = chunk * s.top_k * max(n // 2, k)
    ws2 = chunk * s.top_k * max(n, k)
    out = mnbt * k
    if chunk == mnbt:
        total = _round256(max(ws13, out) * dt) + _round256(ws2 * dt)
    else:
        total = _round256(ws13 * dt) + _round256(ws2 * dt) + _round256(out * dt)
    return total, (
        f"fused-MoE workspace kept by vLLM's WorkspaceManager: {chunk} tokens x top_k {s.top_k} x "
        f"(max({n // 2}, {k}) + max({n}, {k})) x {dt} B = {figure(total)}"
    )


# Tensors of the IntermediateTensors that a PP rank other than the first receives into: "hidden_states"
# and "residual" (vllm==0.19.0: model_executor/models/llama.py:393-395, the keys most decoder models pass
# to make_empty_intermediate_tensors_factory, models/utils.py:694-705)
PP_INTERMEDIATE_KEYS = 2


def pp_intermediate_buffers(s: Shapes, mnbt: int) -> int:
    """The receive buffers of a V1-runner worker on a PP rank other than the first: the profile run's
    _dummy_run creates them when ``self.intermediate_tensors`` is still None, ``torch.zeros``
    (max_num_tokens, hidden) per key in the model dtype, and keeps them on the runner
    (vllm==0.19.0: v1/worker/gpu_model_runner.py:5437-5451; max_num_tokens = max_num_batched_tokens,
    :437). So they are allocated inside the profiling window and live under the forward and the
    dummy sampler. The first rank passes intermediate_tensors=None and allocates none."""
    return PP_INTERMEDIATE_KEYS * mnbt * s.hidden * s.dtype_bytes


def _block(n: int) -> int:
    """torch's caching allocator rounds every block up to 512 B (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize)."""
    return cdiv(n, ALLOC_BLOCK) * ALLOC_BLOCK


def compile_examples(s: Shapes, tp: int, mnbt: int) -> tuple[int, str]:
    """A cold torch.compile inside the profile run (RuleLine.compile_examples): Inductor autotunes
    each generated Triton kernel at compile time on random example tensors of its arguments, sized by
    the size hints of the first call, max_num_batched_tokens (torch==2.13.0: _inductor/codegen/
    wrapper.py:2253-2300, select_algorithm.py:5751-5772). The largest set is the model's first kernel,
    the embedding gather: the rank's whole embedding table (vocab padded to 64, divided by TP: vllm==0.29.0
    model_executor/layers/vocab_parallel_embedding.py:88-95, :272-316), the token ids (int32), and its
    outputs of max_num_batched_tokens x hidden: with TP 1 fused with layer 0's RMSNorm (the embeddings,
    kept as the residual, and the normed states, + the norm weight), with TP > 1 the masked gather
    before the all-reduce. Live together, freed before the forward runs."""
    dt = s.dtype_bytes
    rows = cdiv(s.vocab, VOCAB_PAD) * VOCAB_PAD // tp
    outputs = 2 if tp == 1 else 1
    table = _block(rows * s.hidden * dt)
    states = outputs * _block(mnbt * s.hidden * dt)
    small = _block(mnbt * 4) + (_block(s.hidden * dt) if tp == 1 else 0)
    total = table + states + small
    return total, (
        f"cold torch.compile's autotune examples of the embedding kernel: table {rows} x {s.hidden} x {dt} B "
        f"= {figure(table)} + {outputs} x {mnbt} x {s.hidden} x {dt} B"
    )


def v2_sampler_state(s: Shapes, max_num_seqs: int) -> tuple[int, str]:
    """Model runner V2's penalty state, allocated by load_model on the last PP rank after the weights
    are measured (vllm==0.29.0: v1/worker/gpu/model_runner.py:436-448, sample/penalties.py:31-42):
    output_bin_counts max_num_seqs x vocab int32 and prompt_bin_mask max_num_seqs x cdiv(vocab, 32)
    int32. Charged where vLLM counts the free-memory delta (RuleLine.free_delta_accounting)."""
    counts = _block(max_num_seqs * s.vocab * 4)
    mask = _block(max_num_seqs * cdiv(s.vocab, 32) * 4)
    return counts + mask, (
        f"model runner V2 penalty state {max_num_seqs} seqs x vocab {s.vocab} x 4 B + bit mask = {figure(counts + mask)}"
    )


AWQ_DEQUANT_TOKENS = 256  # awq.py FP16_MATMUL_HEURISTIC_CONDITION


BNB_DEQUANT_TOKENS = 1537  # bitsandbytes 0.50's fused 4-bit GEMM takes up to 1536 rows (0.48-0.49: any row count > 1)


def dequant_bytes(s: Shapes, tp: int, mnbt: int) -> tuple[int, str]:
    """The dense linear weight a quantized kernel dequantizes whole in the profile forward, on one rank: plain AWQ's
    widest packed layer (qkv or gate_up) from 256 tokens (Shapes.awq_dequant), bitsandbytes 4-bit's widest single
    shard (Shapes.bnb_dequant). MoE experts take other kernels."""
    mlp = 0 if s.experts else s.intermediate // tp * s.hidden
    if s.awq_dequant and mnbt >= AWQ_DEQUANT_TOKENS:
        return max(s.hidden * (s.q_width + 2 * s.kv_width) // tp, 2 * mlp) * s.dtype_bytes, "the widest AWQ weight"
    if s.bnb_dequant and mnbt >= BNB_DEQUANT_TOKENS:
        return max(s.hidden * s.q_width // tp, mlp) * s.dtype_bytes, "the widest bitsandbytes shard"
    return 0, ""


def profile_peak(
    s: Shapes, tp: int, mnbt: int, rows: int, bpe: int, kept: int = 0, scratch: int = 0,
    scratch_name: str = "sampler scratch", resident: int = 0, examples: tuple[int, str] = (0, ""),
) -> tuple[int, str]:
    """torch peak increase of profile_run: max(forward, kept + retained hidden states + sampler,
    ``examples``: a cold compile's autotune examples, compile_examples).
    ``kept``: what the forward leaves allocated under the sampler run (the fused-MoE workspace);
    the forward's own MoE width already counts it. ``scratch``: the sampler's cached Triton
    top-k/top-p buffer (topk_sm_buffer), live at the sampler's peak (probs + q), or model runner
    V2's Gumbel tables (v2_gumbel_tables), live beside the logits. ``resident``: allocated in the
    profile run before the forward and live to its end (pp_intermediate_buffers), on both sides."""
    per_token, which = forward_per_token(s, tp)
    dequant, what = dequant_bytes(s, tp, mnbt)
    forward = mnbt * per_token + resident + dequant
    if dequant:
        which += f"; + {what} dequantized, {figure(dequant)}"
    retained = mnbt * s.hidden * s.dtype_bytes
    sampler = sampler_peak(rows, s.vocab, bpe)
    pp_how = f" + PP receive buffers {figure(resident)}" if resident else ""
    side = kept + retained + sampler + scratch + resident
    if examples[0] > max(forward, side):
        return examples[0], (
            f"{examples[1]} = {figure(examples[0])} > forward over {mnbt} tokens {figure(forward)} and sampler run {figure(side)}"
        )
    if forward > side:
        return forward, f"forward over {mnbt} tokens ({which}) = {figure(forward - resident)}{pp_how} > sampler run"
    return kept + retained + sampler + scratch + resident, (
        f"dummy sampler: {rows} seqs x vocab {s.vocab} x {bpe} B = {figure(sampler)} "
        f"+ {mnbt} retained hidden states" + (f" + fused-MoE workspace {figure(kept)}" if kept else "")
        + (f" + {scratch_name} {figure(scratch)}" if scratch else "") + pp_how
        + f" (forward {figure(forward)} is lower)"
    )
