"""Speculative decoding in vLLM's KV cache: the attention layers a drafter adds, and what it does to a hybrid
model's recurrent state. Read in the wheels (docs/vllm-releases.md section 12 cites every rule):

- ``get_kv_cache_spec`` collects every attention layer built inside the engine's config, the drafter's too,
  and groups them by spec alone (a draft layer equal to a target layer joins its group; vllm==0.33.0:
  v1/worker/gpu_model_runner.py:7081-7117, v1/kv_cache_interface.py:215 ``is_draft`` compare=False,
  v1/core/kv_cache_planning.py:481-541; the same grouping by equality in 0.11.0-0.32.0, kv_cache_utils.py).
  ``num_speculative_tokens`` (K) never adds layers: MTP steps beyond the checkpoint's modules reuse them
  (vllm==0.33.0: models/deepseek_mtp.py:217, qwen3_5_mtp.py:170).
- MTP: the target checkpoint's own modules, each a decoder layer with the target's attention geometry (MLA
  for DeepSeek-V3), full attention even in a hybrid (vllm==0.33.0: models/qwen3_5_mtp.py:81-82, 119-124;
  qwen3_next_mtp.py:63, 90-95; deepseek_mtp.py:152-163; glm4_moe_mtp.py:136-149; mimo_mtp.py:97-115).
  Gemma 4's MTP layers share a target layer's KV: none added (v1/spec_decode/gemma4.py:302-358).
- EAGLE / EAGLE-3 / DFlash heads and draft models: the draft config's layers with the draft's own KV heads and
  head size (models/llama_eagle3.py:173, 200-207; v1/spec_decode/draft_model.py:85-112), at the target's TP.
- Hybrid models: gated-delta-net conv states keep K more positions (from 0.11.0; Mamba-2 from 0.33.0, when
  the config-level page sizing also counts them; vllm==0.33.0: layers/mamba/mamba_utils.py:204, 285;
  models/granitemoehybrid.py:644), and every request holds K more state pages (``num_speculative_blocks``,
  layers/mamba/abstract.py:86-90; counted in the pool's sizing from 0.15, kvcalc.core.mamba_cache).

A drafter's layers are numbered after the decoder's and sit on the last PP stage (vLLM builds the drafter
on the last PP rank only, vllm==0.33.0: v1/worker/gpu_model_runner.py:598). Pure: stdlib only.
"""

from __future__ import annotations

from kvcalc.core.model import LayerArch, ModelSpec
from kvcalc.core.record import record, replace

Release = tuple[int, ...]

# methods whose drafter builds no attention layer (n-gram lookup, suffix trees; Medusa / MLP speculator heads
# are MLPs, both gone in 0.33.0: vllm==0.33.0: config/speculative.py:74-82)
NO_KV = frozenset({"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"})
# methods that load a draft checkpoint (speculative_config "model"), whose attention layers hold KV
DRAFT_MODEL = frozenset({"eagle", "eagle3", "draft_model", "dflash"})
MTP = "mtp"
# the first release of the methods that came after 0.11.0 (config/speculative.py's SpeculativeMethod Literal;
# draft_model raises NotImplementedError in V1 before 0.15.1, vllm==0.13.0: engine/arg_utils.py:1743-1745);
# ngram, eagle, eagle3, medusa and MTP run in V1 from 0.9.0.1 at least (v1/worker/gpu_model_runner.py)
FIRST = {
    "suffix": (0, 11, 1), "draft_model": (0, 15, 1), "extract_hidden_states": (0, 17), "ngram_gpu": (0, 18),
    "dflash": (0, 20), "custom_class": (0, 22), "dspark": (0, 25),
}
LAST = {"medusa": (0, 32, 99), "mlp_speculator": (0, 32, 99)}  # removed in 0.33.0
# methods vLLM accepts whose drafter kvcalc does not build: a note says so, no layer is added
NOT_MODELLED = frozenset({"dspark", "extract_hidden_states", "custom_class"})

