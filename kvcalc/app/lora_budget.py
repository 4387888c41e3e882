"""LoRA's stacked adapter buffers in the weights term (core.lora), from the settings."""

from __future__ import annotations

from kvcalc.app.settings import Settings
from kvcalc.core.lora import (
    MOE_LORA_FIRST,
    NON_GATED_SLICES_FIRST,
    lora_attention_elements,
    lora_buffers,
    lora_layer_elements,
    lora_mlp_elements,
    moe_lora_elements,
)
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan, kv_heads_per_rank, pp_ranges
from kvcalc.core.vllm_rules import parse_release
from kvcalc.core.weights import arch_int, gated_mlp, moe_layer, moe_widths
from kvcalc.errors import PlanError, named

# vLLM's MaxLoRARanks (vllm==0.22.0: config/lora.py:26; 0.33.0 :27)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MAX_LORAS = 1 << 12


def _settings(s: Settings) -> tuple[int, int]:
    loras = 1 if s.max_loras is None else s.max_loras
    rank = 16 if s.max_lora_rank is None else s.max_lora_rank
    if isinstance(loras, bool) or not isinstance(loras, int) or not 1 <= loras <= MAX_LORAS:
        raise PlanError(f"{named('max_loras')} must be an integer from 1 to {MAX_LORAS}, got {loras!r}")
    if rank not in LORA_RANKS or isinstance(rank, bool):
        raise PlanError(f"{named('max_lora_rank')} must be one of vLLM's ranks {', '.join(map(str, LORA_RANKS))}; got {rank!r}")
    return loras, rank


def with_lora(
    s: Settings, model: ModelSpec, plan: ParallelPlan, weights: tuple[int, ...], src: str, dtype_bytes: int
) -> tuple[tuple[int, ...], str]:
    """The weights of each PP stage plus the LoRA stacks vLLM allocates while loading (--enable-lora;
    defaults max_loras 1, max_lora_rank 16: vllm==0.22.0 config/lora.py:34-36). Dense attention + gated-MLP
    and MoE decoders (routed experts from 0.11.1: core.lora.MOE_LORA_FIRST); MLA and state-space mixers get a note
    instead of a figure."""
    if not s.enable_lora:
        if s.max_loras is not None or s.max_lora_rank is not None:
            raise PlanError(f"{named('max_loras')} and {named('max_lora_rank')} need {named('enable_lora')}")
        return weights, src
    loras, rank = _settings(s)
    a = model.arch
    if model.mla or any(k not in ("full", "sliding", "chunked") for k in model.kinds):
        return weights, f"{src}; LoRA stacks of this architecture (MLA or state-space layers) not modelled"
    h, vocab = arch_int(a, "hidden_size"), arch_int(a, "vocab_size")
    inter = arch_int(a, "intermediate_size", default=4 * h)
    kv_local, _ = kv_heads_per_rank(model.num_kv_heads, plan.tp)
    q_width, kv_width = model.num_attention_heads * model.head_dim, kv_local * model.head_dim
    dense = lora_layer_elements(h, q_width, kv_width, inter, plan.tp, rank)
    per_layer = [dense] * model.num_layers
    note = ""
    experts, moe_inter, shared = moe_widths(model, a)
    if experts:  # MoE layers: attention, the shared experts' MLP, and the routed experts from 0.11.1
        attention = lora_attention_elements(h, q_width, kv_width, plan.tp, rank)
        mlp = lora_mlp_elements(h, shared, plan.tp, rank)  # the shared experts' MLP (0: none)
        release = parse_release(str(s.vllm_version))
        ep = s.enable_expert_parallel and plan.tp * plan.dp > 1
        local, width = (experts // (plan.tp * plan.dp), moe_inter) if ep else (experts, moe_inter // plan.tp)
        slices = 2 if gated_mlp(model, a) or release < NON_GATED_SLICES_FIRST else 1
        routed = moe_lora_elements(h, width, local, rank, slices) if release >= MOE_LORA_FIRST else 0
        per_layer = [attention + mlp + routed if moe_layer(model, a, i) else dense for i in range(model.num_layers)]
        note = "" if routed else " (routed experts take no LoRA before 0.11.1)"
    ranges = pp_ranges(model.num_layers, plan.pp, plan.pp_layers)
    out, hows = [], []
    for i, (start, end) in enumerate(ranges):
        extra, how = lora_buffers(per_layer[start:end], h, vocab, rank, loras, dtype_bytes, i == 0, i == len(ranges) - 1)
        out.append(weights[i] + extra)
        hows.append(how)
    return tuple(out), f"{src} + {hows[0]}{note}" + (" (stage 0)" if len(hows) > 1 else "")
