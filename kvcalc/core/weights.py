"""Weights per rank, ESTIMATED from the config's architecture numbers (an estimate, never
a measurement: exact checkpoint bytes replace it when known, ``--weights-bytes`` too).

Counts the linear layers of attention (MHA/GQA/MLA), MLP (dense, gated or not; MoE with
shared experts; dense-first layers), mamba/GDN mixers, embeddings and the LM head
(vocab-parallel: embedding on the first PP stage, LM head on the last, tied or not).
TP divides every linear layer and the vocabulary; replicated KV heads are not divided.
Quantized checkpoints (``quantization_config`` or ``--quantization``, as vLLM spells it):
fp8 linear layers 1 B/param (+ block scales); awq/gptq ``bits``/8 + a 16-bit scale (and
zero point) per group; bitsandbytes nf4 4.5 bits (4.127 with double quantization);
compressed-tensors by its weights' ``num_bits``; mxfp4 experts 4.25 bits/param (padded, with
bf16 biases, under vLLM's Marlin MoE kernel; gpt-oss adds its fp32 YaRN table).
Embeddings, LM head and norms stay in the model dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from kvcalc.core.dtypes import MODEL_DTYPES
from kvcalc.core.gemma4_weights import (
    GEMMA4_TEXT_TYPES,
    gemma4_layer_params,
    gemma4_vision_params,
    ple_params,
    rope_table_elements,
)
from kvcalc.core.mixers import EXPERT_KEYS, arch_int, mixer_params, nemotron_h_params
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan, pp_ranges
from kvcalc.core.quant import quant_bytes
from kvcalc.core.record import record
from kvcalc.core.towers import (
    gemma3_siglip_params,
    llama4_vision_params,
    llava_clip_params,
    qwen3_vl_tower_params,
    qwen25_vl_tower_params,
)
from kvcalc.core.weight_tensors import stage_slack
from kvcalc.errors import ConfigError


@record
class WeightEstimate:
    parameters: int  # whole model
    bytes_per_stage: tuple[int, ...]  # per GPU of each PP stage
    method: str


_get = arch_int


def _layer_params(model: ModelSpec, a: dict, i: int, kind: str) -> tuple[int, int, int]:
    """(attention-or-mixer params, dense-MLP params, expert params) of decoder layer i."""
    h = _get(a, "hidden_size", "d_model", "n_embd")
    heads = model.num_attention_heads
    if model.model_type in GEMMA4_TEXT_TYPES:  # per-layer geometry, KV-shared layers, MoE beside the MLP, PLE
        return gemma4_layer_params(a, i, model.num_layers, h, heads)
    attn = 0
    if kind == "mamba":
        attn = mixer_params(a, h)
    elif model.mla:
        q_lora = _get(a, "q_lora_rank")
        nope, rope, v = _get(a, "qk_nope_head_dim"), _get(a, "qk_rope_head_dim"), _get(a, "v_head_dim")
        kv_lora = _get(a, "kv_lora_rank")
        q = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
        attn = q + h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
    else:
        d = model.head_dim
        attn = h * heads * d * (1 + _output_gate(model, a)) + 2 * h * model.num_kv_heads * d + heads * d * h
    if model.model_type == "nemotron_h":  # one block per layer: the mixer or attention above, an MLP or a MoE
        return nemotron_h_params(a, i, h, attn)
    inter = _get(a, "intermediate_size", "ffn_dim", "d_ff", "n_inner", default=4 * h)
    # Llama 4's dense layers take intermediate_size_mlp (vllm==0.19.0: model_executor/models/llama4.py:356-363)
    dense_inter = _get(a, "intermediate_size_mlp", default=inter) if model.model_type in LLAMA4_TYPES else inter
    mlp_mult = 3 if gated_mlp(model, a) else 2
    if not moe_layer(model, a, i):
        return attn, mlp_mult * h * dense_inter, 0
    experts, moe_inter, shared_inter = moe_widths(model, a)
    dense = mlp_mult * h * shared_inter + h * experts
    return attn, dense, experts * mlp_mult * h * moe_inter


def moe_layer(model: ModelSpec, a: dict, i: int) -> bool:
    """Whether decoder layer i holds routed experts (first_k_dense_replace, decoder_sparse_step, mlp_only_layers;
    Jamba's expert period and offset)."""
    if _get(a, *EXPERT_KEYS) <= 0:
        return False
    if model.model_type == "jamba":
        period = _get(a, "expert_layer_period", default=2)
        if period < 1:
            raise ConfigError(f"config field 'expert_layer_period' must be >= 1, got {period}")
        return i % period == _get(a, "expert_layer_offset", default=1)
    step = _get(a, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1
    mlp_only = a.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise ConfigError(f"config field 'mlp_only_layers' must be a list of layer indices, got {mlp_only!r}")
    return not (i < _get(a, "first_k_dense_replace") or i in mlp_only or (i + 1) % step)


def moe_widths(model: ModelSpec, a: dict) -> tuple[int, int, int]:
    """(routed experts, an expert's intermediate width, the shared experts' total width) of a MoE layer. Llama 4's
    MoE layer always holds one shared expert of intermediate_size, with no config key saying so (vllm==0.19.0:
    model_executor/models/llama4.py:105-112, n_shared_experts = 1 at :125)."""
    inter = _get(a, "intermediate_size", "ffn_dim", "d_ff", "n_inner", default=4 * _get(a, "hidden_size"))
    moe_inter = _get(a, "moe_intermediate_size", default=inter)
    shared = _get(a, "n_shared_experts", "num_shared_experts", default=1 if model.model_type in LLAMA4_TYPES else 0)
    return _get(a, *EXPERT_KEYS), moe_inter, _get(a, "shared_expert_intermediate_size", default=shared * moe_inter)


GATED_ATTENTION_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def _output_gate(model: ModelSpec, a: dict) -> int:
    """1 where the q projection also yields a sigmoid output gate per head: Qwen3NextAttention, which Qwen3-Next and
    Qwen3.5/3.6 use, builds qkv_proj with heads x (1 + attn_output_gate), default True (vllm==0.27.1:
    model_executor/models/qwen3_next.py:263-272; qwen3_5.py:150-157)."""
    return int(model.model_type in GATED_ATTENTION_TYPES and a.get("attn_output_gate", True) is not False)


def gated_mlp(model: ModelSpec, a: dict) -> bool:
    """Whether the MLP is gated (gate and up): Falcon's is dense_h_to_4h, GELU, dense_4h_to_h
    (vllm==0.22.0: models/falcon.py:235-250), StarCoder2's and Whisper's GELU MLPs are plain."""
    plain = str(a.get("hidden_act") or a.get("activation_function") or "").startswith("gelu") and model.model_type in ("starcoder2", "whisper")
    return not (plain or model.model_type == "falcon")


ALWAYS_TIED = ("gemma", "gemma2")
# config classes whose tie_word_embeddings defaults to True when config.json leaves the key out (transformers 5.24:
# models/gemma3/configuration_gemma3.py:88, :212; starcoder2/configuration_starcoder2.py:80; falcon/
# configuration_falcon.py:88; PretrainedConfig's own default), and vLLM's model code ties on it (vllm==0.22.0:
# models/gemma3.py:476-477, starcoder2.py:320, falcon.py:495-502). Llama, Qwen, Mistral, Phi-3, OLMo, gpt-oss,
# DeepSeek and the others kvcalc reads default to False.
TIED_BY_DEFAULT = ("gemma3", "gemma3_text", "starcoder2", "falcon")
LLAMA4_TYPES = ("llama4_text", "llama4")
# Model types whose vLLM model file passes config.max_position_embeddings to get_rope without a dtype
# (vllm==0.19.0: model_executor/models/llama.py:268, :247; llama4.py:333, :248-253; qwen2.py:269;
# qwen3.py:192; qwen2_moe.py:299; qwen3_moe.py:370; mixtral.py:251; gemma2.py:203, :151-156), so the
# table is built in the default dtype, which the loader sets to the model dtype (model_loader/
# base_loader.py:53). RoPE kinds whose table is positions x rotary_dim: the base RotaryEmbedding
# (rotary_embedding/base.py:58-63, :83-92) and Llama3RotaryEmbedding, which only rescales inv_freq
# (llama3_rope.py:33-54). Others (YaRN, dynamic NTK, longrope, MLA's DeepSeek scaling) size it otherwise: not counted.
# Mistral: vllm==0.10.2 maps MistralForCausalLM to LlamaForCausalLM (model_executor/models/registry.py:112),
# whose attention calls get_rope without a dtype (llama.py:228-236).
# Granite 4.0 (granitemoehybrid) the same, when position_embedding_type is "rope" (vllm==0.11.0:
# models/granitemoehybrid.py:254-262).
ROPE_TABLE_TYPES = (
    "llama", "llama4_text", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "gemma2", "mistral", "granitemoehybrid",
    "qwen2_5_vl", "qwen3_5_text", "qwen3_5_moe_text",
)
ROPE_TABLE_KINDS = ("default", "llama3")
GEMMA3_TYPES = ("gemma3", "gemma3_text")
def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def marlin_mxfp4_expert_bytes(experts: int, hidden: int, moe_inter: int, tp: int) -> int:
    """Bytes of one MoE layer's MXFP4 experts on one TP rank under vLLM's Marlin MoE kernel
    (without it: 4.25 bits per parameter, ``quant_bytes``). Marlin (vLLM's create_weights,
    vllm==0.10.1.1: model_executor/layers/quantization/mxfp4.py:154-260; vllm==0.11.0: :187-300;
    vllm==0.19.0: fused_moe/oracle/mxfp4.py:380-385): the per-rank intermediate size padded to
    128, the hidden size to 256; w13 (2 I x H) and w2 (H x I) at 1/2 B per value + 1/32 B of
    scale, and the bf16 biases (2 I and H per expert) that gpt-oss carries, padded too; the
    repack keeps those sizes (utils/marlin_utils_fp4.py:195-297 in 0.10.1.1)."""
    i, h = _round_up(max(moe_inter // max(tp, 1), 1), 128), _round_up(hidden, 256)
    values = 3 * i * h  # w13: 2 I x H, w2: H x I
    return experts * (values // 2 + values // 32 + (2 * i + h) * 2)


def triton_mxfp4_expert_bytes(experts: int, hidden: int, moe_inter: int, tp: int, keep_scales: bool = True) -> int:
    """Bytes of one MoE layer's MXFP4 experts on one TP rank under vLLM's Triton MoE backend on Hopper
    (triton_kernels' matmul_ogs, the default on sm90 from 0.12: vllm==0.15.1: model_executor/layers/quantization/
    mxfp4.py:322-329, 745-785; vllm==0.19.0: fused_moe/oracle/mxfp4.py:376-400, 721-746 with quantization/mxfp4.py:
    297-308): the per-rank intermediate size padded to 64; the values at 1/2 B; the checkpoint's scales (1/32 B a
    value) kept as the layer's parameters, beside the swizzled copy the kernel reads, whose rows
    HopperMXScaleLayout pads to 2 x num_warps(8) x 2 x 8 = 256 (third_party/triton_kernels/tensor_details/
    layout_details/hopper_scale.py:22-30; w13's 2 I rows, w2's H rows); the biases cast to fp32. From 0.25 the
    checkpoint-layout scales are deleted once swizzled (``keep_scales`` False: vllm==0.25.0 oracle/mxfp4.py:1150-1157)."""
    i = _round_up(max(moe_inter // max(tp, 1), 1), 64)
    values = 3 * i * hidden
    swizzled = _round_up(2 * i, 256) * (hidden // 32) + _round_up(hidden, 256) * (i // 32)
    return experts * (values // 2 + (values // 32 if keep_scales else 0) + swizzled + (2 * i + hidden) * 4)


# MXFP4 expert layouts by MoE kernel: bytes of one layer's experts on a rank, and how the source names it
MXFP4_LAYOUTS = {
    "marlin": (marlin_mxfp4_expert_bytes, ", padded for vLLM's Marlin MoE kernel (+ bf16 expert biases)"),
    "triton": (triton_mxfp4_expert_bytes, ", laid out for vLLM's Triton MoE kernel on Hopper (intermediate padded to 64, "
               "the checkpoint's scales beside their swizzled copy, fp32 expert biases)"),
    "triton_freed": (lambda e, h, i, tp: triton_mxfp4_expert_bytes(e, h, i, tp, keep_scales=False),
                     ", laid out for vLLM's Triton MoE kernel on Hopper (intermediate padded to 64, swizzled scales only: "
                     "0.25+ frees the checkpoint's, fp32 expert biases)"),
}


def yarn_table_bytes(model: ModelSpec, a: dict) -> int:
    """gpt-oss builds its YaRN cos/sin table in fp32 (vllm==0.10.1.1: models/gpt_oss.py:48-66,
    dtype=torch.float32): original_max_position_embeddings x factor positions x head_dim x 4 B,
    one buffer shared by every layer (rotary_embedding/__init__.py:21-62 caches it;
    yarn_scaling_rope.py:60-62 sizes it). Other models' tables are not counted."""
    rope = a.get("rope_scaling")
    if model.model_type != "gpt_oss" or not isinstance(rope, dict):
        return 0
    factor = rope.get("factor")
    orig = rope.get("original_max_position_embeddings")
    if not isinstance(factor, (int, float)) or not isinstance(orig, int) or not 0 < factor <= 1024:
        return 0
    return int(orig * factor) * model.head_dim * 4


def rope_table_bytes(model: ModelSpec, a: dict, dt: int, mrope_factor: int = 4) -> tuple[int, str]:
    """The RoPE cos/sin table vLLM keeps on the GPU as a buffer of the model (not a checkpoint
    tensor, but allocated while loading, so "Model loading took" counts it): max_position_embeddings
    x rotary_dim elements (cos and sin halves), cast to the model dtype (vllm==0.19.0:
    model_executor/layers/rotary_embedding/base.py:58-63, :83-92). One table per process:
    get_rope caches it by its arguments, so every layer shares it (rotary_embedding/__init__.py:68-78).
    gpt-oss: the fp32 YaRN table (yarn_table_bytes). Multimodal RoPE (an mrope_section: Qwen2.5-VL, Qwen3.5/3.6):
    ``mrope_factor`` x max_position_embeddings rows (core.towers.mrope_rows_factor), its partial rotary factor
    where the config gives it, in the RoPE parameters too. Types and RoPE kinds not read: 0."""
    if model.model_type == "gpt_oss":
        table = yarn_table_bytes(model, a)
        return table, f"fp32 YaRN table {table:,} B" if table else ""
    if model.model_type in GEMMA4_TEXT_TYPES:
        elements, what = rope_table_elements(a)
        return elements * dt, f"{what} x {dt} B = {elements * dt:,} B"
    gemma3 = model.model_type in GEMMA3_TYPES
    if model.mla or (model.model_type not in ROPE_TABLE_TYPES and not gemma3):
        return 0, ""
    if a.get("position_embedding_type", "rope") != "rope":  # Granite 4.0-H: no RoPE (granitemoehybrid.py:254)
        return 0, ""
    rope = a.get("rope_scaling") if a.get("rope_scaling") is not None else a.get("rope_parameters")
    kind = str(rope.get("rope_type") or rope.get("type") or "default") if isinstance(rope, dict) else "default"
    mrope = isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list) or kind == "mrope"
    prf = a.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0) if isinstance(rope, dict) else 1.0)
    if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
        return 0, ""
    positions, rot = _get(a, "max_position_embeddings", default=8192), int(model.head_dim * prf)
    if mrope:
        table = positions * mrope_factor * rot * dt
        return table, f"multimodal RoPE cos/sin table {mrope_factor} x {positions:,} positions x {rot} x {dt} B = {table:,} B"
    # Gemma 3's sliding layers build their own table, default RoPE at rope_local_base_freq, beside the global
    # layers' (a second get_rope key; vllm==0.19.0: models/gemma3.py:168-186, max_position at :250)
    local = positions if gemma3 and model.count("sliding") > 0 else 0
    rows = (positions if kind in ROPE_TABLE_KINDS else _linear_rows(rope, positions)) + local
    table = rows * rot * dt
    if not table:
        return 0, ""
    n = (rows > local) + (local > 0)
    return table, f"RoPE cos/sin table{'s' if n > 1 else ''} {rows:,} positions x {rot} x {dt} B = {table:,} B" + (
        f" (linear scaling: {rows - local:,} rows for the scaled layers)" if kind == "linear" else ""
    )


def _linear_rows(rope: object, positions: int) -> int:
    """Rows of a linear-scaling RoPE table: one block of max_position x factor rows per scaling factor
    (vllm==0.10.2 and 0.33.0: model_executor/layers/rotary_embedding/linear_scaling_rope.py:79-110, max_len =
    max_position_embeddings x scaling_factor; get_rope builds it for rope_type "linear", __init__.py). Gemma 3's
    global layers take the config's rope_scaling ({"rope_type": "linear", "factor": 8.0} in gemma-3-4b/27b-it),
    so their table is 8 x 131072 rows. 0 for any other kind."""
    if not isinstance(rope, dict) or str(rope.get("rope_type") or rope.get("type")) != "linear":
        return 0
    factors = rope.get("factor")
    factors = factors if isinstance(factors, list) else [factors]
    if not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1024 for f in factors):
        return 0
    return sum(int(positions * f) for f in factors)


def _stage_extras(
    model: ModelSpec, a: dict, tp: int, dt: int, towers_off: bool = False, mrope_factor: int = 4
) -> tuple[int, int, str]:
    """Bytes every PP stage holds besides its decoder layers (the RoPE table, Llama 4's vision tower,
    which vLLM builds on every rank: mllama4.py:758-770; LLaVA's CLIP tower, likewise: vllm==0.10.2
    llava.py:538-552, llava_next.py:253-265), the vision parameters of the whole model, and how.
    ``towers_off``: vLLM skips the tower (every limit of its modalities 0: core.towers.tower_skipped)."""
    table, how = rope_table_bytes(model, a, dt, mrope_factor)
    if towers_off:
        return table, 0, ", ".join(x for x in (how, "no vision tower (every modality limit 0)") if x)
    vision, h = a.get("vision_config"), _get(a, "hidden_size")
    llama4 = model.model_type in LLAMA4_TYPES and isinstance(vision, dict)
    towers: tuple[tuple[str, Callable[[int], int], str], ...] = (
        ("vision tower", lambda t: llama4_vision_params(vision, h, t) if llama4 else 0, "TP-sharded"),  # type: ignore[arg-type]
        ("SigLIP vision tower", lambda t: gemma3_siglip_params(a, h, t), "TP-sharded"),
        ("CLIP vision tower", lambda t: llava_clip_params(a, h, t), "TP-sharded"),
        ("Qwen3-VL vision tower", lambda t: qwen3_vl_tower_params(a, t), "TP-sharded"),
        ("Qwen2.5-VL vision tower", lambda t: qwen25_vl_tower_params(a, t), "TP-sharded"),
        # transformers' module through AutoModel: whole on every rank (vllm==0.33.0: gemma4_mm.py:1102)
        ("Gemma 4 vision tower", lambda t: gemma4_vision_params(a, h), "whole on every GPU"),
    )
    for label, params, split in towers:
        tower = params(tp) * dt
        if tower:
            how = ", ".join(x for x in (how, f"{label} + projector {tower:,} B ({split})") if x)
            return table + tower, params(1), how
    return table, 0, how


def estimate_weights(
    model: ModelSpec,
    plan: ParallelPlan,
    quantization: str | None = None,
    mxfp4_kernel: str = "",
    dtype: str | None = None,
    vllm_extras: bool = True,
    expert_ranks: int | None = None,
    fp8_marlin: bool = False,
    towers_off: bool = False,
    expandable: bool = False,
    mrope_factor: int = 4,
) -> WeightEstimate:
    """Parameters of the whole model and bytes per GPU of each PP stage (computed once per
    model, TP size, PP split and quantization). ``expert_ranks``: the ranks MoE experts are
    spread over whole under expert parallelism (TP x DP, vLLM's ep_size); None: TP slices each
    expert. ``fp8_marlin``: FP8 weights go through Marlin on this GPU (quant_bytes). ``mxfp4_kernel``: the MoE kernel vLLM loads MXFP4
    experts for on this GPU and release ("marlin", "triton" or "": kvcalc.core.quant.mxfp4_kernel), with its padding.
    ``dtype``: ``--dtype`` when it overrides the checkpoint's. ``vllm_extras``: add what vLLM's model
    code allocates while loading beside the decoder (its RoPE table, Llama 4's vision tower:
    ``_stage_extras``); False for SGLang, whose tables kvcalc.core.sglang.rope_cache_bytes counts.
    ``towers_off``: vLLM builds no vision tower (core.towers.tower_skipped). ``expandable``: PyTorch's allocator runs
    with expandable segments, which split every block (core.allocator): no segment slack. ``mrope_factor``: rows per
    position of a multimodal-RoPE table (core.towers.mrope_rows_factor)."""
    # ``arch`` is left out of a model's ==/hash: its identity is part of the key (the
    # cached model keeps it alive, so the id cannot be reused while the entry exists)
    return _estimate(model, id(model.arch), plan.tp, plan.pp, plan.pp_layers, quantization, mxfp4_kernel, dtype, vllm_extras, expert_ranks, fp8_marlin,
                     towers_off, expandable, mrope_factor)


@lru_cache(maxsize=256)
def _layer_table(model: ModelSpec, _arch_id: int) -> tuple[tuple[str, int, int, int], ...]:
    """Every decoder layer's kind and (attention-or-mixer, dense-MLP, expert) parameters: the same
    for every TP and PP split (a sweep over TP reads them once). ``_arch_id`` keys the config dict,
    which model equality leaves out."""
    kinds: dict[int, str] = {}
    for layer in model.layers:
        kinds.setdefault(layer.layer, "mamba" if layer.kind == "mamba" else layer.kind)
    out = []
    for i in range(model.num_layers):
        kind = kinds.get(i, "full")
        out.append((kind, *_layer_params(model, model.arch, i, kind)))
    return tuple(out)


@lru_cache(maxsize=512)
def _estimate(
    model: ModelSpec,
    _arch_id: int,
    tp: int,
    pp: int,
    pp_layers: tuple[int, ...] | None,
    quantization: str | None = None,
    mxfp4_kernel: str = "",
    dtype: str | None = None,
    vllm_extras: bool = True,
    expert_ranks: int | None = None,
    fp8_marlin: bool = False,
    towers_off: bool = False, expandable: bool = False, mrope_factor: int = 4,
) -> WeightEstimate:
    a = model.arch
    h = _get(a, "hidden_size", "d_model", "n_embd")
    vocab = _get(a, "vocab_size")
    dt = MODEL_DTYPES[dtype or model.dtype]
    quant = a.get("quantization_config") or {}
    quant = quant if isinstance(quant, dict) else {}
    method = quantization or str(quant.get("quant_method") or "").lower()
    linear_b, expert_b, quant_how = quant_bytes(quant, method, dt, fp8_marlin)
    mxfp4 = method == "mxfp4"
    padded = MXFP4_LAYOUTS.get(mxfp4_kernel) if mxfp4 else None
    if padded is not None:
        quant_how += padded[1]
    # Gemma and Gemma 2 share the embedding as the LM head whatever the config says: vLLM asserts
    # tie_word_embeddings and has no lm_head parameter (vllm==0.19.0: model_executor/models/
    # gemma2.py:391-392, logits from embed_tokens at :423; gemma.py:385-386)
    tie = a.get("tie_word_embeddings")
    tied = bool(tie) if tie is not None else a.get("model_type") in TIED_BY_DEFAULT
    tied = tied or a.get("model_type") in ALWAYS_TIED
    kv_replicated = (not model.mla) and model.num_kv_heads and tp > model.num_kv_heads
    total = 0.0
    per_layer_bytes = []
    for kind, attn, dense, exp in _layer_table(model, _arch_id):
        total += attn + dense + exp + 2 * h
        rank_attn = attn / tp
        if kv_replicated and kind != "mamba":
            kv = 2 * h * model.num_kv_heads * model.head_dim
            rank_attn = (attn - kv) / tp + 2 * h * model.head_dim
        # expert parallelism: whole experts, E / ep_size per rank (vllm==0.19.0: fused_moe/layer.py determine_expert_map)
        er = expert_ranks or tp
        exp_bytes = exp / er * expert_b
        if padded is not None and exp:
            n_exp = _get(a, *EXPERT_KEYS)
            inter = _get(a, "moe_intermediate_size", "intermediate_size")
            exp_bytes = padded[0](n_exp, h, inter, tp) if expert_ranks is None else padded[0](n_exp, h, inter, 1) / er
        per_layer_bytes.append(rank_attn * linear_b + dense / tp * linear_b + exp_bytes + 2 * h * dt)
    embed, ple = vocab * h, ple_params(a, model.num_layers, h) if model.model_type in GEMMA4_TEXT_TYPES else 0  # ple: stage 0
    total += embed + (0 if tied else embed) + ple
    if model.encoder_decoder:
        total *= 2  # the encoder: about as large as the decoder (estimate)
        per_layer_bytes = [2 * b for b in per_layer_bytes]
    ranges = pp_ranges(model.num_layers, pp, pp_layers)
    out = []
    table, vision_params, extra_how = _stage_extras(model, a, tp, dt, towers_off, mrope_factor) if vllm_extras else (0, 0, "")
    total += vision_params
    # what PyTorch's allocator counts beyond the tensors' sizes (core/weight_tensors.py): unquantized decoders
    # (Gemma 4: its tensor list, weight_tensors, is not modelled)
    plain = vllm_extras and not expandable and not model.encoder_decoder and linear_b == expert_b == dt and not mxfp4 and model.model_type not in (*GEMMA4_TEXT_TYPES, "nemotron_h")
    dims = (h, vocab, _get(a, *EXPERT_KEYS), gated_mlp(model, a), rope_table_bytes(model, a, dt, mrope_factor)[0])
    for s, (start, end) in enumerate(ranges):
        b = sum(per_layer_bytes[start:end]) + table
        if plain:
            ends = (s == 0, s == len(ranges) - 1, tied)
            b += stage_slack(model, _layer_table(model, _arch_id), (start, end), (tp, expert_ranks or tp), dt, ends, dims)
        if s == 0:
            b += (embed + ple) / tp * dt
        if s == len(ranges) - 1:
            b += embed / tp * dt + h * dt  # LM head (tied: the same size, held again on a different stage or shared)
            if tied and len(ranges) == 1:
                b -= embed / tp * dt
        out.append(int(b))
    how = "estimate from the config: attention + MLP/MoE + embeddings"
    if quant_how:
        how += f", {quant_how}"
    if extra_how:
        how += f"; per GPU also {extra_how}"
    return WeightEstimate(int(total), tuple(out), how)
