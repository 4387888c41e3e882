"""The multimodal encoder's share of vLLM's profile run (docs/vllm-budget.md 2.3.5).

Before the decoder's dummy forward, ``profile_run`` runs the vision encoder on the largest batch of
dummy images the encoder budget admits, and keeps the outputs in the encoder cache until the decoder's
forward and the dummy sampler are done (vllm==0.10.2: v1/worker/gpu_model_runner.py:2981-3042;
vllm==0.22.0: :6104-6177; model runner V2, vllm==0.29.0: v1/worker/gpu/model_runner.py:851-882 and
v1/worker/gpu/mm/encoder_runner.py:111-150). The allocated peak is therefore the larger of the encoder
phase (images + the tower's widest layer) and the decoder phase with the encoder's outputs (and, where
the batched images are a local of profile_run, the images) still allocated."""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.core.units import figure

# vLLM's per-prompt limit of a modality the user does not name (vllm==0.22.0: config/multimodal.py:320-322)
LIMIT_DEFAULT = 999


@record
class VisionTower:
    """A vision encoder as vLLM profiles it: one dummy item of the largest feature size, repeated."""

    family: str  # what kvcalc read it as ("LLaVA-NeXT, CLIP tower")
    tokens_per_item: int  # decoder embeddings one item becomes (vLLM's max tokens per item)
    tiles_per_item: int  # images the tower sees per item (LLaVA-NeXT: grid tiles + the base image)
    patches_per_tile: int  # the tower's sequence per tile (CLIP: + the class token)
    pixels_per_tile: int  # channels x height x width of one tile
    hidden: int  # the tower's width
    inter: int  # the tower's MLP width
    text_hidden: int  # the decoder's width: the outputs kept in the encoder cache
    projector_tokens_per_tile: int = 0  # tokens through a two-layer MLP projector to the decoder width
    placeholder_tokens: int = 0  # prompt tokens of one item's placeholder, when more than its embeddings
    heads: int = 0  # Qwen3-VL's block layout (qwen3_vl_layer) where set: the tower's attention heads
    # the first release whose processor hands this tower uint8 pixels, normalized on the GPU
    # (supports_mm_device_do_normalize); () where none does
    uint8_from: tuple[int, ...] = ()


def qwen3_vl_layer(t: VisionTower, seq: int, tp: int, dt: int) -> tuple[int, str]:
    """The widest moment of a Qwen3-VL vision block over ``seq`` patches on one rank, besides the pixels
    (vllm==0.27.1: models/qwen3_vl.py:424-475 Qwen3_VisionBlock, :715-830 the tower's forward; the attention
    is models/qwen2_5_vl.py:345-456). Kept through every block: the position embeddings and the block's
    input (width each) and the rotary cos and sin (head size / 2 each). Attention, at its output projection:
    the normed input, qkv (3 x the rank's heads x head size), the q/k copy made contiguous and the rotary
    kernel's new tensor (2 x each), the varlen FlashAttention output, the projection's output and, with TP,
    the all-reduce's out-of-place result (pynccl: the 8 MiB custom all-reduce cap is far exceeded). The MLP:
    the attention's residual sum and the normed input, then fc1's output and GELU's (split by TP), or GELU's,
    fc2's and its all-reduce. The 2 x 2 merger over a quarter of the patches is narrower."""
    hd = t.hidden // t.heads
    d_t = t.heads // tp * hd
    inter_t = t.inter // tp
    reduce = t.hidden if tp > 1 else 0
    kept = 2 * t.hidden + hd
    moments = {
        "attention": 2 * t.hidden + reduce + 8 * d_t,
        "MLP fc1 + GELU": 2 * t.hidden + 2 * inter_t,
        "MLP fc2": 3 * t.hidden + inter_t + reduce,
    }
    which = max(moments, key=lambda k: moments[k])
    total = seq * (kept + moments[which]) * dt
    return total, f"tower {which} {seq} x ({kept} kept + {moments[which]}) x {dt} B = {figure(total)}"


