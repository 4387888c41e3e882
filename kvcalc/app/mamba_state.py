"""Settings -> how vLLM holds a hybrid model's recurrent state (prefix caching, ``mamba_cache_mode``): the
CacheSettings fields kvcalc.core.mamba_cache derives, and the note that says what the pool counts."""

from __future__ import annotations

from typing import Any

from kvcalc.app.settings import Settings
from kvcalc.core.dtypes import MODEL_DTYPES
from kvcalc.core.mamba_cache import GDN, MODES, line_for, mamba_cache, mixer_of
from kvcalc.core.model import ModelSpec
from kvcalc.core.vllm_rules import parse_release
from kvcalc.errors import ConfigError, PlanError, named

# vLLM 0.33 runs a gated delta net's prefill with FlashInfer on Hopper (sm90); on Blackwell only with CUDA >= 13
# and key heads of 128 (vllm==0.33.0: layers/mamba/gdn/qwen_gdn_linear_attn.py:158-164), which kvcalc cannot see
FLASHINFER_GDN_SM = frozenset({90})


def _mode(s: Settings) -> str | None:
    if s.mamba_cache_mode is None or str(s.mamba_cache_mode).strip().lower() == "auto":
        return None
    mode = str(s.mamba_cache_mode).strip().lower()
    if mode not in MODES:
        raise PlanError(f"{named('mamba_cache_mode')} {s.mamba_cache_mode!r} is not known; valid: auto, {', '.join(MODES)}")
    return mode


def _sm(s: Settings) -> int:
    """The compute capability of --gpu; for --gpu auto the local card's, when the catalog holds it."""
    if s.gpu is None:
        return 0
    from kvcalc.app.budget_gpu import settings_gpu

    gpu = settings_gpu(s)
    return gpu.sm if gpu is not None else 0


def mamba_fields(model: ModelSpec, s: Settings, version: str) -> tuple[dict[str, Any], str | None]:
    """The CacheSettings fields of vLLM's state mode for ``model`` (none for a model without state layers, or
    for SGLang) and the pool note that names it."""
    mode = _mode(s)
    if "mamba" not in model.kinds or str(s.engine).strip().lower() != "vllm":
        return {}, None
    mixer = mixer_of(model.model_type)
    sm = _sm(s)
    try:
        mc = mamba_cache(parse_release(version), model.model_type, mixer, prefix_caching=s.enable_prefix_caching,
                         mode=mode, flashinfer_gdn=sm in FLASHINFER_GDN_SM)
    except ValueError as exc:
        valid = exc.args[0]
        if not valid:
            raise PlanError(
                f"{named('mamba_cache_mode')}: vLLM {version} has no mamba_cache_mode (0.15.0 and later); "
                f"give {named('enable_prefix_caching')} or leave it out"
            ) from None
        raise PlanError(f"{named('mamba_cache_mode')} {mode!r}: vLLM {version} accepts {', '.join(valid)}") from None
    # speculative decoding: K more state pages per request, which the pool's sizing counts from 0.15
    # (vllm==0.33.0: layers/mamba/abstract.py:86-90, for every method; kvcalc.core.mamba_cache.MambaCacheLine)
    counts = line_for(parse_release(version)).counts_speculative
    k = model.speculative_tokens if counts else 0
    fields = {
        "mamba_cache_mode": mc.mode, "mamba_checkpoint_blocks": mc.checkpoint_blocks,
        "mamba_checkpoint_alignment": mc.checkpoint_alignment, "mamba_all_adds_speculative": mc.all_adds_speculative,
        "num_speculative_blocks": k,
    }
    spec = f" + {k} speculative" if k else ""
    pages = {"none": f"1{spec} state page{'s' if k else ''} per request",
             "align": f"{2 + mc.checkpoint_blocks}{spec} state pages per request",
             "all": "one state page per block of each request" + (f"{spec}" if k and mc.all_adds_speculative else "")}[mc.mode]
    note = f"state layers: {pages} (vLLM {version}: {mc.why})"
    if model.speculative_tokens and not counts:
        note += (f"; the drafter's {model.speculative_tokens} speculative state pages are allocated per request but "
                 "vLLM before 0.15 leaves them out of the pool's sizing")
    if mc.checkpoint_blocks:
        note += "; one of them a prefill checkpoint"
    gpu_unknown = not sm and mc.mode == "align" and mixer == GDN and parse_release(version) >= (0, 33)
    if gpu_unknown:  # the checkpoint page depends on the GPU (FLASHINFER_GDN_SM)
        note += ("; on Hopper (and Blackwell with CUDA 13) vLLM 0.33 adds a prefill-checkpoint page and keeps the "
                 "block a multiple of 64 (give --gpu)")
    return fields, note


# vLLM's config hook for Qwen3.5 / Qwen3.6 (Qwen3_5For{CausalLM,ConditionalGeneration} and their MoE variants): an
# 'auto' mamba SSM cache dtype takes the text config's mamba_ssm_dtype (float32 in the published configs), so the
# gated-delta-net temporal state is fp32 while the conv state keeps the model dtype (vllm==0.17.0:
# model_executor/models/config.py:625-650, :685-686; 0.27.1: :799-829, :959-962; mamba_utils.py:95-108)
# NemotronH's hook does the same with mamba_ssm_cache_dtype, float16 where the config names none, from 0.13.0
# (NemotronHForCausalLMConfig, vllm==0.13.0: model_executor/models/config.py:530-549; 0.17.0: :605-622)
_QWEN35 = ("mamba_ssm_dtype", None, (0, 0))
SSM_DTYPE_FROM_CONFIG: dict[str, tuple[str, str | None, tuple[int, ...]]] = {
    "qwen3_5": _QWEN35, "qwen3_5_text": _QWEN35, "qwen3_5_moe": _QWEN35, "qwen3_5_moe_text": _QWEN35,
    "nemotron_h": ("mamba_ssm_cache_dtype", "float16", (0, 13)),
}


def ssm_state_dtype(model: ModelSpec, mdt: str, release: tuple[int, ...] = (0, 33)) -> str:
    """The dtype of a recurrent layer's temporal (SSM) state in vLLM: the model dtype, or the config's own."""
    rule = SSM_DTYPE_FROM_CONFIG.get(str(model.arch.get("model_type")))
    if rule is None or tuple(release) < rule[2]:
        return mdt
    own = model.arch.get(rule[0], rule[1])
    if own is None:
        return mdt
    if isinstance(own, str) and own in MODEL_DTYPES:
        return own
    raise ConfigError(f"config field '{rule[0]}' is {own!r}; valid: {', '.join(MODEL_DTYPES)}")
