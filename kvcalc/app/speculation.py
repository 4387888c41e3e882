"""``--speculative-config`` -> the drafter vLLM builds for it (kvcalc.core.speculative), and the model as vLLM's
KV cache sees it with that drafter. vLLM's own parsing is followed (vllm==0.33.0: config/speculative.py
``SpeculativeConfig.__post_init__``, :1226-1300, method detection :1436-1480): no method and no model named
"ngram" is a draft model; the per-family ``*_mtp`` spellings are ``mtp``; a draft model whose repo name says
EAGLE / EAGLE-3 / DFlash is one; ``draft_tensor_parallel_size`` is 1 or the target's TP (:1849-1869), and EAGLE /
MTP heads run at the target's TP whatever it says (no proposer reads the draft's parallel config)."""

from __future__ import annotations

import json
from typing import Any

from kvcalc.app.settings import Settings
from kvcalc.core import speculative as sp
from kvcalc.core.mamba_cache import mixer_of
from kvcalc.core.memo import Memo
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import record, replace
from kvcalc.core.vllm_rules import parse_release
from kvcalc.errors import PlanError, named
from kvcalc.words import plural

FLAG = "speculative_config"
KNOWN_KEYS = frozenset({
    "method", "model", "num_speculative_tokens", "draft_tensor_parallel_size", "quantization", "revision",
    "prompt_lookup_max", "prompt_lookup_min", "max_model_len", "disable_by_batch_size", "kv_cache_dtype",
    "parallel_drafting", "rejection_sample_method", "draft_sample_method", "code_revision", "moe_backend",
    "attention_backend", "use_local_argmax_reduction", "enforce_eager", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "speculative_token_tree", "hf_overrides", "disable_padded_drafter_batch", "draft_load_config",
})
METHODS = sp.NO_KV | sp.DRAFT_MODEL | sp.NOT_MODELLED | {sp.MTP}
MAX_JSON = 16384  # characters of --speculative-config


@record
class Request:
    """What the flag asks for, as vLLM reads it."""

    method: str
    num_tokens: int | None
    model: str | None
    draft_tp: int | None
    kv_cache_dtype: str | None


def _bad(what: str) -> PlanError:
    return PlanError(f"{named(FLAG)} {what}")


def parse(text: Any) -> Request:
    """The JSON vLLM takes (a dict), checked; the method as vLLM resolves it before loading a draft config."""
    raw = str(text)
    try:  # bounded: vLLM's config is a few keys; a deep or huge document is refused, not recursed into
        cfg = json.loads(raw) if len(raw) <= MAX_JSON else None
    except (ValueError, RecursionError):
        cfg = None
    if not isinstance(cfg, dict):
        raise PlanError(
            f"{named(FLAG)} takes vLLM's JSON object (at most {MAX_JSON:,} characters), like "
            f"'{{\"method\": \"eagle\", \"num_speculative_tokens\": 3}}'; got {raw[:80]!r}{'...' if len(raw) > 80 else ''}"
        )
    unknown = sorted(k for k in cfg if k not in KNOWN_KEYS)
    if unknown:
        raise _bad(f"has key {unknown[0]!r}, which vLLM's SpeculativeConfig does not take; valid: method, model, "
                   "num_speculative_tokens, draft_tensor_parallel_size, ...")
    method, model = cfg.get("method"), cfg.get("model")
    if method is not None and not isinstance(method, str):
        raise _bad(f"'method' must be a string, got {method!r}")
    if model is not None and not (isinstance(model, str) and model.strip()):
        raise _bad(f"'model' must be a repo id, a path or 'ngram', got {model!r}")
    k = cfg.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 64):
        raise _bad(f"'num_speculative_tokens' must be an integer from 1 to 64, got {k!r}")
    tp = cfg.get("draft_tensor_parallel_size")
    if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
        raise _bad(f"'draft_tensor_parallel_size' must be a positive integer, got {tp!r}")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = method.strip().lower()
    if method == "[ngram]":
        method = "ngram"
    if method.endswith("_mtp"):  # deepseek_mtp, qwen3_next_mtp, ...: deprecated spellings of mtp
        method = sp.MTP
    if method not in METHODS:
        raise _bad(f"method {method!r} is not one vLLM knows; valid: {', '.join(sorted(METHODS))}")
    if method in ("draft_model", sp.MTP) and model:
        low = model.lower()  # vLLM's detection from the draft's name (config/speculative.py:1436-1454)
        method = "eagle" if "eagle-" in low else "eagle3" if "eagle3" in low else "dflash" if "dflash" in low else method
    if method in sp.DRAFT_MODEL and not model:
        raise _bad(f"method {method!r} needs 'model': the draft checkpoint (a Hub repo id or a local folder)")
    if k is None and method != sp.MTP:
        raise _bad("needs 'num_speculative_tokens' (a positive integer)")
    kv = cfg.get("kv_cache_dtype")
    if kv is not None and not (isinstance(kv, str) and 0 < len(kv.strip()) <= 40):
        raise _bad(f"'kv_cache_dtype' must be a KV cache dtype name like 'auto' or 'fp8', got {str(kv)[:40]!r}")
    return Request(method, k, model.strip() if isinstance(model, str) else None, tp, kv.strip().lower() if kv else None)


