"""Pure helpers of the Hub reader: checkpoint facts from safetensors headers (every header
value checked: a hostile header is refused, never counted), and a Mistral-format params.json
as the Hugging Face config vLLM builds from it."""

from __future__ import annotations

import re
from typing import Any

from kvcalc.errors import ConfigError

# bits per element of each safetensors dtype (the safetensors format's Dtype list)
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}


def checkpoint_facts(files_metadata: dict, source: str) -> dict:
    """Parameter count and weight bytes, in total and per dtype, from safetensors headers.

    ``files_metadata``: file name -> object with ``.tensors`` (name -> object with ``.dtype``,
    ``.shape``, ``.data_offsets``), as huggingface_hub's SafetensorsFileMetadata.
    Bytes are the element count times the dtype's size; a dtype kvcalc does not know is
    counted by its data offsets (what the file stores).
    """
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    mtp = 0
    layers: dict[str, int] = {}
    if not isinstance(files_metadata, dict):
        raise ValueError("the index is not a mapping of files")
    for file_meta in files_metadata.values():
        tensors = getattr(file_meta, "tensors", None)
        if not isinstance(tensors, dict):
            raise ValueError("a file's header is not a mapping of tensors")
        for name, tensor in tensors.items():
            count, size, dtype = _tensor_size(tensor)
            params[dtype] = params.get(dtype, 0) + count
            nbytes[dtype] = nbytes.get(dtype, 0) + size
            if nbytes[dtype] > MAX_CHECKPOINT_BYTES:
                raise ValueError(f"the tensors add up to more than 2**60 bytes ({dtype})")
            # the bytes of MTP modules, which vLLM loads only with speculative decoding: 'mtp.*' tensors (Qwen3-Next,
            # Qwen3.5) and, by decoder layer, the layers numbered past num_hidden_layers (DeepSeek-V3, GLM-4.5)
            if isinstance(name, str):
                if name.startswith("mtp."):
                    mtp += size
                elif m := _LAYER_NAME.match(name):
                    layers[m.group(1)] = layers.get(m.group(1), 0) + size
    out = {
        "parameters": sum(params.values()),
        "bytes": sum(nbytes.values()),
        "parameters_by_dtype": dict(sorted(params.items())),
        "bytes_by_dtype": dict(sorted(nbytes.items())),
        "files": len(files_metadata),
        "source": source,
    }
    if mtp:
        out["mtp_bytes"] = mtp
    if layers:
        out["layer_bytes"] = layers
    return out


_LAYER_NAME = re.compile(r"(?:model\.(?:language_model\.)?)?layers\.(\d{1,6})\.")


MAX_CHECKPOINT_BYTES = 1 << 60  # no checkpoint comes near; beyond, the header is corrupt or hostile
_MAX_DIMS = 16


def _tensor_size(tensor: Any) -> tuple[int, int, str]:
    """(elements, bytes, dtype) of one tensor's header entry; ValueError when it is malformed
    (a negative or non-integer dimension, offsets that are not 0 <= start <= end)."""
    shape = getattr(tensor, "shape", None)
    dtype = getattr(tensor, "dtype", None)
    if not isinstance(shape, (list, tuple)) or len(shape) > _MAX_DIMS or not isinstance(dtype, str):
        raise ValueError(f"a tensor's shape {str(shape)[:40]!r} or dtype {str(dtype)[:20]!r} is malformed")
    count = 1
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_CHECKPOINT_BYTES:
            raise ValueError(f"a tensor's shape holds {str(dim)[:40]!r}; dimensions are non-negative integers")
        count *= dim
        if count > MAX_CHECKPOINT_BYTES:
            raise ValueError("a tensor holds more than 2**60 elements")
    bits = SAFETENSORS_DTYPE_BITS.get(dtype)
    if bits is not None:
        return count, (count * bits + 7) // 8, dtype
    offsets = getattr(tensor, "data_offsets", None)
    if not isinstance(offsets, (list, tuple)) or len(offsets) != 2:
        raise ValueError("a tensor's data_offsets are not [start, end]")
    start, end = offsets
    if any(isinstance(x, bool) or not isinstance(x, int) for x in offsets) or not 0 <= start <= end <= MAX_CHECKPOINT_BYTES:
        raise ValueError(f"a tensor's data_offsets {str(offsets)[:60]} are not 0 <= start <= end")
    return count, end - start, dtype


