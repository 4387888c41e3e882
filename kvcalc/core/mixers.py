"""The architecture numbers the weights estimate reads (``arch_int``) and the parameters of one
state-space / linear-attention mixer at TP 1 (GDN, Mamba-2, Mamba-1), as vLLM builds them."""

from __future__ import annotations

import math

from kvcalc.errors import ConfigError, named

MAX_ARCH_NUMBER = 1 << 40  # no real architecture number is larger (as kvcalc.sources.config)
# the config keys that count a MoE layer's routed experts (DeepSeek, Qwen/gpt-oss, Mixtral/Granite spellings)
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def arch_int(a: dict, *keys: str, default: int = 0) -> int:
    """The first of ``keys`` the config gives as a number, as an int; ``default`` when none.
    Values that are not numbers are passed over (an estimate does without them); a number
    that is NaN, infinite, negative or beyond any real model is a ConfigError naming it."""
    for k in keys:
        v = a.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not ((isinstance(v, int) or math.isfinite(v)) and 0 <= v <= MAX_ARCH_NUMBER):
                raise ConfigError(
                    f"config field '{k}' is {v!r}; the weights estimate needs a non-negative number up to 2**40 "
                    f"(or pass {named('weights_bytes')} and {named('activation_bytes')})"
                )
            return int(v)
    return default


_get = arch_int


def mixer_params(a: dict, h: int) -> int:
    """One mamba-kind layer's mixer: Qwen3-Next's gated delta net (keys linear_*), Mamba-2 (mamba_n_heads:
    Granite 4.0-H) or Mamba-1 (Jamba)."""
    if "linear_num_value_heads" in a:
        kh, vh = _get(a, "linear_num_key_heads"), _get(a, "linear_num_value_heads")
        kd, vd = _get(a, "linear_key_head_dim"), _get(a, "linear_value_head_dim")
        conv = (2 * kh * kd + vh * vd) * _get(a, "linear_conv_kernel_dim", default=4)
        return h * (2 * kh * kd + 2 * vh * vd) + h * 2 * vh + conv + vh * vd * h
    if "mamba_n_heads" in a:
        return _mamba2_params(a, h)
    inner = _get(a, "mamba_expand", default=2) * h
    state, rank = _get(a, "mamba_d_state", default=16), _get(a, "mamba_dt_rank", default=max(1, h // 16))
    attn = h * 2 * inner + inner * _get(a, "mamba_d_conv", default=4) + inner * (rank + 2 * state)
    return attn + rank * inner + inner * state + inner + inner * h


def _mamba2_params(a: dict, h: int) -> int:
    """One Mamba-2 mixer at TP 1 as vLLM builds it (vllm==0.11.0: model_executor/layers/mamba/mamba_mixer2.py:
    in_proj hidden -> z, x, B, C, dt = inner + conv_dim + heads at :302-331; conv1d conv_dim x kernel at :290-325;
    A, D, dt_bias one per head at :417-423; the gated norm's inner weights at :442; out_proj inner -> hidden at
    :433-440), with inner = mamba_expand x hidden and conv_dim = inner + 2 x groups x state (:287; granitemoehybrid.py
    :53-66). Biases where mamba_conv_bias / mamba_proj_bias say so."""
    heads = _get(a, "mamba_n_heads")
    inner = _get(a, "mamba_inner") or _get(a, "mamba_expand", default=2) * h  # NemotronH: heads x head size
    conv_dim = inner + 2 * _get(a, "mamba_n_groups", default=1) * _get(a, "mamba_d_state", default=128)
    kernel = _get(a, "mamba_d_conv", default=4)
    proj_bias, conv_bias = bool(a.get("mamba_proj_bias")), a.get("mamba_conv_bias", True) is not False
    in_proj = h * (inner + conv_dim + heads) + proj_bias * (inner + conv_dim + heads)
    out_proj = inner * h + proj_bias * h
    return in_proj + conv_dim * kernel + conv_bias * conv_dim + 3 * heads + inner + out_proj


def nemotron_h_params(a: dict, i: int, h: int, mixer: int) -> tuple[int, int, int]:
    """(mixer-or-attention, dense, expert) parameters of NemotronH's decoder layer i, one block per character of
    hybrid_override_pattern (vllm==0.17.0: model_executor/models/nemotron_h.py): M a Mamba-2 mixer, * q, k, v and o
    without bias (:464-478), both ``mixer`` as the caller counts them (the Mamba-2 inner width heads x head size:
    sources.nemotron_h); - a non-gated MLP,
    up and down of intermediate_size, a list giving one per MLP layer (:296-322); E a router of hidden x experts and
    a non-gated MoE (relu2): shared experts' up and down of moe_shared_expert_intermediate_size x n_shared_experts,
    and every expert's up and down of moe_intermediate_size at moe_latent_size where it is set, with the latent
    projections in and out (:144-230)."""
    block = str(a.get("hybrid_override_pattern") or "")[i : i + 1]
    if block in ("M", "*"):
        return mixer, 0, 0
    if block == "-":
        inter = a.get("intermediate_size")
        if isinstance(inter, list):
            mlp = str(a.get("hybrid_override_pattern"))[: i + 1].count("-") - 1
            inter = inter[0] if len(inter) == 1 else inter[mlp] if 0 <= mlp < len(inter) else 0
        return 0, 2 * h * (inter if isinstance(inter, int) and not isinstance(inter, bool) else 0), 0
    if block == "E":
        experts, latent = _get(a, *EXPERT_KEYS), _get(a, "moe_latent_size") or h
        shared = _get(a, "moe_shared_expert_intermediate_size") * _get(a, "n_shared_experts")
        dense = 2 * h * shared + h * experts + (2 * h * latent if latent != h else 0)
        return 0, dense, experts * 2 * latent * _get(a, "moe_intermediate_size")
    return 0, 0, 0