def _check_release(req: Request, release: tuple[int, ...], version: str) -> None:
    first, last = sp.FIRST.get(req.method), sp.LAST.get(req.method)
    if (first is not None and release < first) or (last is not None and release > last):
        when = f"from {'.'.join(map(str, first))}" if first is not None and release < first else "up to 0.32"
        raise _bad(f"method {req.method!r} is not in vLLM {version} (it is {when})")


def drafter(model: ModelSpec, s: Settings, version: str) -> sp.Drafter:
    """The drafter of ``--speculative-config`` for ``model`` on vLLM ``version``."""
    req = parse(s.speculative_config)
    release = parse_release(version)
    _check_release(req, release, version)
    tp = s.tp if isinstance(s.tp, int) else 1
    if req.draft_tp is not None and req.draft_tp not in (1, tp):
        raise _bad(f"'draft_tensor_parallel_size' {req.draft_tp}: vLLM takes 1 or the target's --tp ({tp})")
    grows = "mamba" in model.kinds and sp.conv_grows(mixer_of(model.model_type), release)
    notes: list[str] = []
    own = _own_kv_dtype(req, release, version, notes)
    if "mamba" in model.kinds and not grows and mixer_of(model.model_type) == "mamba2":
        notes.append("vLLM before 0.33 sizes Mamba-2 pages without the drafter's conv positions while the layers "
                     "hold them (vllm==0.29.0: models/granitemoehybrid.py:641); kvcalc counts the pages without them")
    what = f"speculative decoding ({req.method}, {plural(req.num_tokens or 0, 'draft token')})"
    if req.method in sp.NOT_MODELLED:
        notes.append(f"{what}: kvcalc does not build this drafter; its KV layers (if any) are not counted")
        return sp.Drafter(req.method, req.num_tokens or 0, (), grows, tuple(notes))
    if req.method in sp.NO_KV:
        notes.append(f"{what}: the drafter holds no KV cache")
        return sp.Drafter(req.method, req.num_tokens or 0, (), grows, tuple(notes))
    d = _mtp(model, req, grows, notes, release) if req.method == sp.MTP else _draft(model, req, grows, notes)
    return replace(d, kv_dtype=own) if own and d.layers else d


def _own_kv_dtype(req: Request, release: tuple[int, ...], version: str, notes: list[str]) -> str:
    """The drafter's own KV dtype ('' when its layers take the target's): the speculative config's kv_cache_dtype
    from 0.26, when the release's drafter builds its layers with it."""
    if req.kv_cache_dtype is None:
        return ""
    if release < sp.DRAFT_KV_DTYPE_FIRST:
        raise _bad(f"key 'kv_cache_dtype' is in vLLM's SpeculativeConfig from 0.26.0; vLLM {version} refuses it "
                   "(extra fields are forbidden); drop it: the drafter takes the target's --kv-cache-dtype")
    if req.method == "draft_model" and release[:2] in sp.DRAFT_KV_DTYPE_IGNORED:
        notes.append(f"vLLM {version}'s model runner V2 builds a draft model with the target's cache config "
                     "(vllm==0.31.0: v1/worker/gpu/spec_decode/draft_model/speculator.py:102-110): the speculative "
                     "config's kv_cache_dtype has no effect")
        return ""
    return req.kv_cache_dtype


