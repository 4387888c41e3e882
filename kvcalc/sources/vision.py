"""The vision encoders kvcalc reads from a config, as vLLM profiles them (core.mm_budget).

LLaVA 1.5 and LLaVA-NeXT (CLIP tower, MLP projector) and Gemma 3 (SigLIP tower): their largest dummy
image follows from config.json alone. Qwen3.5/3.6 (Qwen3-VL's tower without deepstack): from config.json
and the image size the published checkpoints' preprocessor_config.json allows. Others (Qwen2-VL/2.5-VL,
Qwen3-VL's deepstack towers, Llama 4's tiles, Pixtral, InternVL...) are not read: None."""

from __future__ import annotations

from kvcalc.core.mm_budget import VisionTower

LLAVA_TYPES = ("llava", "llava_next")
QWEN35_TYPES = ("qwen3_5", "qwen3_5_moe")
# size.longest_edge of the Qwen3.5/3.6 checkpoints' preprocessor_config.json (Qwen/Qwen3.5-2B-Base and
# Qwen/Qwen3.6-35B-A3B-FP8 as published: {"longest_edge": 16777216, "shortest_edge": 65536}); transformers'
# class default is far smaller, so vLLM's dummy image is the checkpoint's: 4096 x 4096
QWEN35_MAX_PIXELS = 16_777_216
# Qwen3-VL's towers take uint8 pixels and normalize on the GPU from 0.32 (supports_mm_device_do_normalize:
# vllm==0.32.0 model_executor/models/qwen3_vl.py:1964, not in 0.31.0; the processor then skips rescale and
# normalize, config/multimodal.py:725-735, and vLLM casts only floating outputs, processing/context.py:366)
QWEN3_VL_UINT8_FROM = (0, 32, 0)
QWEN25_VL_TYPES = ("qwen2_5_vl",)
# max_pixels of the Qwen2.5-VL checkpoints' preprocessor_config.json (12,845,056 = 3584^2; a printed processor of
# Qwen2.5-VL-7B-Instruct, search-index file 41254378932), read by vLLM for its largest dummy image; its pixels' dtype
# by release is core.mm_budget.QWEN25_VL_LINES
QWEN25_VL_MAX_PIXELS, QWEN25_VL_MAX_FRAMES = 12_845_056, 14


def _pos(d: object, key: str) -> int | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 24 else None


def vision_tower(arch: dict) -> VisionTower | None:
    """The tower of a multimodal config, or None where kvcalc does not model it."""
    v, wrapper = arch.get("vision_config"), arch.get("wrapper")
    if arch.get("model_type") in QWEN25_VL_TYPES:  # a flat config: the text fields at the top
        return _qwen25_tower(v, _pos(arch, "hidden_size"))
    if not isinstance(wrapper, dict):
        return None
    model_type = wrapper.get("model_type")
    if model_type in QWEN35_TYPES:
        return _qwen35_tower(v, _pos(arch, "hidden_size"))
    hidden, inter = _pos(v, "hidden_size"), _pos(v, "intermediate_size")
    size, patch = _pos(v, "image_size"), _pos(v, "patch_size")
    text_hidden = _pos(arch, "hidden_size")
    if None in (hidden, inter, size, patch, text_hidden) or size % patch:  # type: ignore[operator]
        return None
    assert hidden and inter and size and patch and text_hidden  # noqa: S101 - narrowed above
    side = size // patch
    pixels = 3 * size * size
    if model_type == "gemma3":
        # one 896 x 896 crop (pan-and-scan off by default: vllm==0.22.0 models/gemma3_mm.py:104-119, :194-210),
        # mm_tokens_per_image embeddings after the 4 x 4 average pool; SigLIP has no class token
        # the prompt placeholder is "\n\n<start_of_image>" + the image tokens + "<end_of_image>\n\n" (transformers
        # Gemma3Processor.full_image_sequence), 4 tokens more with Gemma's single "\n\n" token: 0.10-0.12 budget by it
        # (two public logs: 31 items at 8192 batched tokens, 7 at 2048 = 8192 // 260, 2048 // 260)
        tokens = _pos(wrapper, "mm_tokens_per_image") or 256
        return VisionTower("Gemma 3, SigLIP tower", tokens, 1, side * side, pixels, hidden, inter, text_hidden, 0, tokens + 4)
    if model_type not in LLAVA_TYPES or wrapper.get("vision_feature_select_strategy", "default") != "default":
        return None
    base = side * side  # "default" drops CLIP's class token (vllm==0.10.2: models/llava.py _apply_feature_select_strategy)
    if model_type == "llava":
        return VisionTower("LLaVA, CLIP tower", base, 1, base + 1, pixels, hidden, inter, text_hidden, base)
    # LLaVA-NeXT: the pinpoint with the most features; at an image of exactly that size no padding is
    # removed, so grid rows x cols tiles of side x side features, a newline per feature row, and the base
    # image (vllm==0.10.2: models/llava_next.py:90-176, get_image_size_with_most_features over the pinpoints)
    best: tuple[int, int] | None = None
    pins = wrapper.get("image_grid_pinpoints")
    for pin in pins if isinstance(pins, list) else ():
        if not (isinstance(pin, list) and len(pin) == 2 and all(isinstance(x, int) and x > 0 for x in pin)):
            return None
        rows, cols = pin[0] // size, pin[1] // size
        if rows * size != pin[0] or cols * size != pin[1]:
            return None  # a pinpoint off the tile grid: the unpadding arithmetic is not modelled
        tokens = side * rows * side * cols + side * rows + base
        if best is None or tokens > best[0]:
            best = (tokens, rows * cols + 1)
    if best is None:
        return None
    return VisionTower("LLaVA-NeXT, CLIP tower", best[0], best[1], base + 1, pixels, hidden, inter, text_hidden, base)


