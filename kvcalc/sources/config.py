"""config.json -> ModelSpec. Every Hugging Face config quirk is handled here, and only here.

The rules follow vLLM 0.33 (``transformers_utils/model_arch_config_convertor.py``,
``config/model.py``, the model files) plus the defaults transformers fills in when a
config lacks a field (vLLM reads configs through transformers; kvcalc reads raw JSON).
"""

from __future__ import annotations

from typing import Any, NoReturn

from kvcalc.core.dtypes import normalize_model_dtype
from kvcalc.core.model import LayerArch, ModelSpec, StateArch
from kvcalc.core.speculative import MTP_CONFIG_NOTE
from kvcalc.errors import ConfigError
from kvcalc.sources import nemotron_h
from kvcalc.sources.config_fields import MAX_FIELD
from kvcalc.sources.config_fields import checked_int as _int
from kvcalc.sources.config_fields import finite as _finite
from kvcalc.sources.gemma4_config import GEMMA4_TYPES, gemma4_layers
from kvcalc.sources.state_config import state_arch

# vLLM ModelArchConfigConvertor.is_deepseek_mla (model types that cache one latent)
MLA_MODEL_TYPES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "kimi_k2", "kimi_linear", "glm_moe_dsa", "glm4_moe_lite",
    "longcat_flash", "pangu_ultra_moe",
})
SPECULATOR_KEYS = ("draft_vocab_size", "target_hidden_size", "norm_before_residual", "eagle_aux_hidden_state_layer_ids")
# vLLM: the first of these that exists gives total_num_kv_heads
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")
# vLLM derived max length: the minimum over the keys present
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_target_positions",
    "max_sequence_length", "max_seq_length", "seq_len",
)
ROPE_TYPES_NOT_SCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
ROPE_TYPES_NOT_SCALED_0_29 = ("su", "longrope", "llama3")  # vllm==0.29.0: config/model.py:2452
QWEN_SWA_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_5_vl_text", "qwen3_vl_text", "qwen2_5_vl", "qwen2_vl")
# config classes whose sliding_window defaults to 4096 when the key is absent (transformers:
# MistralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, Gemma2Config,
# Gemma3TextConfig, Cohere2Config); the Qwen ones apply it only with use_sliding_window
SW_DEFAULT = 4096
SW_DEFAULT_TYPES = frozenset({"mistral", "gemma2", "gemma3", "gemma3_text", "cohere2", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
# models whose KV caches kvcalc models; anything else with a standard decoder layout is
# accepted too (the plain formula), with a note that its type was not reviewed
REVIEWED_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        # Qwen3.5 / 3.6 (dense and MoE; the multimodal config's text_config has the _text type): gated attention
        # (core.weights.GATED_ATTENTION_TYPES), GDN state (app.mamba_state), the vision tower (core.towers)
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text", "qwen2_5_vl",  # Qwen2.5-VL: a Qwen2 decoder with multimodal RoPE (core.weights), its tower
        "phi3",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        *GEMMA4_TYPES,
        "cohere2",
        "starcoder2",
        "gpt_oss",
        "glm4_moe",
        "falcon",
        "llama4",
        "llama4_text",
        "jamba",
        "granitemoehybrid", nemotron_h.MODEL_TYPE,
        "whisper",
        "t5",
        *MLA_MODEL_TYPES,
    }
)


MAX_LAYERS = 10_000  # a config asking for 10**9 layers would otherwise build 10**9 layer records


def _layers(cfg: dict, key: str, where: str) -> int:
    n = _int(cfg, key, where)
    if n > MAX_LAYERS:
        raise ConfigError(f"config{where} field '{key}' is {n}; kvcalc takes at most {MAX_LAYERS} layers")
    return n


def _opt_int(cfg: dict, key: str, where: str, *, minimum: int = 1) -> int | None:
    if cfg.get(key) is None:
        return None
    return _int(cfg, key, where, minimum=minimum)


