"""The recurrent-state tensors of a model's mamba / linear-attention layers, from its config, as vLLM's
MambaStateShapeCalculator shapes them (one function per state family: gated delta net, Mamba-2, Mamba-1)."""

from __future__ import annotations

from kvcalc.core.model import StateArch
from kvcalc.errors import ConfigError
from kvcalc.sources import nemotron_h
from kvcalc.sources.config_fields import checked_int as _int


def state_arch(text: dict, where: str, model_type: str) -> tuple[tuple[StateArch, ...], tuple[tuple[str, int], ...]]:
    if model_type == "qwen3_next" or "linear_num_value_heads" in text:
        k_heads = _int(text, "linear_num_key_heads", where)
        v_heads = _int(text, "linear_num_value_heads", where)
        k_dim = _int(text, "linear_key_head_dim", where)
        v_dim = _int(text, "linear_value_head_dim", where)
        kernel = _int(text, "linear_conv_kernel_dim", where)
        conv_dim = 2 * k_dim * k_heads + v_dim * v_heads
        state = (
            StateArch((conv_dim, kernel - 1), 0, "conv"),  # vLLM gated_delta_net_state_shape
            StateArch((v_heads, v_dim, k_dim), 0, "ssm"),
        )
        return state, (("linear-attention key heads", k_heads), ("linear-attention value heads", v_heads))
    if model_type == "granitemoehybrid":
        return _mamba2_state(text, where)
    if model_type == nemotron_h.MODEL_TYPE:
        keyed = dict(text)
        nemotron_h.mamba_keys(keyed)
        return _mamba2_state(keyed, where)
    if model_type == "jamba":
        hidden = _int(text, "hidden_size", where)
        inner = _int(text, "mamba_expand", where) * hidden
        state = (
            StateArch((inner, _int(text, "mamba_d_conv", where) - 1), 0, "conv"),  # vLLM mamba1_state_shape
            StateArch((inner, _int(text, "mamba_d_state", where)), 0, "ssm"),
        )
        return state, (("mamba inner channels", inner),)
    raise ConfigError(
        f"model_type {model_type!r} has state-space layers kvcalc does not model yet; "
        "it needs the state shapes (conv kernel, state size, heads) of vLLM's MambaStateShapeCalculator"
    )


def _mamba2_state(text: dict, where: str) -> tuple[tuple[StateArch, ...], tuple[tuple[str, int], ...]]:
    """vLLM's MambaStateShapeCalculator.mamba2_state_shape (vllm==0.11.0: model_executor/layers/mamba/
    mamba_utils.py:115-140), fed as granitemoehybrid.py:518-544 feeds it: conv state (kernel - 1) x conv_dim
    with conv_dim = inner + 2 x groups x state (inner: mamba_expand x hidden; NemotronH's heads x head size), split by TP; when TP does not divide the
    groups vLLM repeats them up to TP (extra_groups_for_head_shards, :153-163), so with one group every rank
    holds the whole 2 x state part. SSM state heads x head_dim x state, heads split by TP."""
    inner = _int(text, "mamba_inner", where) if "mamba_inner" in text else (
        _int(text, "mamba_expand", where) * _int(text, "hidden_size", where))
    groups, d_state = _int(text, "mamba_n_groups", where), _int(text, "mamba_d_state", where)
    kernel, heads = _int(text, "mamba_d_conv", where), _int(text, "mamba_n_heads", where)
    bc_split = 0 if groups > 1 else -1
    state = (
        StateArch((inner, kernel - 1), 0, "conv"),
        StateArch((2 * groups * d_state, kernel - 1), bc_split, "conv"),
        StateArch((heads, _int(text, "mamba_d_head", where), d_state), 0, "ssm"),
    )
    return state, (("mamba heads", heads), ("mamba groups", groups) if groups > 1 else ("mamba inner channels", inner))