def encoder_items(
    t: VisionTower, mnbt: int, max_num_seqs: int, max_model_len: int, limit: int, placeholder: bool = False
) -> tuple[int, int]:
    """(encoder budget in tokens, items profiled). Tokens per item: the embeddings from 0.13, the whole
    placeholder up to 0.12 (``placeholder``; RuleLine.mm_budget_placeholder). Budget: compute budget and cache size are both
    max(max_num_batched_tokens, tokens per item) (vllm==0.10.2: config/scheduler.py:218-219; vllm==0.22.0:
    v1/core/encoder_cache_manager.py compute_mm_encoder_budget), the budget their minimum. Items
    (vllm==0.22.0: multimodal/encoder_budget.py:139-176, chunked prefill on): max(1, min(budget // tokens
    per item, max_num_seqs x max(1, min(limit per prompt, max_model_len // tokens per item))))."""
    tokens = t.placeholder_tokens if placeholder and t.placeholder_tokens else t.tokens_per_item
    budget = max(mnbt, tokens)
    per_prompt = max(1, min(limit, max_model_len // tokens))
    return budget, max(1, min(budget // tokens, max_num_seqs * per_prompt))


def encoder_profile(
    t: VisionTower, items: int, tp: int, dtype_bytes: int, images_kept: bool, pixel_bytes: int = 0
) -> tuple[int, int, str]:
    """(encoder-phase peak, bytes kept under the decoder's forward, how), per GPU.

    - Images: the processor's output is cast to the model dtype (vllm==0.22.0: multimodal/processing/
      context.py:226-236; vllm==0.10.2: inputs/registry.py:165-176), tiles x channels x H x W.
    - The tower's widest moment is a layer's MLP: the residual and the normed input (the caller keeps
      both), fc1's output and the activation's, the MLP split by TP (vllm==0.22.0: models/siglip.py:433-
      518; vllm==0.10.2: models/clip.py, the same layer order): sequence x (2 x width + 2 x MLP/TP).
    - A two-layer projector (LLaVA: vllm==0.10.2 models/llava.py LlavaMultiModalProjector) holds the
      features, its first output and activation (split by TP) and its full second output.
    - Kept: the outputs, items x tokens x decoder width, in the encoder cache; and the batched images
      where they are a local of V1's profile_run (``images_kept``; model runner V2 batches them inside
      execute_mm_encoder, whose locals are gone by the decoder's pass).
    - ``pixel_bytes``: 1 where the processor hands over uint8 pixels (VisionTower.uint8_from), else the model
      dtype's. A Qwen3-VL tower (``heads`` set) takes qwen3_vl_layer's widest moment."""
    dt = dtype_bytes
    tiles = items * t.tiles_per_item
    seq = tiles * t.patches_per_tile
    images = tiles * t.pixels_per_tile * (pixel_bytes or dt)
    if t.heads:
        layer, layer_how = qwen3_vl_layer(t, seq, tp, dt)
    else:
        layer = seq * (2 * t.hidden + 2 * (t.inter // tp)) * dt
        layer_how = f"tower MLP {seq} x (2 x {t.hidden} + 2 x {t.inter // tp}) x {dt} B = {figure(layer)}"
    ptoks = tiles * t.projector_tokens_per_tile
    projector = ptoks * (t.hidden + t.text_hidden // tp + t.text_hidden) * dt
    outputs = items * t.tokens_per_item * t.text_hidden * dt
    phase = images + max(layer, projector)
    kept = outputs + (images if images_kept else 0)
    widest = (
        layer_how
        if layer >= projector
        else f"projector {ptoks} x ({t.hidden} + {t.text_hidden // tp} + {t.text_hidden}) x {dt} B = {figure(projector)}"
    )
    how = (
        f"{t.family}: {items} items x {t.tiles_per_item} tiles, images {figure(images)} + {widest}; "
        f"outputs {items} x {t.tokens_per_item} x {t.text_hidden} x {dt} B = {figure(outputs)} kept"
        + (" with the images" if images_kept else "")
    )
    return phase, kept, how