# Keys a published config may leave out because transformers' config class supplies them; vLLM reads the
# config through that class, so an absent key is the class default. google/gemma-3-4b-it's text_config, for
# one, names only hidden_size, intermediate_size, num_hidden_layers, rope_scaling and sliding_window
# (transformers==4.57.1: models/gemma3/configuration_gemma3.py, Gemma3TextConfig.__init__ defaults).
# sliding_window is left to SW_DEFAULT, which also knows an explicit null.
CLASS_DEFAULTS: dict[str, dict[str, object]] = {
    "gemma3_text": {
        "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
        "tie_word_embeddings": True, "query_pre_attn_scalar": 256,
    },
}


def _with_class_defaults(text: dict) -> dict:
    defaults = CLASS_DEFAULTS.get(str(text.get("model_type") or ""))
    return {**defaults, **text} if defaults else text


def text_config(cfg: dict) -> tuple[dict, str]:
    """transformers' get_text_config(): the decoder's config of a multimodal/wrapper model, with the keys
    its config class supplies when the file leaves them out (CLASS_DEFAULTS)."""
    for key in ("text_config", "decoder", "generator", "llm_config", "language_config", "transformer_layer_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and ("num_attention_heads" in sub or "num_hidden_layers" in sub):
            if key == "transformer_layer_config":  # a speculators-format draft head: vLLM lifts these keys into the layer
                # config it builds (vllm==0.33.0: transformers_utils/configs/speculators/base.py:47-64, algos.py:30-50)
                sub = {**sub, **{k: cfg[k] for k in SPECULATOR_KEYS if cfg.get(k) is not None}}
            return _with_class_defaults(sub), f".{key}"
    return _with_class_defaults(cfg), ""


def _dtype(text: dict, cfg: dict, notes: list[str]) -> str:
    raw = text.get("torch_dtype") or text.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
    if raw is None:
        notes.append("config names no dtype: vLLM takes float32 and serves it as bfloat16")
        return "bfloat16"
    dt = normalize_model_dtype(str(raw))
    if dt is None:
        raise ConfigError(f"config field 'torch_dtype' is {raw!r}; kvcalc knows float32, float16, bfloat16")
    if dt == "float32":
        notes.append("config dtype float32: vLLM serves it as bfloat16 on Ampere and later (--dtype overrides)")
        return "bfloat16"
    return dt


def derived_max_lens(cfg: dict, text: dict) -> tuple[int, int | None] | None:
    """vLLM's derived maximum length from 0.30 on: the smallest length key, times the rope_scaling factor
    unless the rope type's positions are already scaled (vllm==0.33.0: config/model.py:2598-2634; the same
    list in 0.30.0); and, where it differs, 0.9.2-0.29's: YaRN takes original_max_position_embeddings x
    factor and the DeepSeek types are scaled too (vllm==0.29.0: config/model.py:2445-2458; vllm==0.9.2:
    config.py:3470-3480). None: the config names no length."""
    values = []
    for key in MAX_LEN_KEYS:
        if text.get(key) is not None:  # present: a positive integer (8192.0 is 8192), else refused
            try:
                values.append(_int(text, key, ""))
            except ConfigError:
                _max_len_error(text, text[key])
    if not values:
        return None
    length: int | float = min(values)
    if length > MAX_FIELD:
        _max_len_error(text, length)
    legacy: int | float = length
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    model_type = str(text.get("model_type") or cfg.get("model_type") or "")
    if isinstance(rope, dict) and "gemma3" not in model_type:
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        factor = rope.get("factor")
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and _finite(factor):
            if rope_type not in ROPE_TYPES_NOT_SCALED:
                length *= factor
            if rope_type not in ROPE_TYPES_NOT_SCALED_0_29:
                original = rope.get("original_max_position_embeddings")
                if rope_type == "yarn" and isinstance(original, (int, float)) and not isinstance(original, bool):
                    legacy = original
                legacy *= factor
    for value in (length, legacy):
        if not _finite(value) or not 1 <= value <= MAX_FIELD:
            _max_len_error(text, value)
    return int(length), (None if int(legacy) == int(length) else int(legacy))


def _max_len_error(text: dict, length: Any) -> NoReturn:
    keys = [k for k in MAX_LEN_KEYS if text.get(k) is not None]
    shown = repr(length) if isinstance(length, (float, str, bool)) else str(length)
    if len(shown) > 24:
        shown = f"{shown[:6]}... ({len(shown)} characters)"
    raise ConfigError(
        f"config's maximum length ({', '.join(keys)}, times any rope_scaling factor) comes to {shown}; "
        "a context length is a positive integer up to 2**40"
    )


def total_kv_heads(text: dict, where: str, model_type: str) -> int:
    heads = _int(text, "num_attention_heads", where)
    new_arch_falcon = model_type in FALCON_TYPES and bool(text.get("new_decoder_architecture"))
    if not new_arch_falcon and text.get("multi_query"):
        return 1
    for key in KV_HEAD_KEYS:
        if text.get(key) is not None:
            kv = _int(text, key, where)
            if kv > heads or heads % kv:
                raise ConfigError(
                    f"config{where} field '{key}' is {kv}: KV heads must divide the {heads} attention heads "
                    f"(num_attention_heads); valid: a divisor of {heads}"
                )
            return kv
    return heads


def head_size(text: dict, where: str, heads: int) -> int:
    # a head_dim that is present must be valid: 128.0 is 128; "128", true, 0 or -4 are refused,
    # never replaced by hidden_size / heads (which differs for Qwen3, Gemma, ...)
    if text.get("head_dim") is not None:
        return _int(text, "head_dim", where)
    if text.get("hidden_size_per_head") is not None:
        return _int(text, "hidden_size_per_head", where)
    hidden = _int(text, "hidden_size", where)
    if hidden % heads:
        raise ConfigError(
            f"config{where} has no 'head_dim' and hidden_size {hidden} is not divisible by {heads} attention heads"
        )
    return hidden // heads


def _layer_kinds(text: dict, where: str, model_type: str, n: int, notes: list[str]) -> list[tuple[str, int]]:
    """(kind, window) for each decoder layer's self-attention (or state) module."""
    # absent: transformers' class default where vLLM inherits one (4096 for mistral, qwen2/qwen3
    # with use_sliding_window, gemma2/3, cohere2); null or false: no window; 4096.0 is 4096;
    # "4096", 0 or -1 are refused (dropping them would size a sliding-window model as full attention)
    raw_sw = text.get("sliding_window")
    if "sliding_window" not in text and model_type in SW_DEFAULT_TYPES:
        # vLLM reads the config through transformers, whose config class fills an absent key
        # with its default; an explicit null stays "no window"
        sw: int | None = SW_DEFAULT
        if model_type not in QWEN_SWA_TYPES or text.get("use_sliding_window"):
            notes.append(f"sliding_window absent: {SW_DEFAULT}, the default of transformers' {model_type} config (as vLLM reads it)")
    else:
        sw = None if raw_sw is None or raw_sw is False else _int(text, "sliding_window", where)
    if model_type in QWEN_SWA_TYPES and not text.get("use_sliding_window"):
        sw = None  # transformers drops sliding_window unless use_sliding_window
    chunk = text.get("attention_chunk_size")

    layer_types = text.get("layer_types")
    if layer_types is None:
        layer_types = _default_layer_types(text, where, model_type, n, sw)
        if layer_types is not None:
            notes.append("layer_types absent: filled in as transformers does for " + model_type)
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n:
            raise ConfigError(f"config{where} field 'layer_types' must list one type per layer ({n})")
        out = []
        for i, t in enumerate(layer_types):
            if t in ("full_attention", "attention", "global_attention", "indexed_attention"):
                out.append(("full", 0))
            elif t in ("sliding_attention", "local_attention"):
                if sw is None:
                    if model_type in QWEN_SWA_TYPES:
                        out.append(("full", 0))
                        continue
                    raise ConfigError(f"config{where} layer {i} is sliding_attention but 'sliding_window' is not set")
                out.append(("sliding", sw))
            elif t in ("chunked_attention",):
                if not chunk:
                    raise ConfigError(f"config{where} layer {i} is chunked_attention but 'attention_chunk_size' is not set")
                out.append(("chunked", _int(text, "attention_chunk_size", where)))
            elif t in ("linear_attention", "mamba"):
                out.append(("mamba", 0))
            elif t == "none" and model_type == nemotron_h.MODEL_TYPE:  # an MLP or MoE block: no cache
                out.append(("none", 0))
            else:
                raise ConfigError(
                    f"config{where} layer_types[{i}] is {t!r}; kvcalc knows full_attention, sliding_attention, "
                    "chunked_attention, linear_attention"
                )
        return out
    if sw is not None:
        # vLLM: with no layer_types, CacheConfig.sliding_window applies to every layer
        return [("sliding", sw)] * n
    return [("full", 0)] * n


def _default_layer_types(text: dict, where: str, model_type: str, n: int, sw: int | None) -> list[str] | None:
    if model_type == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if model_type in ("gemma3", "gemma3_text", "cohere2"):
        pattern = _opt_int(text, "sliding_window_pattern", where) or (6 if "gemma3" in model_type else 4)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if model_type == "gpt_oss":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if model_type in ("llama4", "llama4_text") and text.get("attention_chunk_size"):
        nope = text.get("no_rope_layers")
        if not nope:
            interval = _opt_int(text, "no_rope_layer_interval", where) or 4
            nope = [int((i + 1) % interval != 0) for i in range(n)]
        elif not isinstance(nope, list) or len(nope) != n:
            raise ConfigError(f"config{where} field 'no_rope_layers' must list one 0/1 flag per layer ({n})")
        return ["chunked_attention" if nope[i] else "full_attention" for i in range(n)]
    if model_type == "qwen3_next":
        interval = _int(text, "full_attention_interval", where)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if model_type == nemotron_h.MODEL_TYPE:
        return nemotron_h.layer_types(text, where, n)
    if model_type == "jamba":
        period = _int(text, "attn_layer_period", where)
        offset = _int(text, "attn_layer_offset", where, minimum=0)
        return ["full_attention" if i % period == offset else "mamba" for i in range(n)]
    if model_type in QWEN_SWA_TYPES and sw is not None:
        mwl = _opt_int(text, "max_window_layers", where, minimum=0)
        mwl = n if mwl is None else mwl
        return ["sliding_attention" if i >= mwl else "full_attention" for i in range(n)]
    return None


def _encoder_decoder(cfg: dict, name: str, source: str, model_type: str, notes: list[str]) -> ModelSpec:
    if model_type == "whisper":
        n = _layers(cfg, "decoder_layers", "")
        heads = _int(cfg, "decoder_attention_heads", "")
        d_model = _int(cfg, "d_model", "")
        if d_model % heads:
            raise ConfigError(f"config d_model {d_model} is not divisible by decoder_attention_heads {heads}")
        hd = d_model // heads
        enc = _int(cfg, "max_source_positions", "")
        max_len = _int(cfg, "max_target_positions", "")
        supported = True
        notes.append(f"cross-attention holds the encoder's {enc} positions per request (max_source_positions)")
    elif model_type == "t5":
        n = _layers(cfg, "num_decoder_layers", "") if cfg.get("num_decoder_layers") else _layers(cfg, "num_layers", "")
        heads = _int(cfg, "num_heads", "")
        hd = _int(cfg, "d_kv", "")
        enc = 512
        max_len = 512
        supported = False
        notes.append("vLLM (V1) does not serve T5: the pool figures are not available; bytes follow the plain formula")
        notes.append("T5 has no fixed encoder length: cross-attention assumes 512 encoder positions (--encoder-tokens)")
    else:
        raise ConfigError(f"encoder-decoder model_type {model_type!r} is not modelled; kvcalc knows whisper and t5")
    layers = []
    for i in range(n):
        layers.append(LayerArch(i, "full", heads, hd, hd))
        layers.append(LayerArch(i, "cross", heads, hd, hd, window=enc))
    return ModelSpec(
        name=name,
        source=source,
        model_type=model_type,
        num_layers=n,
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=hd,
        head_dim_v=hd,
        dtype=_dtype(cfg, cfg, notes),
        layers=tuple(layers),
        max_model_len=max_len,
        vllm_supported=supported,
        encoder_decoder=True,
        notes=tuple(notes),
        arch=dict(cfg),
    )


def with_encoder_tokens(model: ModelSpec, tokens: int) -> ModelSpec:
    """The same model with cross-attention sized for ``tokens`` encoder positions."""
    from kvcalc.core.record import replace

    layers = tuple(replace(layer, window=tokens) if layer.kind == "cross" else layer for layer in model.layers)
    return replace(model, layers=layers)


def _arch(cfg: dict, text: dict, where: str) -> dict:
    """The numbers the weights estimate reads: the decoder's config, plus the wrapper's vision_config
    (its tower is loaded with the decoder: kvcalc.core.weights counts Llama 4's and LLaVA's CLIP tower)
    and the wrapper fields LLaVA's tower is sized by: its architectures (kept apart from the decoder's),
    vision_feature_layer and multimodal_projector_bias."""
    arch = dict(text)  # the decoder's config with its class defaults (the whole config when there is no wrapper)
    if str(text.get("model_type")) == "granitemoehybrid":
        _granite_mlp_keys(arch)
    if str(text.get("model_type")) == nemotron_h.MODEL_TYPE:
        nemotron_h.mamba_keys(arch)
    if not where:
        return arch
    if isinstance(cfg.get("quantization_config"), dict) and "quantization_config" not in arch:
        # a wrapper checkpoint keeps its quantization_config at the top level, where vLLM reads it
        # (vllm==0.23.0: transformers_utils/config.py:817-830 sets it on the top-level hf_config)
        arch["quantization_config"] = cfg["quantization_config"]
    if isinstance(cfg.get("vision_config"), dict):
        arch["vision_config"] = cfg["vision_config"]
        arch["wrapper_architectures"] = cfg.get("architectures")
        for key in ("vision_feature_layer", "multimodal_projector_bias"):
            if key in cfg:
                arch[key] = cfg[key]
        # what sizes vLLM's dummy image (sources.vision)
        keys = ("model_type", "image_grid_pinpoints", "vision_feature_select_strategy", "mm_tokens_per_image")
        arch["wrapper"] = {k: cfg[k] for k in keys if k in cfg}
    return arch


def _granite_mlp_keys(arch: dict) -> None:
    """Granite 4.0 names its MLP widths its own way: every layer has a shared (dense, gated) MLP of
    shared_intermediate_size, plus, when num_local_experts > 0, experts of intermediate_size each
    (vllm==0.11.0: models/granitemoehybrid.py:71-87, :148-164). The keys the weights estimate and the
    budget read are set to those meanings."""
    shared, experts = arch.get("shared_intermediate_size"), arch.get("num_local_experts") or 0
    if experts and "intermediate_size" in arch:
        arch["moe_intermediate_size"] = arch["intermediate_size"]
        arch["shared_expert_intermediate_size"] = shared or 0
    if shared:
        arch["intermediate_size"] = shared


def _layer_archs(
    text: dict, where: str, text_type: str, kinds: list[tuple[str, int]], mla: bool, kv_heads: int, hd: int, hd_v: int
) -> tuple[list[LayerArch], tuple[tuple[str, int], ...]]:
    """Each decoder layer's cache-holding module, every attention layer of one geometry."""
    state: tuple[StateArch, ...] = ()
    divisors: tuple[tuple[str, int], ...] = ()
    if any(k == "mamba" for k, _ in kinds):
        state, divisors = state_arch(text, where, text_type)
    layers = []
    for i, (kind, window) in enumerate(kinds):
        if kind == "none":
            continue
        if kind == "mamba":
            layers.append(LayerArch(i, "mamba", state=state))
        elif mla:
            layers.append(LayerArch(i, "mla", 1, hd, 0))
        else:
            layers.append(LayerArch(i, kind, kv_heads, hd, hd_v, window=window))
    return layers, divisors


def spec_from_config(cfg: Any, *, name: str, source: str) -> ModelSpec:
    """Build the canonical model spec from a parsed config.json."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"config must be a JSON object, got {type(cfg).__name__}")
    notes: list[str] = []
    model_type = str(cfg.get("model_type") or "")
    if model_type in ("whisper", "t5") or (cfg.get("is_encoder_decoder") and model_type):
        return _encoder_decoder(cfg, name, source, model_type, notes)

    text, where = text_config(cfg)
    text_type = str(text.get("model_type") or model_type)
    if not text_type:
        raise ConfigError("config lacks 'model_type', needed to apply the model family's cache rules")
    if text_type not in REVIEWED_TYPES:
        notes.append(f"model_type {text_type!r} was not reviewed by kvcalc: the plain decoder rules are applied")

    n = _layers(text, "num_hidden_layers", where)
    heads = _int(text, "num_attention_heads", where)
    kv_heads = total_kv_heads(text, where, text_type)
    mla = text_type in MLA_MODEL_TYPES and text.get("kv_lora_rank") is not None
    if mla:
        hd = _int(text, "kv_lora_rank", where) + _int(text, "qk_rope_head_dim", where)
        hd_v = 0
        kv_heads_model = 1
        notes.append(f"MLA: one latent of kv_lora_rank + qk_rope_head_dim = {hd} elements per token per layer")
        if text.get("num_nextn_predict_layers"):
            notes.append(f"{text['num_nextn_predict_layers']} {MTP_CONFIG_NOTE}")
    else:
        hd = head_size(text, where, heads)
        hd_v = hd
        kv_heads_model = kv_heads
        if text_type in FALCON_TYPES and text.get("multi_query") and text.get("num_kv_heads") not in (None, 1):
            notes.append(
                f"multi_query true: one KV head (vLLM), not the num_kv_heads {text['num_kv_heads']} transformers saved"
            )

    divisors: tuple[tuple[str, int], ...] = ()
    if text_type in GEMMA4_TYPES:
        layers = gemma4_layers(text, where, n, kv_heads, hd, notes)
        kinds = [(x.kind, x.window) for x in layers]
    else:
        kinds = _layer_kinds(text, where, text_type, n, notes)
        layers, divisors = _layer_archs(text, where, text_type, kinds, mla, kv_heads, hd, hd_v)

    max_len, max_len_yarn_original = derived_max_lens(cfg, text) or (None, None)
    if max_len is None:
        notes.append("config names no maximum length: vLLM assumes 2048")
        max_len = 2048
    if text_type == "phi3" and any(k == "sliding" for k, _ in kinds):
        notes.append("sliding_window applies to every layer (no layer_types), as vLLM reads this config")
    return ModelSpec(
        name=name,
        source=source,
        model_type=text_type,
        num_layers=n,
        num_attention_heads=heads,
        num_kv_heads=kv_heads_model,
        head_dim=hd,
        head_dim_v=hd_v,
        dtype=_dtype(text, cfg, notes),
        layers=tuple(layers),
        max_model_len=max_len,
        max_model_len_yarn_original=max_len_yarn_original,
        mla=mla,
        notes=tuple(notes),
        arch=_arch(cfg, text, where),
        tp_divisors=divisors,
    )