# where each family's checkpoint counts its MTP modules, the count when the field is absent (Qwen: 1,
# qwen3_next_mtp.py:63, qwen3_5_mtp.py:82) and the first release with its MTP class
_QWEN35_MTP = (("mtp_num_hidden_layers", "num_nextn_predict_layers"), 1, (0, 17))
MTP_FIELDS: dict[str, tuple[tuple[str, ...], int, Release]] = {
    "deepseek_v3": (("num_nextn_predict_layers",), 0, (0, 9)),
    "deepseek_v32": (("num_nextn_predict_layers",), 0, (0, 11)),
    "glm4_moe": (("num_nextn_predict_layers",), 0, (0, 10)),
    "mimo": (("num_nextn_predict_layers",), 0, (0, 10)),
    "qwen3_next": (("num_nextn_predict_layers",), 1, (0, 10, 2)),
    "qwen3_5": _QWEN35_MTP, "qwen3_5_text": _QWEN35_MTP, "qwen3_5_moe": _QWEN35_MTP, "qwen3_5_moe_text": _QWEN35_MTP,
}
# Gemma 4's MTP layers share the KV of the last target layer of their type (gemma4_mtp, from 0.21.0)
MTP_KV_SHARED = frozenset({"gemma4", "gemma4_text"})
MTP_KV_SHARED_FIRST: Release = (0, 21)

# a drafter's own kv_cache_dtype: a speculative config key from 0.26.0 (extra keys are refused before: vllm==0.25.0:
# config/utils.py:69 extra="forbid"); the proposers build the drafter's layers with a cache config carrying it
# (vllm==0.26.0: v1/spec_decode/llm_base_proposer.py:1303-1310, v1/worker/gpu/spec_decode/eagle/utils.py:42-48;
# 0.31.0: config/speculative.py:377-383, 1784-1794; 0.33.0: :396-403), except 0.31's model runner V2 draft-model
# speculator, which keeps the target's (vllm==0.31.0: v1/worker/gpu/spec_decode/draft_model/speculator.py:102-110;
# 0.32.0's standalone_ar/speculator.py:105-116 takes it again)
DRAFT_KV_DTYPE_FIRST: Release = (0, 26)
DRAFT_KV_DTYPE_IGNORED = frozenset({(0, 31)})  # draft_model, where V2 runs it

# the state mixers whose conv state holds K more positions, from which release (GDN: vllm==0.11.0:
# layers/mamba/mamba_utils.py:179; Mamba-2 layer and config sizing agree from 0.33.0)
CONV_GROWS: dict[str, Release] = {"gdn": (0, 11), "mamba2": (0, 33)}


# the methods model runner V2 runs, by release: 'only' these, or all 'except' these; any other falls back to V1
# (VllmConfig._get_v2_model_runner_unsupported_features, vllm==0.22.0: config/vllm.py:1998-2003; 0.24.0: :2027-2032;
# 0.25.0: :2068-2079; 0.29.0: :2562-2574; 0.30.0: :2838-2850; 0.31.0: :3073-3083; 0.32.0: :2927-2934; 0.33.0:
# :3066-3068). V2 is no release's default before 0.22.
V2_METHODS: tuple[tuple[Release, str, frozenset[str]], ...] = (  # newest first
    ((0, 33), "except", frozenset({"suffix", "custom_class"})),
    ((0, 32), "except", frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})),
    ((0, 31), "except", frozenset({"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator", "custom_class"})),
    ((0, 30), "except", frozenset({"ngram", "ngram_gpu", "draft_model", "suffix", "medusa", "mlp_speculator", "custom_class"})),
    ((0, 29), "only", frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark", "extract_hidden_states"})),
    ((0, 25), "only", frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})),
    ((0, 24), "only", frozenset({"eagle", "eagle3", "mtp", "dflash"})),
    ((0, 0), "only", frozenset({"eagle", "eagle3", "mtp"})),
)