def _qwen_geometry(v: object, text_hidden: int | None, max_pixels: int, merge_default: int | None) -> dict | None:
    """A Qwen vision tower's widths and its largest image: max pixels // (patch x merge)^2 merged tokens (vLLM's
    get_image_size_with_most_features, vllm==0.27.1: models/qwen2_vl.py:948-999), merge^2 patches each of channels x
    temporal patch x patch^2 pixels (an image is one frame pair, qwen3_vl.py:883-942). None if a field is missing."""
    if not isinstance(v, dict):
        return None
    hidden, inter, heads = _pos(v, "hidden_size"), _pos(v, "intermediate_size"), _pos(v, "num_heads")
    patch, merge = _pos(v, "patch_size"), _pos(v, "spatial_merge_size") or merge_default
    frames, channels = _pos(v, "temporal_patch_size") or 2, _pos(v, "in_chans") or _pos(v, "in_channels") or 3
    if None in (hidden, inter, heads, patch, merge, text_hidden) or hidden % heads:  # type: ignore[operator]
        return None
    assert hidden and inter and heads and patch and merge and text_hidden  # noqa: S101 - narrowed above
    tokens = max_pixels // (patch * merge) ** 2
    if not tokens:
        return None
    patches = tokens * merge * merge
    return dict(tokens_per_item=tokens, tiles_per_item=1, patches_per_tile=patches,
                pixels_per_tile=patches * channels * frames * patch * patch, hidden=hidden, inter=inter,
                text_hidden=text_hidden, heads=heads)


def _qwen35_tower(v: object, text_hidden: int | None) -> VisionTower | None:
    """Qwen3.5/3.6's Qwen3-VL tower (Qwen3_5ProcessingInfo inherits the image size, qwen3_5.py:104). Video's largest
    item (its processor's 25,165,824 pixels over 2 frames: 12,288 tokens) is smaller, so images are profiled
    (multimodal/encoder_budget.py:189-193). With deepstack layers (Qwen3-VL itself) the tower is not read."""
    if isinstance(v, dict) and v.get("deepstack_visual_indexes"):
        return None
    g = _qwen_geometry(v, text_hidden, QWEN35_MAX_PIXELS, None)
    return VisionTower("Qwen3.5, Qwen3-VL tower", layout="qwen3_vl", uint8_from=QWEN3_VL_UINT8_FROM, **g) if g else None


def _qwen25_tower(v: object, text_hidden: int | None) -> VisionTower | None:
    """Qwen2.5-VL's tower (vllm==0.23.0: models/qwen2_vl.py:965-1016); its dummy video takes up to 14 largest
    images as frames, a pair per temporal patch (core.mm_budget.video_item_tokens)."""
    g = _qwen_geometry(v, text_hidden, QWEN25_VL_MAX_PIXELS, 2)
    if g is None:
        return None
    return VisionTower("Qwen2.5-VL tower", layout="qwen2_5_vl", video_pair_tokens=g["tokens_per_item"],
                       max_frames=QWEN25_VL_MAX_FRAMES, **g)
