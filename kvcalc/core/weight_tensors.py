"""The parameter tensors one PP stage of a decoder allocates on a rank, in the order vLLM's model
code creates them, and what PyTorch's allocator adds to their sum (kvcalc.core.allocator).

vLLM packs q, k and v into one ``qkv_proj`` and gate and up into one ``gate_up_proj``
(model_executor/layers/linear.py QKVParallelLinear, MergedColumnParallelLinear), and a MoE layer's
experts into two 3-D tensors, ``w13_weight`` [experts, 2 x I / TP, hidden] and ``w2_weight``
[experts, hidden, I / TP] (layers/fused_moe/layer.py); the embedding comes first, the LM head
after the last layer (vllm==0.19.0: models/llama.py, qwen2.py, qwen3_moe.py). Tensors under
1 MiB (norms, biases, the router) are counted exactly by the allocator and left out here.
Pure: stdlib only, bytes as integers.
"""

from __future__ import annotations

from kvcalc.core.allocator import allocated_bytes
from kvcalc.core.model import ModelSpec

# the layer kinds whose attention is vLLM's plain QKV + O projection
PLAIN_ATTENTION = frozenset({"full", "sliding", "chunked"})


def layer_tensors(model: ModelSpec, row: tuple[str, int, int, int], h: int, ranks: tuple[int, int], experts: int, gated: bool) -> list[int]:
    """Element counts of one decoder layer's large tensors on a rank: qkv, o, then the MLP
    (gate_up and down, or the shared expert's, then w13 and w2). ``row`` is weights._layer_table's
    (kind, attention, dense MLP, experts) parameters; ``ranks``: (TP size, the ranks experts are spread over)."""
    _, _, dense, exp = row
    tp, er = ranks
    d, heads, kv = model.head_dim, model.num_attention_heads, model.num_kv_heads
    kv_rank = kv // tp if kv >= tp else 1  # vLLM replicates KV heads when TP exceeds them
    out = [(heads // tp + 2 * kv_rank) * d * h, h * (heads // tp) * d]
    mlp = dense - (h * experts if exp else 0)  # a MoE layer's dense part holds the router too
    if mlp:
        parts = 3 if gated else 2
        out += [(parts - 1) * mlp // parts // tp, mlp // parts // tp]
    if exp:
        parts = 3 if gated else 2
        out += [(parts - 1) * exp // parts // er, exp // parts // er]
    return out


def stage_slack(
    model: ModelSpec,
    table: tuple[tuple[str, int, int, int], ...],
    span: tuple[int, int],
    tp: tuple[int, int],
    dt: int,
    ends: tuple[bool, bool, bool],
    dims: tuple[int, int, int, bool, int],
) -> int:
    """Bytes PyTorch's allocator counts beyond the exact size of one stage's tensors on a rank.
    ``tp``: (TP size, the ranks experts are spread over); ``ends``: (first stage, last stage, LM head
    tied to the embedding); ``dims``: (hidden, vocab, experts, gated MLP, the RoPE tables' bytes).
    0 where a layer is not plain attention (MLA, mamba, linear attention): their tensors are not listed."""
    start, end = span
    first, last, tied = ends
    h, vocab, experts, gated, rope = dims
    rows = table[start:end]
    if not rows or any(r[0] not in PLAIN_ATTENTION for r in rows) or model.mla:
        return 0
    embed = vocab // tp[0] * h * dt
    sizes = [embed] if first else []
    for i, row in enumerate(rows):
        layer = [n * dt for n in layer_tensors(model, row, h, tp, experts, gated)]
        if i == 0 and rope:
            layer.insert(2, rope)  # the first attention builds the (shared) RoPE table after qkv and o
        sizes += layer
    if last and not (tied and first):
        sizes.append(embed)
    return allocated_bytes(sizes) - sum(sizes)
