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
    inner = _get(a, "mamba_expand", default=2) * h
    conv_dim = inner + 2 * _get(a, "mamba_n_groups", default=1) * _get(a, "mamba_d_state", default=128)
    kernel = _get(a, "mamba_d_conv", default=4)
    proj_bias, conv_bias = bool(a.get("mamba_proj_bias")), a.get("mamba_conv_bias", True) is not False
    in_proj = h * (inner + conv_dim + heads) + proj_bias * (inner + conv_dim + heads)
    out_proj = inner * h + proj_bias * h
    return in_proj + conv_dim * kernel + conv_bias * conv_dim + 3 * heads + inner + out_proj
