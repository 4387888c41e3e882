"""Gemma 4's parameters for the weights estimate: per-layer attention geometry, KV-shared layers, the parallel
MoE block, per-layer embeddings (PLE), the vision tower and the two RoPE tables.

What vLLM builds (vllm==0.33.0: model_executor/models/gemma4.py) from transformers' config
(transformers==5.24.0: models/gemma4/configuration_gemma4.py, modeling_gemma4.py):
- attention: q_proj heads x d and o_proj, d = global_head_dim on full layers, head_dim on sliding ones; k_proj and
  v_proj of the layer's KV heads, except that K = V full layers (attention_k_eq_v) ship k_proj only and KV-shared
  layers only q_proj (gemma4.py:403-446); q_norm and k_norm of d each (v_norm has no weight);
- MLP: gate, up, down of intermediate_size, twice as wide on KV-shared layers with use_double_wide_mlp
  (:597-607); with num_experts, a router (hidden x experts, a scale and per-expert scales) and experts of
  moe_intermediate_size run beside the dense MLP, with three more norms (:628-668; modeling_gemma4.py:1263-1305);
- four norms per layer and a one-element layer_scalar buffer; PLE, where hidden_size_per_layer_input > 0: a
  vocab_size_per_layer_input x (layers x hpl) embedding and a hidden x (layers x hpl) projection on the model,
  a gate and a projection per layer (:671-700);
- vision: transformers' Gemma4VisionModel through AutoModel, whole on every rank (gemma4_mm.py:1102): per layer
  four hidden^2 projections, q/k norms of head_dim, a gated MLP and four norms; the patch embedder's
  3 x patch^2 x hidden input projection and (2, position_embedding_size, hidden) position table; with
  standardize a bias and a scale; then embed_vision's hidden_v x hidden projection (modeling_gemma4.py:575-584);
- RoPE: one cos/sin table per layer type at max_position_embeddings rows, in the model dtype; the full layers'
  "proportional" RoPE keeps rotary_dim = head_size (512) whatever partial_rotary_factor
  (vllm==0.33.0: rotary_embedding/gemma4_rope.py:31-55, base.py:58-63).
The audio tower (Gemma 4 E2B/E4B) is not counted.
"""

from __future__ import annotations

from kvcalc.core.mixers import arch_int

GEMMA4_TEXT_TYPES = ("gemma4_text",)
PATTERN = 6  # five sliding layers, then one full
GLOBAL_HEAD_DIM = 512  # transformers' default global_head_dim


def layer_types(a: dict, n: int) -> list[str]:
    """"full_attention" / "sliding_attention" per layer, as transformers fills and forces them."""
    types = a.get("layer_types")
    if not isinstance(types, list) or len(types) != n:
        types = ["sliding_attention" if (i + 1) % PATTERN else "full_attention" for i in range(n)]
    return [*types[:-1], "full_attention"] if n else []


def full_geometry(a: dict, kv_heads: int) -> tuple[int, int]:
    """(KV heads, head size) of a full-attention layer: num_global_key_value_heads with attention_k_eq_v,
    else the sliding layers' ``kv_heads``; global_head_dim."""
    if a.get("attention_k_eq_v") and a.get("num_global_key_value_heads") is not None:
        kv_heads = arch_int(a, "num_global_key_value_heads")
    return kv_heads, arch_int(a, "global_head_dim", default=GLOBAL_HEAD_DIM)


def _geometry(a: dict, full: bool) -> tuple[int, int]:
    """(KV heads, head size) of a full or sliding layer."""
    kv, d = arch_int(a, "num_key_value_heads"), arch_int(a, "head_dim")
    return full_geometry(a, kv) if full else (kv, d)


def gemma4_layer_params(a: dict, i: int, n: int, h: int, heads: int) -> tuple[int, int, int]:
    """(attention, dense MLP with the norms beyond two, experts) parameters of decoder layer i."""
    full = layer_types(a, n)[i] == "full_attention"
    kv, d = _geometry(a, full)
    shared = i >= n - arch_int(a, "num_kv_shared_layers")
    k_eq_v = full and bool(a.get("attention_k_eq_v"))
    kv_mats = 0 if shared else (1 if k_eq_v else 2)
    attn = 2 * h * heads * d + kv_mats * h * kv * d + d + (0 if shared else d)
    inter = arch_int(a, "intermediate_size") * (2 if shared and a.get("use_double_wide_mlp") else 1)
    dense = 3 * h * inter + 2 * h + 1  # + input/post-attention norms beside the generic two, layer_scalar
    hpl = arch_int(a, "hidden_size_per_layer_input")
    if hpl:
        dense += 2 * h * hpl + h
    experts = arch_int(a, "num_experts")
    if not experts:
        return attn, dense, 0
    moe_inter = arch_int(a, "moe_intermediate_size", "expert_intermediate_size")
    dense += h * experts + h + experts + 3 * h
    return attn, dense, 3 * experts * h * moe_inter


def ple_params(a: dict, n: int, h: int) -> int:
    """The per-layer embedding table and its model projection (0 without PLE)."""
    hpl = arch_int(a, "hidden_size_per_layer_input")
    if not hpl:
        return 0
    vocab = arch_int(a, "vocab_size_per_layer_input", "vocab_size")
    return vocab * n * hpl + h * n * hpl + hpl


def gemma4_vision_params(a: dict, h: int) -> int:
    """Gemma 4's vision tower and its projector into the decoder (0 without a gemma4_vision config)."""
    v = a.get("vision_config")
    if not isinstance(v, dict) or v.get("model_type") != "gemma4_vision":
        return 0
    hv, inter = arch_int(v, "hidden_size"), arch_int(v, "intermediate_size")
    d, patch = arch_int(v, "head_dim", default=hv // max(arch_int(v, "num_attention_heads"), 1)), arch_int(v, "patch_size")
    per_layer = 4 * hv * hv + 2 * d + 3 * hv * inter + 4 * hv
    embedder = 3 * patch * patch * hv + 2 * arch_int(v, "position_embedding_size") * hv + (2 * hv if v.get("standardize") else 0)
    return arch_int(v, "num_hidden_layers") * per_layer + embedder + hv * h


def rope_table_elements(a: dict) -> tuple[int, str]:
    """Elements of the sliding and full layers' cos/sin tables (one each; get_rope shares them)."""
    rows = arch_int(a, "max_position_embeddings", default=131072)
    sliding, full = arch_int(a, "head_dim"), arch_int(a, "global_head_dim", default=512)
    return rows * (sliding + full), f"RoPE cos/sin tables {rows:,} positions x ({sliding} sliding + {full} full)"