def _mtp(model: ModelSpec, req: Request, grows: bool, notes: list[str], release: tuple[int, ...]) -> sp.Drafter:
    if model.model_type in sp.MTP_KV_SHARED:
        if release < sp.MTP_KV_SHARED_FIRST:
            raise _bad(f"method 'mtp': vLLM has no MTP drafter for {model.model_type} before 0.21")
        notes.append("speculative decoding (mtp): Gemma 4's MTP layers share the KV of target layers "
                     "(vllm==0.33.0: v1/spec_decode/gemma4.py:302-358): no KV layer added")
        return sp.Drafter(sp.MTP, req.num_tokens or 1, (), grows, tuple(notes))
    count = sp.mtp_count(model)
    if count is None:
        raise _bad(f"method 'mtp': kvcalc does not know where {model.model_type} keeps MTP modules; known: "
                   f"{', '.join(sorted(sp.MTP_FIELDS))}")
    first = sp.MTP_FIELDS[model.model_type][2]
    if release < first:
        raise _bad(f"method 'mtp': vLLM has no MTP drafter for {model.model_type} before {'.'.join(map(str, first))}")
    if count < 1:
        raise _bad(f"method 'mtp': {model.name} declares no MTP modules (num_nextn_predict_layers / "
                   "mtp_num_hidden_layers is 0)")
    k = req.num_tokens or count  # vLLM's default: the checkpoint's modules
    layers = sp.mtp_layers(model, count)
    notes.append(f"speculative decoding (mtp, {plural(k, 'draft token')}): {plural(count, 'MTP layer')} with "
                 f"{'its' if count == 1 else 'their'} own KV, after the decoder's (on the last PP stage)")
    return sp.Drafter(sp.MTP, k, layers, grows, tuple(notes))


_drafts: Memo[ModelSpec] = Memo(64)


def _draft_spec(name: str) -> ModelSpec:
    from kvcalc.errors import KvcalcError
    from kvcalc.sources.resolve import resolve

    try:
        return resolve(name).spec
    except KvcalcError as exc:  # one line that names the flag, then what the source said
        raise type(exc)(f"{named(FLAG)} model {name!r}: {exc.args[0] if exc.args else exc}", exit_code=exc.exit_code) from None


def draft_spec(name: str) -> ModelSpec:
    """The draft checkpoint's model spec (a preset, a local config or a Hub repo id; cached)."""
    return _drafts.get(name, _draft_spec, name)


def _draft(model: ModelSpec, req: Request, grows: bool, notes: list[str]) -> sp.Drafter:
    draft = draft_spec(str(req.model))
    if draft.encoder_decoder or "mamba" in draft.kinds:
        raise _bad(f"draft model {req.model!r} ({draft.model_type}): kvcalc counts decoder-only attention drafters")
    layers = tuple(x for x in draft.layers if x.kind in ("full", "sliding", "chunked", "mla"))
    k = req.num_tokens or 1
    notes.append(f"speculative decoding ({req.method}, {plural(k, 'draft token')}): {plural(len(layers), 'draft layer')} "
                 f"of {draft.name} with {'its' if len(layers) == 1 else 'their'} own KV, after the decoder's (on the last PP stage)")
    return sp.Drafter(req.method, k, layers, grows, tuple(notes), str(req.model))


_applied: Memo[tuple[ModelSpec, sp.Drafter]] = Memo(256)


def apply(model: ModelSpec, s: Settings, version: str) -> tuple[ModelSpec, sp.Drafter]:
    """The model with the drafter's layers (cached per model, flag and release)."""
    return _applied.get((model, id(model.arch), str(s.speculative_config), s.tp, version), _apply, model, s, version)


def _apply(model: ModelSpec, s: Settings, version: str) -> tuple[ModelSpec, sp.Drafter]:
    d = drafter(model, s, version)
    return sp.with_drafter(model, d), d


# MTP modules whose 2h -> h projection is a plain nn.Linear, whole on every rank (vllm==0.33.0: models/
# deepseek_mtp.py:87, glm4_moe_mtp.py:92); Qwen's is a ColumnParallelLinear (qwen3_5_mtp.py:98-106)
MTP_PROJ_REPLICATED = frozenset({"deepseek_v3", "deepseek_v32", "glm4_moe", "mimo"})