# vLLM's MistralConfigParser / adapt_config_dict: params.json name -> Hugging Face name
_MISTRAL_NAMES = {
    "dim": "hidden_size",
    "norm_eps": "rms_norm_eps",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "hidden_dim": "intermediate_size",
}
_FLOAT_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def config_from_mistral_params(params: dict, checkpoint: dict | None, *, where: str) -> dict:
    """A Mistral-format params.json as the Hugging Face config vLLM builds from it (dense models)."""
    if params.get("qk_nope_head_dim") or (isinstance(params.get("moe"), dict) and params["moe"].get("num_shared_experts")):
        raise ConfigError(f"{where} describes an MLA model (Mistral Large 3 style); kvcalc reads only its config.json")
    if params.get("model_type") == "mamba":
        raise ConfigError(f"{where} describes a Mamba model; kvcalc does not read Mistral-format Mamba configs")
    for needed in ("n_layers", "n_heads", "dim"):
        value = params.get(needed)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where} field {needed!r} must be a positive integer (needed to size the KV cache), got {value!r}")
    cfg: dict[str, Any] = {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}
    for key, value in params.items():
        cfg[_MISTRAL_NAMES.get(key, key)] = value
    # vLLM: max_position_embeddings from params.json, else from the repo's config.json, else 128000
    cfg.setdefault("max_position_embeddings", 128_000)
    cfg.setdefault("max_seq_len", cfg["max_position_embeddings"])
    sw = cfg.get("sliding_window")
    if isinstance(sw, list):
        n = cfg["num_hidden_layers"]
        if not sw or n % len(sw):
            raise ConfigError(f"{where} 'sliding_window' list of {len(sw)} entries does not tile {n} layers")
        windows = {w for w in sw if w is not None}
        if len(windows) > 1:
            raise ConfigError(f"{where} 'sliding_window' mixes windows {sorted(windows)}; vLLM takes one")
        cfg["layer_types"] = ["full_attention" if w is None else "sliding_attention" for w in sw * (n // len(sw))]
        cfg["sliding_window"] = next(iter(windows), None)
    elif isinstance(sw, int) and sw > 0 and cfg.get("layer_types") is None:
        cfg["layer_types"] = ["sliding_attention"] * cfg["num_hidden_layers"]
    if cfg.get("dtype") is None and checkpoint:
        # vLLM infers the dtype from the consolidated safetensors: the common (promoted) float dtype
        floats = [_FLOAT_DTYPES[d] for d in checkpoint.get("parameters_by_dtype", {}) if d in _FLOAT_DTYPES]
        if floats:
            cfg["dtype"] = floats[0] if len(set(floats)) == 1 else "float32"
    return cfg


# a revision is a branch, a tag (git ref names: components of letters, digits, '.', '_', '-',
# never '..', never starting with '.' or ending with '.lock'; refs/pr/N too) or a commit hash.
# Checked before any Hub call: huggingface_hub joins it onto a path in its cache.
_REF_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]{0,99}$")


def check_revision(revision: str | None) -> str | None:
    """``revision`` when it is a branch, tag or commit name; a one-line ConfigError otherwise."""
    if revision is None:
        return None
    text = revision if isinstance(revision, str) else ""
    parts = text.split("/")
    ok = (
        0 < len(text) <= 255
        and all(_REF_PART.match(p) and not p.endswith((".lock", ".")) for p in parts)
        and ".." not in text
    )
    if not ok:
        shown = repr(revision) if len(repr(revision)) <= 80 else repr(revision)[:77] + "..."
        raise ConfigError(
            f"revision {shown} is not a branch, tag or commit name; valid: main, v1.0, refs/pr/3 or a 40-hex commit"
        )
    return text
