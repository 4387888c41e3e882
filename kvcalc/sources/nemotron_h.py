"""NVIDIA's NemotronH configs (Nemotron-H, Nemotron-Nano-2, Nemotron-3-Nano): one block per decoder layer, named by
``hybrid_override_pattern`` (vllm==0.17.0: model_executor/models/nemotron_h.py:580-598, ALL_DECODER_LAYER_TYPES):
``M`` a Mamba-2 mixer, ``*`` attention, ``-`` a plain MLP, ``E`` a MoE block. Only ``M`` and ``*`` hold cache.

The Mamba-2 mixer is built from the config's own keys (nemotron_h.py:394-406): inner width mamba_num_heads x
mamba_head_dim (not expand x hidden), n_groups, ssm_state_size, conv_kernel; its state shapes come from the same
keys (:831-858, MambaStateShapeCalculator.mamba2_state_shape). The keys kvcalc's Mamba-2 code reads are set to
those meanings (``mamba_keys``)."""

from __future__ import annotations

from kvcalc.errors import ConfigError

MODEL_TYPE = "nemotron_h"
# a pattern character -> the layer type kvcalc's config reader takes; "none": a layer that holds no cache
PATTERN = {"M": "mamba", "*": "full_attention", "-": "none", "E": "none"}


def layer_types(text: dict, where: str, n: int) -> list[str]:
    """One layer type per decoder layer, from hybrid_override_pattern."""
    pattern = text.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - set(PATTERN):
        raise ConfigError(
            f"config{where} field 'hybrid_override_pattern' must give one of M, *, -, E per layer ({n}); "
            f"got {str(pattern)[:80]!r}"
        )
    return [PATTERN[c] for c in pattern]


def mamba_keys(arch: dict) -> None:
    """Set the Mamba-2 keys kvcalc reads (kvcalc.sources.state_config, kvcalc.core.mixers) from NemotronH's."""
    for ours, theirs in (("mamba_n_heads", "mamba_num_heads"), ("mamba_d_head", "mamba_head_dim"),
                         ("mamba_n_groups", "n_groups"), ("mamba_d_state", "ssm_state_size"),
                         ("mamba_d_conv", "conv_kernel"), ("mamba_conv_bias", "use_conv_bias"),
                         ("mamba_proj_bias", "use_bias")):
        if theirs in arch:
            arch[ours] = arch[theirs]
    heads, head = arch.get("mamba_num_heads"), arch.get("mamba_head_dim")
    if isinstance(heads, int) and isinstance(head, int):
        arch["mamba_inner"] = heads * head
