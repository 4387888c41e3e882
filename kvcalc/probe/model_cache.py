"""Check 2: a real model's own cache, built by transformers from the model's config.

The model is built with random weights from the config kvcalc resolved, cut to a few
decoder layers (``--layers``, default 2). Nothing that shapes the KV cache changes: heads,
KV heads, head sizes, layer types and windows stay as configured. What is shrunk only to
make it fast on a CPU: the vocabulary (512), the MLP widths (64) and the number of routed
experts (4, 2 per token); quantization and remote-code entries are dropped (random weights).

It runs a prefill of P tokens and G-1 decode steps (the last generated token is never fed
back), so every attention layer has seen P + G - 1 positions, then reads the cache object
the model returns and compares each layer's key and value tensors with kvcalc's prediction
for that engine:

- full attention: ``[1, kv_heads, P+G-1, head_dim]`` for K and for V;
- sliding window W (transformers >= 5.0, ``DynamicSlidingWindowLayer``): the cache exposes
  the last ``min(P+G-1, W-1)`` positions, a view into the tensor of the last update, which
  also holds the newest token: ``min(P+G-2, W-1) + 1`` positions after a decode step, all P
  after a prefill alone; kvcalc checks the visible bytes and the held storage;
- chunked local attention of chunk C: transformers caches it as a sliding window of C;
- MLA (DeepSeek V2/V3, Kimi K2): transformers >= 5.15 caches the compressed latent, keys
  ``[1, 1, T, kv_lora_rank]`` and values ``[1, 1, T, qk_rope_head_dim]`` (576 elements per
  token, the bytes vLLM caches); before 5.15 it cached the decompressed per-head K
  ``[1, heads, T, qk_nope + qk_rope]`` and V ``[1, heads, T, v_head_dim]``.

Next to each layer kvcalc also states what vLLM holds for the same request (its blocks),
labelled as vLLM's, so the two engines' numbers are never mixed up.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from kvcalc.app.probe_report import Check, ModelCacheFacts, Row
from kvcalc.core.specs import cdiv
from kvcalc.errors import KvcalcError
from kvcalc.probe import env

VOCAB = 512
MLP = 64
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
MLA_LATENT_SINCE = (5, 15)  # transformers PR #47761: MLA caches the compressed latent
MLP_KEYS = ("intermediate_size", "ffn_hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size")
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
# model types whose checkpoints ship remote code for an architecture transformers has built in
BUILD_AS = {"kimi_k2": "deepseek_v3"}
DROP_KEYS = ("quantization_config", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def shrink_config(config: dict, layers: int) -> tuple[dict, list[str]]:
    """The config with ``layers`` decoder layers and everything that does not shape the
    KV cache made small. Lists with one entry per layer (layer_types, ...) are cut too."""
    cfg = copy.deepcopy(config)
    notes: list[str] = []
    target: dict[str, Any] = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    n = target.get("num_hidden_layers")
    if not isinstance(n, int) or n < 1:
        raise KvcalcError("the model's config has no num_hidden_layers: --model-cache cannot build it")
    if layers > n:
        raise KvcalcError(f"--layers {layers}: the model has only {n} layers")
    for where in {id(cfg): cfg, id(target): target}.values():
        for key in DROP_KEYS:
            if key in where:
                where.pop(key)
        for key, value in list(where.items()):
            if isinstance(value, list) and len(value) == n and key != "architectures":
                where[key] = value[:layers]
    target["num_hidden_layers"] = layers
    target["vocab_size"] = VOCAB
    for key in MLP_KEYS:
        if isinstance(target.get(key), int):
            target[key] = MLP
    for key in EXPERT_KEYS:
        if isinstance(target.get(key), int) and target[key] > EXPERTS:
            target[key] = EXPERTS
    if isinstance(target.get("num_experts_per_tok"), int):
        target["num_experts_per_tok"] = min(target["num_experts_per_tok"], EXPERTS_PER_TOKEN)
    for key in ("n_group", "topk_group"):
        if isinstance(target.get(key), int):
            target[key] = 1
    notes.append(
        f"built with random weights: {layers} of {n} layers, vocabulary {VOCAB}, MLP width {MLP}, "
        f"at most {EXPERTS} experts; KV heads, head sizes, layer types and windows as configured"
    )
    return cfg, notes


def transformers_layout(layer: Any, config: dict, T: int, last_step: int, mla_latent: bool) -> dict[str, Any]:
    """What transformers' DynamicCache holds for one layer after ``T`` positions, the last
    update having brought ``last_step`` of them (1 for a decode step, P for the prefill)."""
    if layer.kind == "mla":
        text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
        if mla_latent:
            return {
                "visible": T,
                "held": T,
                "k": (1, 1, T, int(text["kv_lora_rank"])),
                "v": (1, 1, T, int(text["qk_rope_head_dim"])),
                "rule": "MLA latent: kv_lora_rank + qk_rope_head_dim per token (transformers >= 5.15)",
            }
        h = int(text["num_attention_heads"])
        return {
            "visible": T,
            "held": T,
            "k": (1, h, T, int(text["qk_nope_head_dim"]) + int(text["qk_rope_head_dim"])),
            "v": (1, h, T, int(text["v_head_dim"])),
            "rule": "MLA decompressed per head (transformers < 5.15)",
        }
    if layer.kind in ("sliding", "chunked"):
        keep = layer.window - 1
        visible = min(T, keep)
        held = (min(T - last_step, keep) + last_step) if T else 0
        held = max(held, visible)
        rule = (
            f"sliding window {layer.window}: the last min(T, W-1) = {visible} positions are visible; "
            f"the tensor of the last update holds {held}"
        )
        if layer.kind == "chunked":
            rule = "chunked local attention, cached by transformers as a " + rule
    else:
        visible = held = T
        rule = "full attention: every position"
    return {
        "visible": visible,
        "held": held,
        "k": (1, layer.num_kv_heads, visible, layer.head_size),
        "v": (1, layer.num_kv_heads, visible, layer.head_size_v),
        "rule": rule,
    }


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(getattr(x, "keys", None), getattr(x, "values", None)) for x in layers]
    if hasattr(cache, "key_cache"):  # pragma: no cover - transformers 4.x
        return list(zip(cache.key_cache, cache.value_cache))
    raise env.cannot(f"this transformers returns a {type(cache).__name__} cache that the probe cannot read")


def _storage_bytes(tensors: list[Any]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def probe_model_cache(resolved: Any, settings: Any, *, layers: int | None, prompt: int | None, gen: int | None,
                      device: str) -> Check:
    from kvcalc.app.service import cache_settings, default_block_size, model_dtype
    from kvcalc.sources.config import spec_from_config

    transformers = env.need_transformers()
    torch = env.need_torch()
    device = env.resolve_device(device)
    n_layers, P, G = _request(layers, prompt, gen)
    T = P + G - 1
    model = resolved.spec
    _check_model(resolved)
    cfg, notes = shrink_config(resolved.config, n_layers)
    small = spec_from_config(cfg, name=model.name, source=resolved.source)
    dtype_name = model_dtype(model, settings)
    mla_latent = env.version_tuple(transformers.__version__) >= MLA_LATENT_SINCE
    if cfg.get("model_type") in BUILD_AS:
        notes.append(f"model_type {cfg['model_type']} ships remote code; built as transformers' {BUILD_AS[cfg['model_type']]}")
    built = _build(transformers, torch, cfg, dtype_name, device)
    cache_obj = _run(torch, built, P, G, device)
    got = _cache_layers(cache_obj)
    if len(got) != len(small.layers):
        raise KvcalcError(
            f"transformers returned {len(got)} cache layers for a {len(small.layers)}-layer model: the probe cannot pair them"
        )
    vcache = cache_settings(small, settings, block_size=default_block_size(small, settings))
    rows: list[Row] = []
    per_layer = []
    last_step = 1 if G > 1 else P
    for layer, (k, v) in zip(small.layers, got):
        lay = transformers_layout(layer, cfg, T, last_step, mla_latent)
        layer_rows, measured = _layer_rows(torch, layer, lay, k, v, dtype_name)
        rows += layer_rows
        per_layer.append({"layer": layer.layer, "kind": layer.kind, "transformers": measured,
                          "vllm": _vllm_holds(layer, vcache, T)})
    check = Check("model-cache", f"{type(built).__name__} cache after prefill {P} + {G - 1} decode steps",
                  f"transformers {transformers.__version__} (DynamicCache)", rows)
    _describe(check, model, per_layer, notes, vcache.block_size, P=P, G=G, n_layers=n_layers, dtype_name=dtype_name,
              device=device, mla_latent=mla_latent)
    del cache_obj, built
    return check


def _request(layers: int | None, prompt: int | None, gen: int | None) -> tuple[int, int, int]:
    """(layers to build, prompt tokens P, generated tokens G): 2, 300 and 20 unless given."""
    n_layers = 2 if layers is None else layers
    if n_layers < 1:
        raise KvcalcError(f"--layers must be a positive integer, got {n_layers}")
    P = 300 if prompt is None else prompt
    G = 20 if gen is None else gen
    if P < 1:
        raise KvcalcError(f"--prompt must be at least 1 token, got {P}")
    if G < 1:
        raise KvcalcError(f"--gen must be at least 1 token, got {G}")
    return n_layers, P, G


def _check_model(resolved: Any) -> None:
    """A decoder-only attention model with a config: what --model-cache can build."""
    model = resolved.spec
    if not isinstance(resolved.config, dict) or not resolved.config:
        raise env.cannot(f"{model.name}: no config to build a transformers model from")
    if model.encoder_decoder:
        raise env.cannot(f"--model-cache covers decoder-only models; {model.name} is encoder-decoder")
    if any(x.kind == "mamba" for x in model.layers):
        raise env.cannot(f"--model-cache covers attention caches; {model.name} has recurrent-state layers")


def _layer_rows(torch: Any, layer: Any, lay: dict[str, Any], k: Any, v: Any,
                dtype_name: str) -> tuple[list[Row], dict[str, Any]]:
    """The rows of one layer (the visible K+V bytes, and the storage held when it differs)
    and what transformers holds for it, predicted and measured."""
    itemsize = getattr(torch, dtype_name).itemsize
    want = [lay["k"], lay["v"]]
    have = [tuple(k.shape), tuple(v.shape)] if k is not None else []
    mismatch = "" if have == [tuple(x) for x in want] else f"shapes {have} != {want}"
    if k is not None and (k.dtype != getattr(torch, dtype_name) or v.dtype != getattr(torch, dtype_name)):
        mismatch = (mismatch + "; " if mismatch else "") + f"dtype {k.dtype} != torch.{dtype_name}"
    pred_visible = (_prod(lay["k"]) + _prod(lay["v"])) * itemsize
    meas_visible = (k.numel() * k.element_size() + v.numel() * v.element_size()) if k is not None else 0
    rows = [
        Row(
            f"layer {layer.layer} ({layer.kind}) K+V, {lay['visible']} positions",
            pred_visible,
            meas_visible,
            mismatch=mismatch,
            note=lay["rule"],
        )
    ]
    held_pred = pred_visible * lay["held"] // lay["visible"] if lay["visible"] else 0
    held_meas = _storage_bytes([k, v]) if k is not None else 0
    if lay["held"] != lay["visible"] or held_meas != meas_visible:
        rows.append(
            Row(
                f"layer {layer.layer} ({layer.kind}) storage held, {lay['held']} positions",
                held_pred,
                held_meas,
                note="untyped_storage().nbytes(): the last update's tensor, of which the cache shows a slice",
            )
        )
    measured = {
        "k_shape": list(lay["k"]),
        "v_shape": list(lay["v"]),
        "measured_k_shape": list(have[0]) if have else None,
        "measured_v_shape": list(have[1]) if have else None,
        "visible_bytes": pred_visible,
        "held_bytes": held_pred,
    }
    return rows, measured


def _vllm_holds(layer: Any, vcache: Any, T: int) -> dict[str, int]:
    """What vLLM holds for the same layer and request (kvcalc's prediction, not measured)."""
    from kvcalc.core.footprint import layer_spec

    vspec = layer_spec(layer, 1, vcache)
    return {
        "held_tokens": vspec.held_tokens(T),
        "blocks": vspec.held_blocks(T),
        "bytes": vspec.held_blocks(T) * vspec.page_size_bytes,
        "bytes_per_token": vspec.bytes_per_token,
    }


def _describe(check: Check, model: Any, per_layer: list[dict[str, Any]], notes: list[str], bs: int, *, P: int,
              G: int, n_layers: int, dtype_name: str, device: str, mla_latent: bool) -> None:
    """The check's facts, explanation and details."""
    T = P + G - 1
    v_total = sum(x["vllm"]["bytes"] for x in per_layer)
    t_total = sum(x["transformers"]["visible_bytes"] for x in per_layer)
    check.facts = ModelCacheFacts(
        prompt=P, gen=G, layers=n_layers, model_layers=model.num_layers, dtype=dtype_name, device=device,
        transformers_bytes=t_total, vllm_bytes=v_total, vllm_block_size=bs,
    )
    check.explanation = [
        *notes,
        "the rows are transformers' numbers; the vLLM figures (block-rounded, the MLA latent, a window of W "
        "positions in blocks) are kvcalc's prediction for vLLM and are listed under details, not measured here",
    ]
    if model.mla:
        check.explanation.append(
            "MLA: vLLM caches the 576-element latent per token; transformers "
            + ("caches the same latent (>= 5.15)" if mla_latent else "caches decompressed per-head K and V (< 5.15)")
        )
    check.details = {"layers": per_layer, "positions": T, "block_size_vllm": bs, "blocks_vllm": cdiv(T, bs)}


def _build(transformers: Any, torch: Any, cfg: dict, dtype_name: str, device: str) -> Any:
    model_type = cfg.get("model_type")
    if not model_type:
        raise KvcalcError("the model's config has no model_type: transformers cannot build it")
    kwargs = {k: v for k, v in cfg.items() if k != "model_type"}
    model_type = BUILD_AS.get(model_type, model_type)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _quiet(transformers)
            conf = transformers.AutoConfig.for_model(model_type, **kwargs)
            for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
                if hasattr(conf, key):
                    setattr(conf, key, None)
            for key in MLP_KEYS:  # widths the config class fills in (falcon: 4 x hidden)
                if isinstance(getattr(conf, key, None), int):
                    setattr(conf, key, MLP)
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(conf, dtype=getattr(torch, dtype_name))
    except (ValueError, KeyError, TypeError, AttributeError, ImportError, AssertionError, RuntimeError) as exc:
        why = " ".join(str(exc).split())
        why = why if len(why) <= 160 else why[:157] + "..."
        raise env.cannot(f"transformers {transformers.__version__} cannot build {model_type!r} here: {why}") from None
    return model.to(device).eval()


def _quiet(transformers: Any) -> None:
    try:
        transformers.logging.set_verbosity_error()
    except AttributeError:  # pragma: no cover
        pass


def _run(torch: Any, model: Any, P: int, G: int, device: str) -> Any:
    """Prefill P tokens, then G-1 decode steps, each feeding back the argmax token."""
    import inspect

    params = inspect.signature(model.forward).parameters
    key = "cache" if "cache" in params else "past_key_values"
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, P), generator=gen).to(device)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = model(input_ids=ids, use_cache=True)
        cache = _out_cache(out)
        for _ in range(G - 1):
            tok = out.logits[:, -1:].argmax(-1)
            out = model(input_ids=tok, use_cache=True, **{key: cache})
            cache = _out_cache(out)
    return cache


def _out_cache(out: Any) -> Any:
    for name in ("cache", "past_key_values"):
        try:
            c = out[name]  # ModelOutput is a dict: no deprecated attribute access
        except (KeyError, TypeError, IndexError):
            c = None
        if c is not None:
            return c
    raise env.cannot("the model returned no cache object (use_cache=True)")
