"""The multimodal encoder's pass in vLLM's profile run, from the settings (core.mm_budget, sources.vision)."""

from __future__ import annotations

import json

from kvcalc.app.settings import Settings
from kvcalc.core.mm_budget import (
    LIMIT_DEFAULT,
    VisionTower,
    encoder_items,
    encoder_profile,
    qwen25_vl_line,
    video_item_tokens,
)
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import replace
from kvcalc.core.towers import tower_modalities, tower_skipped
from kvcalc.core.vllm_rules import RuleLine, parse_release
from kvcalc.errors import PlanError, named
from kvcalc.sources.vision import vision_tower

MAX_LIMIT_TEXT = 4096


def image_limit(s: Settings) -> int:
    """Images per prompt from --limit-mm-per-prompt (vLLM's JSON: {"image": 2} or {"image": {"count": 2}});
    999 where it names no image limit (vllm==0.22.0: config/multimodal.py:310-324); 0 with --language-model-only."""
    return modality_limit(s, "image")


def modality_limit(s: Settings, modality: str) -> int:
    """Items of ``modality`` per prompt, as vLLM's MultiModalConfig.get_limit_per_prompt reads them: 0 with
    --language-model-only (vllm==0.19.0: config/multimodal.py:259-273), else the JSON's, else 999."""
    text = s.limit_mm_per_prompt
    if s.language_model_only:
        if parse_release(str(s.vllm_version).strip()) < (0, 17):
            raise PlanError(
                f"{named('language_model_only')}: vLLM {str(s.vllm_version).strip()} has no such flag (0.17.0 and later: "
                f"engine/arg_utils.py); give {named('limit_mm_per_prompt')} '{{\"image\": 0}}'"
            )
    if text is None:
        return 0 if s.language_model_only else LIMIT_DEFAULT
    flag = named("limit_mm_per_prompt")
    if not isinstance(text, str) or len(text) > MAX_LIMIT_TEXT:
        raise PlanError(f"{flag} takes vLLM's JSON, like '{{\"image\": 2}}'")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise PlanError(f"{flag} takes vLLM's JSON, like '{{\"image\": 2}}'; got {text[:40]!r}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{flag} takes a JSON object of per-modality limits, like '{{\"image\": 2}}'")
    value = data.get(modality, LIMIT_DEFAULT)
    if isinstance(value, dict):
        value = value.get("count", LIMIT_DEFAULT)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 20:
        raise PlanError(f"{flag}: the {modality} limit must be an integer from 0 to 2**20, got {value!r}")
    return 0 if s.language_model_only else value


def towers_off(s: Settings, model: ModelSpec) -> bool:
    """Whether vLLM builds no vision tower for ``model`` at --vllm-version: every limit of the tower's modalities
    is 0 (image; Qwen3-VL and Qwen3.5 image and video) and the release skips it then (core.towers)."""
    off = all(modality_limit(s, m) == 0 for m in tower_modalities(model.arch))
    return tower_skipped(model.arch, parse_release(str(s.vllm_version).strip()), off)


def encoder_term(
    s: Settings, model: ModelSpec, line: RuleLine, tp: int, mnbt: int, max_num_seqs: int, max_model_len: int,
    dtype_bytes: int, v2_runner: bool,
) -> tuple[int, int, str] | None:
    """(encoder-phase peak, bytes kept under the decoder's pass, how) for a vision tower kvcalc models;
    None for a text model, a tower it does not model, or images turned off (limit 0: vLLM profiles no
    encoder, vllm==0.22.0: multimodal/encoder_budget.py:72-79). Model runner V2 does not keep the batched
    images under the decoder's pass; up to 0.12 the budget counts whole placeholders."""
    limit = image_limit(s)  # checked for every model
    tower = vision_tower(model.arch)
    if tower is None:
        return None
    release = parse_release(str(s.vllm_version).strip())
    pixel_bytes = 1 if tower.uint8_from and release >= tower.uint8_from else 0  # uint8 pixels, normalized on the GPU
    if tower.video_pair_tokens:
        return _qwen25_term(s, tower, release, tp, mnbt, max_num_seqs, max_model_len, dtype_bytes, v2_runner)
    if limit == 0:
        if any(modality_limit(s, m) for m in tower_modalities(model.arch)):
            return None  # images off, video on: vLLM profiles a video item, whose pass kvcalc does not model
        return 0, 0, "images off (--limit-mm-per-prompt or --language-model-only): no encoder pass"
    budget, items = encoder_items(tower, mnbt, max_num_seqs, max_model_len, limit, line.mm_budget_placeholder)
    phase, kept, how = encoder_profile(tower, items, tp, dtype_bytes, not v2_runner, pixel_bytes)
    return phase, kept, f"encoder budget {budget} tokens, {how}"


def _qwen25_term(
    s: Settings, tower: VisionTower, release: tuple[int, ...], tp: int, mnbt: int, max_num_seqs: int,
    max_model_len: int, dtype_bytes: int, v2_runner: bool,
) -> tuple[int, int, str] | None:
    """Qwen2.5-VL: vLLM profiles the modality whose largest item has the most tokens (vllm==0.23.0:
    multimodal/encoder_budget.py:184; on a tie video from 0.19, image before: the same patches either way), the
    dummy video growing with max_model_len (core.mm_budget.video_item_tokens). None where kvcalc has not read the
    release's tower code."""
    qwen25_line = qwen25_vl_line(release)
    if not qwen25_line:
        return None
    image, video = image_limit(s), modality_limit(s, "video")
    options = [(tower.tokens_per_item, "image", image)] if image else []
    if video:
        options.append((video_item_tokens(tower, max_model_len), "video", video))
    if not options:
        return 0, 0, "images and videos off (--limit-mm-per-prompt or --language-model-only): no encoder pass"
    tokens, modality, limit = max(options)
    scale = tokens // tower.tokens_per_item  # frame pairs: each a largest image's patches
    item = replace(tower, tokens_per_item=tokens, patches_per_tile=tower.patches_per_tile * scale,
                   pixels_per_tile=tower.pixels_per_tile * scale)
    budget, items = encoder_items(item, mnbt, max_num_seqs, max_model_len, limit)
    pixels = 1 if qwen25_line["pixels"] in (1, 3) else 0  # uint8 from 0.28; else the model dtype
    phase, kept, how = encoder_profile(item, items, tp, dtype_bytes, not v2_runner, pixels, qwen25_line)
    what = f"{2 * scale if scale > 1 else 1}-frame video" if modality == "video" else "image"
    return phase, kept, f"encoder budget {budget} tokens, one {what} item of {tokens} tokens, {how}"