def v2_takes(release: Release, method: str) -> bool:
    """Whether model runner V2 runs the drafter of ``method`` in this release (else vLLM uses V1)."""
    first, kind, methods = next(x for x in V2_METHODS if tuple(release) >= x[0])
    return (method in methods) == (kind == "only")


# the config note of a checkpoint with MTP modules (kvcalc.sources.config); dropped once a drafter counts them
MTP_CONFIG_NOTE = "MTP layer(s) add their own cache only with speculative decoding (--speculative-config '{\"method\": \"mtp\"}')"


@record
class Drafter:
    """The drafter vLLM builds for one ``--speculative-config``."""

    method: str
    num_tokens: int  # K: num_speculative_tokens
    layers: tuple[LayerArch, ...] = ()  # attention layers with their own KV (numbered from 0 here)
    conv_grows: bool = False  # recurrent layers' conv states keep K more positions
    notes: tuple[str, ...] = ()
    model: str = ""  # the draft checkpoint (draft-model methods)
    kv_dtype: str = ""  # the drafter's own kv_cache_dtype (0.26+); "": the target's


def mtp_count(model: ModelSpec) -> int | None:
    """How many MTP modules the target checkpoint declares (None: kvcalc does not know the family)."""
    fields = MTP_FIELDS.get(model.model_type)
    if fields is None:
        return None
    for key in fields[0]:
        value = model.arch.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return fields[1]


def mtp_layers(model: ModelSpec, count: int) -> tuple[LayerArch, ...]:
    """``count`` layers with the target's full-attention (or MLA) geometry."""
    own = next((x for x in model.layers if x.kind in ("full", "mla")), None)
    if own is None:
        return ()
    return tuple(replace(own, layer=i) for i in range(count))


def with_drafter(model: ModelSpec, drafter: Drafter) -> ModelSpec:
    """The model as vLLM's KV cache sees it with the drafter: its layers after the decoder's, the recurrent
    layers' conv states K positions longer when the release widens them."""
    layers = list(model.layers)
    if drafter.conv_grows and drafter.num_tokens:
        k = drafter.num_tokens
        layers = [
            replace(x, state=tuple(replace(t, shape=(t.shape[0], t.shape[1] + k)) if t.role == "conv" else t for t in x.state))
            if x.kind == "mamba" else x
            for x in layers
        ]
    base = max((x.layer for x in model.layers), default=-1) + 1
    layers.extend(replace(x, layer=base + i, draft=True) for i, x in enumerate(drafter.layers))
    notes = tuple(n for n in model.notes if not n.endswith(MTP_CONFIG_NOTE)) if drafter.method == "mtp" else model.notes
    return replace(
        model, layers=tuple(layers), notes=(*notes, *drafter.notes), speculative_tokens=drafter.num_tokens,
        drafter_method=drafter.method, draft_layers=len(drafter.layers), drafter_model=drafter.model,
        draft_kv_dtype=drafter.kv_dtype if drafter.layers else "",
    )


def conv_grows(mixer: str, release: Release) -> bool:
    first = CONV_GROWS.get(mixer)
    return first is not None and tuple(release) >= first


def unloaded_bytes(checkpoint: dict, num_layers: int, drafter_method: str) -> int:
    """The checkpoint bytes vLLM does not load without an MTP drafter: 'mtp.*' tensors and decoder layers numbered
    past ``num_layers`` (vllm==0.33.0: models/qwen3_5.py:328, qwen3_next.py:823 map 'mtp.' to None; deepseek_v2.py:
    1653-1654 and glm4_moe.py:495 skip the spec layers). 0 when the drafter is MTP: then they are its weights."""
    if drafter_method == "mtp":
        return 0
    tail = 0
    layers = checkpoint.get("layer_bytes")
    if isinstance(layers, dict):
        tail = sum(int(b) for i, b in layers.items() if str(i).isdigit() and int(i) >= num_layers)
    return int(checkpoint.get("mtp_bytes") or 0) + tail