def drafter_weights(model: ModelSpec, tp: int, dtype_bytes: int, estimate: Any) -> tuple[int, str]:
    """Bytes of the drafter's weights on one GPU of the last PP stage (vLLM loads them inside 'Model loading
    took', vllm==0.33.0: v1/worker/gpu_model_runner.py:5009-5012), and how they were counted. ``estimate(model,
    tp)`` is the weights estimate of a model on one PP stage (kvcalc.core.weights.estimate_weights)."""
    n = model.draft_layers
    if model.drafter_method == sp.MTP and n:
        # the MTP decoder layers as the target's own (the estimate of the model with n more layers, less the
        # model's), plus per module the 2h -> h projection and three norms, in the model dtype; embedding and LM
        # head are the target's (vLLM shares them: v1/spec_decode/llm_base_proposer.py:1418-1576)
        longer = replace(model, num_layers=model.num_layers + n)
        layers = estimate(longer, tp) - estimate(model, tp)
        h = int(model.arch.get("hidden_size") or 0)
        proj = 2 * h * h // (1 if model.model_type in MTP_PROJ_REPLICATED else tp)
        extra = n * (proj + 3 * h) * dtype_bytes
        return layers + extra, (f"+ {n} MTP module{'s' if n > 1 else ''} (estimate: decoder layers as the target's, "
                                "2h x h projection and norms; embedding and LM head shared)")
    if model.drafter_method in sp.DRAFT_MODEL and model.drafter_model:
        return _draft_weights(model, tp, dtype_bytes)
    return 0, ""


def _draft_weights(model: ModelSpec, tp: int, dtype_bytes: int) -> tuple[int, str]:
    """A draft checkpoint's weights on one GPU, estimated from its config (its own quantization) at the target's TP.
    EAGLE heads use the target's embedding (vllm==0.33.0: v1/spec_decode/llm_base_proposer.py:1418-1508, unless the
    checkpoint brings its own); EAGLE-1 also its LM head (:1510-1576), EAGLE-3 keeps one of draft_vocab_size rows
    (models/llama_eagle3.py:329-333) and adds an fc of num_aux_hidden_states (3) x the target width -> its width,
    whole on every rank (:210-250), and its first layer's qkv takes twice its width (:80-96); EAGLE-1's fc is 2h -> h
    (llama_eagle.py:110). A draft model (and DFlash) is counted whole."""
    from kvcalc.core.plan import ParallelPlan
    from kvcalc.core.weights import arch_int, estimate_weights

    draft = draft_spec(model.drafter_model)
    a = draft.arch
    h, vocab = arch_int(a, "hidden_size"), arch_int(a, "vocab_size")
    dt = dtype_bytes
    whole = estimate_weights(draft, ParallelPlan(tp=tp)).bytes_per_stage[0]
    how = f"+ draft {draft.name} ({model.drafter_method}; estimate from its config"
    method = model.drafter_method
    if method in ("eagle", "eagle3"):
        whole -= vocab * h // tp * dt  # the target's embedding
        how += ", the target's embedding"
        if method == "eagle":
            whole -= vocab * h // tp * dt - 2 * h * h * dt  # the target's LM head; fc 2h -> h
            how += " and LM head, fc 2h x h"
        else:
            rows = arch_int(a, "draft_vocab_size", default=vocab)
            aux = arch_int(a, "num_aux_hidden_states", default=3)
            target_h = arch_int(a, "target_hidden_size", default=h)
            heads, kv, d = draft.num_attention_heads, draft.num_kv_heads, draft.head_dim
            # a head over the target's whole vocabulary carries the target's LM head, which vLLM finds identical
            # and shares (v1/spec_decode/llm_base_proposer.py:1510-1576; "Detected EAGLE model with lm_head identical
            # to the target model" in held-out set 40's log); a smaller draft vocabulary keeps its own
            own_head = rows != arch_int(model.arch, "vocab_size", default=vocab)
            whole += ((rows if own_head else 0) - vocab) * h // tp * dt + aux * target_h * h * dt
            whole += h * (heads + 2 * kv) * d // tp * dt + h * dt
            head_how = f"LM head of {rows:,} rows" if own_head else "the target's LM head"
            how += f", {head_how}, fc {aux} x {target_h} -> {h}, 2h-wide first qkv, hidden_norm"
    return whole, how + ")"


