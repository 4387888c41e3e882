"""Gemma 4's cache-holding layers, as vLLM builds them from transformers' ``Gemma4TextConfig``.

Sliding-window and full-attention layers differ in geometry, and the last ``num_kv_shared_layers`` layers
keep no cache of their own:

- full-attention layers use ``global_head_dim`` (transformers' default 512) and, when ``attention_k_eq_v``,
  ``num_global_key_value_heads`` KV heads; sliding layers ``head_dim`` and ``num_key_value_heads``
  (vllm==0.25.0: model_executor/models/gemma4.py:566-586; from 0.28 through transformers' ``per_layer_config``,
  vllm==0.33.0: gemma4.py:577-580, transformers==5.24.0: models/gemma4/configuration_gemma4.py:208-220).
  K = V layers still store both: the K weights are loaded into both slots (gemma4.py:536-538);
- a KV-shared layer reads the cache of the last earlier layer of its type, so vLLM creates no KV cache spec
  for it (vllm==0.33.0: gemma4.py:471-492; v1/worker/gpu_model_runner.py:7094-7107, v1/worker/gpu/
  attn_utils.py:143);
- transformers fills absent ``layer_types`` with five sliding layers to one full, forces the last layer to full
  attention, and halves the window when ``use_bidirectional_attention`` is "all" (configuration_gemma4.py:
  183-199); ``sliding_window`` defaults to 512 (:169); a config's own ``per_layer_config`` replaces the
  global_head_dim rule (:210-221).
"""

from __future__ import annotations

from kvcalc.core.gemma4_weights import GLOBAL_HEAD_DIM, PATTERN, full_geometry, layer_types
from kvcalc.core.model import LayerArch
from kvcalc.errors import ConfigError
from kvcalc.sources.config_fields import checked_int as _int

GEMMA4_TYPES = frozenset({"gemma4_text"})
GEMMA4_SW_DEFAULT = 512
WEIGHTS_NOTE = (
    "Gemma 4: the KV cache follows vLLM's per-layer geometry (full-attention layers' global_head_dim and "
    "num_global_key_value_heads, KV-shared layers without a cache); the weights estimate counts that geometry, "
    "the per-layer embeddings, a MoE block and the vision tower (core.gemma4_weights), not an audio tower"
)


def _opt(text: dict, key: str, where: str, default: int, minimum: int = 1) -> int:
    return default if text.get(key) is None else _int(text, key, where, minimum=minimum)


def _window(text: dict, where: str, notes: list[str]) -> int:
    if text.get("sliding_window") is None:
        notes.append(f"sliding_window absent: {GEMMA4_SW_DEFAULT}, the default of transformers' Gemma4TextConfig")
    window = _opt(text, "sliding_window", where, GEMMA4_SW_DEFAULT)
    if text.get("use_bidirectional_attention") == "all":
        notes.append(f"use_bidirectional_attention 'all': transformers sets the window to {window} // 2 + 1")
        window = window // 2 + 1
    return window


def _layer_types(text: dict, where: str, n: int, notes: list[str]) -> list[str]:
    """The config's layer_types checked, then filled and forced as transformers does (core.gemma4_weights.layer_types)."""
    types = text.get("layer_types")
    if types is None:
        notes.append(f"layer_types absent: {PATTERN - 1} sliding layers to one full, as transformers fills them for gemma4_text")
    else:
        if not isinstance(types, list) or len(types) != n:
            raise ConfigError(f"config{where} field 'layer_types' must list one type per layer ({n})")
        for i, t in enumerate(types):
            if t not in ("sliding_attention", "full_attention"):
                raise ConfigError(f"config{where} layer_types[{i}] is {t!r}; Gemma 4 knows sliding_attention, full_attention")
        if n and types[-1] != "full_attention":
            notes.append("the last layer is forced to full_attention, as transformers does for gemma4_text")
    return layer_types(text, n)


def _per_layer(text: dict, where: str, n: int, notes: list[str]) -> dict[int, dict[str, int]] | None:
    """A config's own per_layer_config ({layer: {head_dim, num_key_value_heads}}), or None."""
    table = text.get("per_layer_config")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"config{where} field 'per_layer_config' must map layer indices to head_dim / num_key_value_heads")
    out: dict[int, dict[str, int]] = {}
    for key, value in table.items():
        if not str(key).isdigit() or int(key) >= n or not isinstance(value, dict):
            raise ConfigError(f"config{where} per_layer_config key {key!r} must be a layer index below {n} with a mapping")
        out[int(key)] = {k: _int(value, k, f"{where}.per_layer_config.{key}") for k in ("head_dim", "num_key_value_heads") if k in value}
    notes.append("per_layer_config given: its head_dim / num_key_value_heads per layer, as transformers reads it (vLLM 0.28+)")
    return out


def gemma4_layers(text: dict, where: str, n: int, kv_heads: int, head_dim: int, notes: list[str]) -> list[LayerArch]:
    """The cache-holding self-attention layers of a Gemma 4 decoder (KV-shared layers left out)."""
    types = _layer_types(text, where, n, notes)
    window = _window(text, where, notes)
    _opt(text, "global_head_dim", where, GLOBAL_HEAD_DIM)  # the fields checked here, read by full_geometry
    if text.get("attention_k_eq_v"):
        _opt(text, "num_global_key_value_heads", where, kv_heads)
    global_kv, global_dim = full_geometry(text, kv_heads)
    if global_kv != kv_heads:
        heads = _int(text, "num_attention_heads", where)
        if heads % global_kv:
            raise ConfigError(
                f"config{where} field 'num_global_key_value_heads' is {global_kv}: KV heads must divide the {heads} "
                "attention heads (num_attention_heads)"
            )
    shared = _opt(text, "num_kv_shared_layers", where, 0, minimum=0)
    if shared >= n and n:
        raise ConfigError(f"config{where} field 'num_kv_shared_layers' is {shared}; it must leave layers of their own ({n})")
    first_shared = n - shared
    for kind in set(types[first_shared:]) - set(types[:first_shared]):
        raise ConfigError(f"config{where}: a KV-shared {kind} layer has no earlier {kind} layer to read the cache of")
    own = _per_layer(text, where, n, notes)
    layers = []
    for i, t in enumerate(types[:first_shared]):
        full = t == "full_attention"
        heads, dim = (global_kv, global_dim) if full and own is None else (kv_heads, head_dim)
        if own is not None and i in own:
            heads, dim = own[i].get("num_key_value_heads", heads), own[i].get("head_dim", dim)
        if full:
            layers.append(LayerArch(i, "full", heads, dim, dim))
        else:
            layers.append(LayerArch(i, "sliding", heads, dim, dim, window=window))
    if shared:
        notes.append(f"num_kv_shared_layers {shared}: layers {first_shared}-{n - 1} read earlier layers' caches and keep none")
    notes.append(WEIGHTS_NOTE)
    return layers
