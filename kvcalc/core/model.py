"""The canonical model spec: what every cache-holding module of a model stores, at TP=1.

Built from a config in one place (``kvcalc.sources.config``); everything else reads
only this.
"""

from __future__ import annotations

from kvcalc.core.record import cached_property, field, record


@record
class StateArch:
    """One recurrent-state tensor of a mamba / linear-attention layer, at TP=1."""

    shape: tuple[int, ...]
    split_dim: int  # the dimension TP divides, -1 when every rank holds all of it
    role: str  # "conv" (stored in the mamba cache dtype) or "ssm" (mamba ssm dtype)


@record
class LayerArch:
    """One cache-holding module (self-attention, cross-attention or state) of a layer."""

    layer: int  # index of the decoder layer it belongs to: PP splits on this
    kind: str  # full | sliding | chunked | mla | cross | mamba
    num_kv_heads: int = 0  # global; MLA: 1 (the latent)
    head_size: int = 0
    head_size_v: int = 0
    window: int = 0  # sliding window, chunk size, or encoder positions (cross)
    state: tuple[StateArch, ...] = ()
    draft: bool = False  # a speculative drafter's layer (its KV dtype may be its own: CacheSettings.draft_kv_dtype)


ATTENTION_KINDS = frozenset({"full", "sliding", "chunked", "mla", "cross"})


@record
class ModelSpec:
    name: str
    source: str
    model_type: str
    num_layers: int  # decoder layers: the unit PP splits
    num_attention_heads: int  # query heads
    num_kv_heads: int  # KV heads of the self-attention layers (MLA: 1 latent)
    head_dim: int  # K width of a self-attention layer (MLA: kv_lora_rank + rope dim)
    head_dim_v: int
    dtype: str  # model dtype as vLLM resolves it
    layers: tuple[LayerArch, ...]
    max_model_len: int  # vLLM's derived default (0.30+)
    # the length vLLM 0.9.2-0.29 derives where it differs (YaRN: original positions x factor); see
    # RuleLine.yarn_len_from_original
    max_model_len_yarn_original: int | None = None
    mla: bool = False
    vllm_supported: bool = True
    encoder_decoder: bool = False
    notes: tuple[str, ...] = ()
    # raw architecture numbers used by estimates elsewhere (weights); never by KV math
    arch: dict = field(default_factory=dict, compare=False, hash=False)
    # TP divisibility of state heads (e.g. GDN value heads); (name, count)
    tp_divisors: tuple[tuple[str, int], ...] = ()
    # speculative decoding (kvcalc.core.speculative.with_drafter): K draft tokens, the drafter's method and how
    # many of ``layers`` (the last ones) are its own
    speculative_tokens: int = 0
    drafter_method: str = ""
    draft_layers: int = 0
    drafter_model: str = ""  # the draft checkpoint of a draft-model method (eagle, eagle3, dflash, draft_model)
    draft_kv_dtype: str = ""  # the drafter's own kv_cache_dtype (0.26+), "" when it takes the target's

    @property
    def attention(self) -> str:
        """MHA / GQA / MQA / MLA, plus the layer families when the model mixes them."""
        if self.mla:
            base = "MLA"
        elif self.num_kv_heads == self.num_attention_heads:
            base = "MHA"
        elif self.num_kv_heads == 1:
            base = "MQA"
        else:
            base = "GQA"
        extra = [k for k in self.kinds if k not in ("full", "mla")]
        return base if not extra else f"{base} + {' + '.join(extra)}"

    @cached_property
    def kinds(self) -> tuple[str, ...]:
        seen: list[str] = []
        for layer in self.layers:
            if layer.kind not in seen:
                seen.append(layer.kind)
        return tuple(seen)

    def count(self, kind: str) -> int:
        return sum(1 for layer in self.layers if layer.kind == kind)