def drafter_pass(model: ModelSpec, shapes_of: Any, tp: int, tokens: int, dtype_bytes: int) -> tuple[int, str] | None:
    """The profile run's drafter phase under model runner V2 for an EAGLE / EAGLE-3 head (None otherwise), bytes on
    one GPU and how. vllm==0.24.0: v1/worker/gpu/model_runner.py:509-622 runs the target over ``tokens``, keeps its
    hidden states and the EAGLE-3 auxiliary ones in locals, then the speculator's propose over the same tokens
    (spec_decode/autoregressive/speculator.py:137-185: EAGLE-3 concatenates the auxiliary states, its fc's output
    stays in a local beside the copy in the persistent buffer; the same in 0.29.0 :248, 0.31.0 :241 and 0.33.0
    target_dependent_ar/speculator.py:210-246; the profile pass is eager, need_eager=is_profile) and the head's
    forward, whose input embeddings are held through the layer (models/llama_eagle3.py:95-123, 230-250). Peak: the head's layer forward (kvcalc.core.budget_rules.
    forward_per_token with the head's shapes) + (2 + auxiliary + 1 for EAGLE-3, 2 for EAGLE) hidden states held.
    ``shapes_of(spec)``: the profile shapes of a model spec (app.budget._shapes)."""
    from kvcalc.core.budget_rules import forward_per_token
    from kvcalc.core.weights import arch_int

    if model.drafter_method not in ("eagle", "eagle3") or not model.drafter_model:
        return None
    draft = draft_spec(model.drafter_model)
    per_token, which = forward_per_token(shapes_of(draft), tp)
    h = arch_int(model.arch, "hidden_size")
    aux = arch_int(draft.arch, "num_aux_hidden_states", default=3) if model.drafter_method == "eagle3" else 0
    held = 3 + aux if aux else 2
    total = tokens * per_token + held * tokens * h * dtype_bytes
    return total, (f"the drafter's pass over {tokens} tokens: its layer ({which}) + {held} x {tokens} x {h} hidden "
                   f"states held (the target's{', its ' + str(aux) + ' auxiliary' if aux else ''}, the head's input "
                   f"embeddings{', its fc output' if aux else ''}) = {total:,} B")


# V1's dummy sampler run dry-runs the rejection sampler when speculative decoding is on (one draft token per request,
# draft_probs None): at its peak, inside sample_recovered_tokens, it holds the bf16 [2R, V] random logits, the bonus
# logits' copy, and six fp32 [R, V] tensors (the bonus sampler's raw logits, the target's raw logits and their clone,
# the target probabilities, q and inv_q): 3 x dtype + 24 B per (row x vocab) element, against 14 for the plain
# sampler call before it (vllm==0.20.0: v1/worker/gpu_model_runner.py:5676-5700, v1/sample/rejection_sampler.py:
# 87-185, v1/sample/sampler.py:68-143; the same tensors in 0.22.0 and 0.27.1; the same dry run in 0.29.0 :6380-6400,
# 0.31.0 :6275-6295 and 0.33.0 :5938-5958, its tensors not re-counted there). Read from 0.17 on (Triton top-k/top-p,
# in place); 0.13's sort path peaks otherwise, and 0.14-0.16 were not read.
REJECTION_DRY_RUN_FIRST = (0, 17)
REJECTION_DRY_RUN_FP32 = 24


def rejection_dry_run(release: tuple[int, ...], rows: int, vocab: int, dtype_bytes: int) -> tuple[int, str] | None:
    """The V1 rejection-sampler dry run's [rows, vocab] tensors at its peak (None before 0.17, not read)."""
    if tuple(release) < REJECTION_DRY_RUN_FIRST:
        return None
    per = 3 * dtype_bytes + REJECTION_DRY_RUN_FP32
    return rows * vocab * per, f"the rejection sampler's dry run (speculative decoding, model runner V1): {rows} seqs x vocab {vocab} x {per} B"
