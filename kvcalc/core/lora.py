"""LoRA's stacked adapter buffers (``--enable-lora``): what vLLM allocates beside the weights while loading.

vLLM wraps every supported linear layer and the embedding modules at load time (``load_lora_model``
inside the weights' DeviceMemoryProfiler, vllm==0.22.0: v1/worker/gpu_model_runner.py:5047-5058), and each
wrapper allocates zeroed A and B stacks for ``max_loras`` adapters of ``max_lora_rank`` in the LoRA dtype
(the model dtype by default, config/lora.py:128-129), so "Model loading took" counts them:

- a linear layer (lora/layers/base_linear.py:99-150, column_parallel_linear.py:207-245): per slice of a
  packed layer (q, k, v; gate, up) A = rank x the layer's input on this rank, B = the slice's output on
  this rank x rank. Column-parallel layers see the whole input and their output split; row-parallel
  (o_proj, down_proj) their input split and the whole output (row_parallel_linear.py:27-28);
- the input embedding (lora/layers/vocal_parallel_embedding.py:49-66): A = vocab x rank, B = hidden x rank;
- the LM head, through the logits processor (lora/layers/logits_processor.py:93-114): A = rank x hidden,
  B = vocab x rank. Both use the whole vocabulary on every rank.

The same shapes in 0.13-0.33 (vocal_parallel_embedding.py / vocab_parallel_embedding.py, no
lora_extra_vocab_size from 0.13; 0.10-0.12 also reserve 256 extra vocabulary rows, not modelled)."""

from __future__ import annotations

from kvcalc.core.units import figure


def lora_layer_elements(hidden: int, q_width: int, kv_width: int, inter: int, tp: int, rank: int) -> int:
    """A and B elements of one adapter slot in one decoder layer on one TP rank: attention's packed
    q/k/v and o, and a gated MLP's packed gate/up and down. ``kv_width``: one of K or V on this rank."""
    return lora_attention_elements(hidden, q_width, kv_width, tp, rank) + lora_mlp_elements(hidden, inter, tp, rank)


def lora_attention_elements(hidden: int, q_width: int, kv_width: int, tp: int, rank: int) -> int:
    qkv = 3 * rank * hidden + (q_width // tp + 2 * kv_width) * rank
    o = rank * (q_width // tp) + hidden * rank
    return qkv + o


def lora_mlp_elements(hidden: int, inter: int, tp: int, rank: int) -> int:
    """A gated MLP's packed gate/up and down (0 for no MLP)."""
    if not inter:
        return 0
    return 2 * rank * hidden + 2 * (inter // tp) * rank + rank * (inter // tp) + hidden * rank


def lora_buffers(
    layer_elements: list[int], hidden: int, vocab: int, rank: int, max_loras: int, dtype_bytes: int,
    first: bool, last: bool,
) -> tuple[int, str]:
    """Bytes of the stacks on one GPU of a PP stage whose decoder layers hold ``layer_elements`` each (the
    embedding on the first stage, the LM head on the last), and how."""
    embed = (vocab * rank + hidden * rank) if first else 0
    head = (rank * hidden + vocab * rank) if last else 0
    total = max_loras * (sum(layer_elements) + embed + head) * dtype_bytes
    kinds = sorted(set(layer_elements))
    each = f"{len(layer_elements)} layers x {kinds[0]:,} elements" if len(kinds) == 1 else (
        f"{len(layer_elements)} layers, {sum(layer_elements):,} elements")
    return total, (
        f"LoRA stacks {max_loras} adapter(s) x rank {rank}: {each}"
        + (" + embedding" if first else "") + (" + LM head" if last else "") + f" x {dtype_bytes} B = {figure(total)}"
    )


# routed experts take LoRA from 0.11.1 (FusedMoEWithLoRA, vllm==0.11.1: lora/layers/fused_moe.py:302-360): per adapter
# slot and local expert, w1 and w3 (0.12+: gate and up, one slice for a non-gated MoE, ``_w13_slices``) each A = rank x
# hidden and B = the expert's intermediate on this rank x rank, and w2 A = rank x that intermediate, B = hidden x rank
# (vllm==0.17.0: lora/layers/fused_moe.py:355-410; the same in 0.22.0 and 0.33.0)
MOE_LORA_FIRST = (0, 11, 1)
NON_GATED_SLICES_FIRST = (0, 12)


def moe_lora_elements(hidden: int, inter_local: int, experts_local: int, rank: int, slices: int) -> int:
    """A and B elements of one adapter slot's stacks over one MoE layer's local experts on one rank."""
    return experts_local * rank * (slices * (hidden + inter_local) + inter_local + hidden)
