"""An independent oracle for the fuzzers (issue 17): the KV bytes per token a config must give,
or that it must be refused, written from the Hugging Face / vLLM rules without kvcalc's code.

It covers the plain decoder families (dense or MoE attention, every layer caching
2 x KV heads x head_dim per token) and returns ``SKIP`` for a config it does not model (a
mutation that changes the family, the layer layout, the dtype or the rope scaling). The rules:

- an integer field is an int, or a float with an integral value (``128.0`` is 128); a bool,
  a string, a list, a non-integral or non-finite float is invalid;
- a field the formula reads that is present (not null) and invalid must be refused, never
  replaced by a default: ``head_dim``, ``hidden_size_per_head``, ``sliding_window`` (false is
  absent), ``num_key_value_heads``, every maximum-length key;
- KV heads must divide the attention heads; hidden_size must divide by them when it gives
  head_dim; layers at most 10,000, every field at most 2**40, lengths at least 1.
"""

from __future__ import annotations

import math
from typing import Any

SKIP = "skip"
REFUSE = "refuse"
PLAIN_TYPES = {"llama", "mistral", "mixtral", "phi3", "qwen2", "qwen3", "qwen3_moe", "starcoder2"}
# a mutation of any of these leaves what the oracle models
STEERING = {
    "model_type", "text_config", "layer_types", "is_encoder_decoder", "kv_lora_rank", "multi_query", "rope_scaling",
    "rope_parameters", "use_sliding_window", "max_window_layers", "torch_dtype", "dtype", "n_head_kv", "num_kv_heads",
    "multi_query_group_num", "num_attention_groups", "sliding_window_pattern", "linear_num_value_heads",
}
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
LIMIT = 1 << 40


class _Invalid(Exception):
    pass


def as_int(value: Any, *, least: int = 1) -> int:
    if isinstance(value, bool):
        raise _Invalid
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise _Invalid
        value = int(value)
    if not isinstance(value, int) or value < least or value > LIMIT:
        raise _Invalid
    return value


def covered(original: dict, mutated: Any) -> bool:
    """Whether the oracle models ``mutated`` (a preset of a plain family with no steering change)."""
    if not isinstance(mutated, dict) or original.get("model_type") not in PLAIN_TYPES:
        return False
    if original.get("text_config") is not None or original.get("layer_types") is not None:
        return False
    rope = original.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) not in (None, "llama3", "yarn", "longrope"):
        return False
    keys = set(original) | set(mutated)
    return all(original.get(k, "<absent>") == mutated.get(k, "<absent>") for k in STEERING & keys)


def expected_bytes_per_token(original: dict, cfg: Any) -> int | str:
    """The whole model's KV bytes per token at the model dtype (bfloat16 / float16: 2 B; a
    float32 config is served as bfloat16), ``REFUSE``, or ``SKIP``."""
    if not covered(original, cfg):
        return SKIP
    try:
        layers = as_int(cfg.get("num_hidden_layers"))
        if layers > 10_000:
            raise _Invalid
        heads = as_int(cfg.get("num_attention_heads"))
        kv = heads if cfg.get("num_key_value_heads") is None else as_int(cfg["num_key_value_heads"])
        if kv > heads or heads % kv:
            raise _Invalid
        if cfg.get("head_dim") is not None:
            head_dim = as_int(cfg["head_dim"])
        elif cfg.get("hidden_size_per_head") is not None:
            head_dim = as_int(cfg["hidden_size_per_head"])
        else:
            hidden = as_int(cfg.get("hidden_size"))
            if hidden % heads:
                raise _Invalid
            head_dim = hidden // heads
        if cfg.get("sliding_window") is not None and cfg["sliding_window"] is not False:
            as_int(cfg["sliding_window"])
        for key in MAX_LEN_KEYS:
            if cfg.get(key) is not None:
                as_int(cfg[key])
    except _Invalid:
        return REFUSE
    return 2 * layers * kv * head_dim * 2


# fields the loader and the estimates read, present in few presets: mutations add them too
EXTRA_KEYS = [
    "sliding_window", "use_sliding_window", "max_window_layers", "sliding_window_pattern", "layer_types",
    "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval", "full_attention_interval", "attn_layer_period",
    "attn_layer_offset", "head_dim", "hidden_size_per_head", "multi_query", "new_decoder_architecture",
    "num_key_value_heads", "kv_lora_rank", "qk_rope_head_dim", "rope_scaling", "rope_parameters",
    "max_position_embeddings", "model_max_length", "torch_dtype", "dtype", "model_type", "text_config",
    "is_encoder_decoder", "num_nextn_predict_layers", "linear_num_value_heads", "mlp_only_layers",
    "first_k_dense_replace", "expert_layer_period", "num_experts", "intermediate_size", "vocab_size",
    "quantization_config", "tie_word_embeddings",
]
