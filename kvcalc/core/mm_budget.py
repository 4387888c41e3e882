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
    heads: int = 0  # the tower's attention heads (the Qwen towers' layouts below)
    layout: str = ""  # "qwen3_vl" (qwen3_vl_layer), "qwen2_5_vl" (qwen25_vl_layer); "": CLIP/SigLIP's MLP
    video_pair_tokens: int = 0  # Qwen2.5-VL: the tokens of one pair of largest frames (its video item grows with them)
    max_frames: int = 0  # Qwen2.5-VL: the dummy video's frame cap
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


# Qwen2.5-VL's tower code, by release (first, last, how it runs): "rotary" fp32 (0.11: the rotary over an fp32
# copy, vllm==0.11.0: models/qwen2_vl.py:275-284; 0.11.0 also gathers the whole qkv on every TP rank and copies q,
# k and v, 36 B per local width at the rotary, 0.11.1 works on views, 26 B) or bf16 (0.12+: get_rope's tables
# cached on the GPU by get_rope_by_thw, which outlive the pass); "silu" native (0.11-0.14: gate/up, the SiLU and the
# product alive) or compiled (0.15+); "qk_copy": the contiguous q/k before the rotary (0.15+); "pixels": bytes a
# pixel value takes (the model dtype's up to 0.27; uint8 from 0.28, whose bf16 normalized copy lives through the
# tower in 0.28-0.29, 1 + 2 B, and only through the patch embed from 0.30). vllm==0.28.0: qwen2_5_vl.py:1259
# supports_mm_device_do_normalize. Releases not read (up to 0.10): not modelled.
QWEN25_VL_LINES: tuple[tuple[tuple[int, int, int], tuple[int, int, int], dict], ...] = (
    ((0, 30, 0), (99, 99, 99), dict(rotary="bf16", silu="compiled", qk_copy=True, pixels=1)),
    ((0, 28, 0), (0, 29, 99), dict(rotary="bf16", silu="compiled", qk_copy=True, pixels=3)),
    ((0, 15, 0), (0, 27, 99), dict(rotary="bf16", silu="compiled", qk_copy=True, pixels=0)),
    ((0, 12, 0), (0, 14, 99), dict(rotary="bf16", silu="native", qk_copy=False, pixels=0)),
    ((0, 11, 1), (0, 11, 99), dict(rotary="fp32", silu="native", attention=26, gather=False, pixels=0)),
    ((0, 11, 0), (0, 11, 0), dict(rotary="fp32", silu="native", attention=36, gather=True, pixels=0)),
)


def qwen25_vl_line(release: tuple[int, ...]) -> dict:
    """How ``release`` runs Qwen2.5-VL's tower (QWEN25_VL_LINES); {} where kvcalc has not read it."""
    r = (tuple(release) + (0, 0, 0))[:3]
    return next((dict(how) for first, last, how in QWEN25_VL_LINES if first <= r <= last), {})


def video_item_tokens(t: VisionTower, max_model_len: int) -> int:
    """Tokens of Qwen2.5-VL's dummy video: the most frames of the largest image whose tokens fit in max_model_len,
    at most max_frames, at least 1, two frames per temporal patch (vllm==0.23.0: models/qwen2_vl.py:1029-1065)."""
    pairs = max_model_len // t.video_pair_tokens
    frames = max(min(2 * pairs, t.max_frames), 1)
    return -(-frames // 2) * t.video_pair_tokens


def qwen25_vl_layer(t: VisionTower, seq: int, tp: int, dt: int, line: dict) -> tuple[int, int, str]:
    """(widest moment besides the pixels, bytes kept under the decoder's pass, how) of Qwen2.5-VL's blocks over
    ``seq`` patches on one rank (vllm==0.23.0: models/qwen2_5_vl.py:400-457 the attention, :309-345 the MLP, :472-530
    the block, :1039-1116 the forward). Kept through every block: the window index and its reverse (int64 per merged
    token), the block's input and the rotary rows (head size / 2 wide: fp32, or a bf16 cos and sin cached plus a
    copy). The MLP at down_proj: the attention's output, the fused norm's output and new residual, gate/up, the
    activation, down's output and its all-reduce; with the native SiLU-and-mul also the SiLU's temporary. The
    attention, bf16 rotary: the normed input, qkv, the q/k copy and the rotated q/k, FlashAttention's output, the
    projection and its all-reduce; fp32 rotary: the normed input, cos and sin in fp32, and line['attention'] B per
    local width (qkv, copies, the fp32 copy and output, the bf16 result); 0.11.0 at TP > 1 also gathers the whole qkv
    (one buffer per rank and their concatenation)."""
    hd = t.hidden // t.heads
    r, d, d_t, i_t = hd // 2, t.hidden, t.heads // tp * hd, t.inter // tp
    reduce = d * dt if tp > 1 else 0
    norm_copy = dt * (t.pixels_per_tile // t.patches_per_tile) if line["pixels"] == 3 else 0  # 0.28-0.29's bf16 copy
    bf16 = line["rotary"] == "bf16"
    kept = (4 * r * dt if bf16 else 4 * r) + 4 + d * dt + norm_copy
    moments = {"MLP down_proj": kept + 4 * d * dt + 3 * i_t * dt + reduce}
    if line["silu"] == "native":
        moments["MLP SiLU-and-mul"] = kept + 3 * d * dt + 4 * i_t * dt
    if bf16:
        moments["attention"] = kept + 2 * d * dt + (8 if line["qk_copy"] else 6) * d_t * dt + reduce
    else:
        moments["attention's fp32 rotary"] = kept + d * dt + 2 * r * 4 + line["attention"] * d_t
        if line["gather"] and tp > 1:
            moments["attention's qkv all-gather"] = kept + d * dt + 3 * d_t * dt + 2 * 3 * d * dt
    which = max(moments, key=lambda k: moments[k])
    total = seq * moments[which]
    return total, seq * 2 * r * dt if bf16 else 0, f"tower {which} {seq} x {moments[which]} B = {figure(total)}"


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
    t: VisionTower, items: int, tp: int, dtype_bytes: int, images_kept: bool, pixel_bytes: int = 0,
    qwen25_line: dict | None = None,
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
      dtype's. A Qwen3-VL tower takes qwen3_vl_layer's widest moment, a Qwen2.5-VL tower qwen25_vl_layer's at
      ``qwen25_line`` (qwen25_vl_line)."""
    dt = dtype_bytes
    tiles = items * t.tiles_per_item
    seq = tiles * t.patches_per_tile
    images = tiles * t.pixels_per_tile * (pixel_bytes or dt)
    after = 0
    if t.layout == "qwen3_vl":
        layer, layer_how = qwen3_vl_layer(t, seq, tp, dt)
    elif t.layout == "qwen2_5_vl":
        layer, after, layer_how = qwen25_vl_layer(t, seq, tp, dt, qwen25_line or {})
    else:
        layer = seq * (2 * t.hidden + 2 * (t.inter // tp)) * dt
        layer_how = f"tower MLP {seq} x (2 x {t.hidden} + 2 x {t.inter // tp}) x {dt} B = {figure(layer)}"
    ptoks = tiles * t.projector_tokens_per_tile
    projector = ptoks * (t.hidden + t.text_hidden // tp + t.text_hidden) * dt
    outputs = items * t.tokens_per_item * t.text_hidden * dt
    phase = images + max(layer, projector)
    kept = outputs + (images if images_kept else 0) + after
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
