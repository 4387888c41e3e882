"""Vision towers vLLM loads beside a multimodal model's decoder: their parameters on one TP rank (Llama 4's,
Gemma 3's SigLIP, LLaVA's CLIP, Qwen3-VL's), and the releases from which vLLM skips a tower whose modalities all
have a --limit-mm-per-prompt of 0 (``tower_skipped``).

Pure: stdlib only.
"""

from __future__ import annotations

from kvcalc.core.mixers import arch_int

_get = arch_int

Release = tuple[int, ...]

# From which release vLLM builds no tower when every limit of its modalities is 0 (what --language-model-only
# sets), by the wrapper's architecture: LLaVA and Llama 4 test the image limit from 0.10.1 (vllm==0.10.1.1:
# models/llava.py:538, mllama4.py:739; not in 0.10.0), Qwen3-VL both image and video from its first release,
# 0.11.0 (vllm==0.11.0: qwen3_vl.py:1129-1130); from 0.15 every wrapper marks its tower with
# SupportsMultiModal._mark_tower_model, which skips it the same way (vllm==0.15.1: models/interfaces.py:217-257;
# gemma3_mm.py:525, llava_next.py:271; Qwen3.5 from its first release, vllm==0.19.0: qwen3_5.py:597, :821),
# where Gemma 3 and LLaVA-NeXT built it whatever the limits before (vllm==0.14.0: gemma3_mm.py, llava_next.py).
# the wrappers whose tower takes images and videos (Qwen3-VL's vision transformer); the others take images only
VIDEO_TOWER_PREFIXES = ("Qwen3VL", "Qwen3_5", "Qwen2_5_VL")
QWEN3_VL_FAMILY = ("Qwen3VL", "Qwen3_5")
# multimodal RoPE's table rows per max_position_embeddings (vllm==0.27.1: layers/rotary_embedding/mrope.py:274,
# "we enlarge max_position_embeddings to 4 times" for Qwen2.5-VL's video positions; 0.11.0: :241); from 0.32
# Qwen3-VL's family passes 1 unless video pruning is on (vllm==0.32.0: models/qwen3_vl.py:1818-1825)
MROPE_FACTOR, MROPE_FACTOR_ONE_FROM = 4, (0, 32, 0)


def _wrapped_by(a: dict, prefixes: tuple[str, ...]) -> bool:
    archs = a.get("wrapper_architectures") or a.get("architectures")  # a flat config (Qwen2.5-VL) names its own
    return isinstance(archs, list) and any(str(x).startswith(prefixes) for x in archs)


def tower_modalities(a: dict) -> tuple[str, ...]:
    """The modalities whose --limit-mm-per-prompt decide whether vLLM builds this wrapper's tower."""
    return ("image", "video") if _wrapped_by(a, VIDEO_TOWER_PREFIXES) else ("image",)


TOWER_SKIPPED_FROM: tuple[tuple[str, Release], ...] = (
    ("LlavaForConditionalGeneration", (0, 10, 1)),
    ("Llama4ForConditionalGeneration", (0, 10, 1)),
    ("Qwen3VL", (0, 11, 0)),
    ("Qwen3_5", (0, 11, 0)),
    ("LlavaNextForConditionalGeneration", (0, 15, 0)),
    ("Gemma3ForConditionalGeneration", (0, 15, 0)),
    ("Qwen2_5_VL", (0, 15, 0)),
)


def tower_skipped(a: dict, release: Release, modalities_off: bool) -> bool:
    """Whether vLLM ``release`` builds no vision tower for this wrapper because every limit of its modalities
    is 0 (``modalities_off``)."""
    if not modalities_off:
        return False
    r = tuple(release) + (0,) * (4 - len(release))
    for prefix, first in TOWER_SKIPPED_FROM:
        if _wrapped_by(a, (prefix,)):
            return r >= first + (0,) * (4 - len(first))
    return False


def _vit_layer_params(h: int, heads: int, inter: int, tp: int) -> int:
    """One vision-encoder layer on one TP rank, as Llama 4's (vllm==0.19.0: mllama4.py:117-145,
    :279-293, :334-362) and CLIP's (vllm==0.10.2: clip.py:90-200) are built: qkv (heads split, with
    biases) and o (input split, bias whole), fc1 (output split, with bias) and fc2 (input split, bias
    whole), two LayerNorms (weight and bias each)."""
    local = max(heads // tp, 1) * (h // heads)  # this rank's heads x head_dim
    it = inter // tp
    return h * 3 * local + 3 * local + local * h + h + 2 * h * it + it + h + 4 * h


def llama4_vision_params(v: dict, text_hidden: int, tp: int) -> int:
    """Parameters of Llama 4's vision tower and projector on one TP rank (vllm==0.19.0:
    model_executor/models/mllama4.py). mm_encoder_tp_mode defaults to "weights" (config/multimodal.py:144),
    so the linear layers are TP-sharded: ColumnParallel splits the output and its bias, RowParallel the
    input (its bias whole), QKVParallelLinear the heads (mllama4.py:279-293). Per encoder layer
    (:334-362): qkv and o with biases, fc1 (hidden -> intermediate) and fc2 with biases (:117-145),
    two LayerNorms. Then the unfold patch linear (channels x patch^2 -> hidden, no bias, :425-446),
    class embedding, positional embedding ((image/patch)^2 + 1 rows), two LayerNorms (:477-490), the
    pixel-shuffle MLP intermediate -> projector_input -> projector_output (:205-230), and the projector
    vision_output_dim -> text hidden, no bias (:158-173). Its vision RoPE table (complex64, ~0.2 MB) is not counted."""
    h, heads = _get(v, "hidden_size"), max(_get(v, "num_attention_heads", default=1), 1)
    inter, patch = _get(v, "intermediate_size"), _get(v, "patch_size", default=14)
    layer = _vit_layer_params(h, heads, inter, tp)
    positions = (_get(v, "image_size", default=336) // max(patch, 1)) ** 2 + 1
    p_in, p_out = _get(v, "projector_input_dim"), _get(v, "projector_output_dim")
    bias = bool(v.get("multi_modal_projector_bias"))
    adapter = inter * (p_in // tp) + (p_in // tp) * p_out + ((p_in // tp) + p_out if bias else 0)
    model = _get(v, "num_channels", default=3) * patch * patch * (h // tp) + h + positions * h + 4 * h
    projector = _get(v, "vision_output_dim") * (text_hidden // tp)
    return _get(v, "num_hidden_layers") * layer + model + adapter + projector


LLAVA_ARCHS = ("LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration")


def _llava_tower_layers(a: dict, total: int) -> int:
    """CLIP layers vLLM builds: up to the deepest vision_feature_layer (transformers' default -2), a
    negative index counting from the end plus one (vllm==0.10.2: model_executor/models/llava.py:417-448,
    passed as num_hidden_layers_override at :461-468; clip.py:234-242). -1 where vLLM would refuse it
    (more layers than the tower has: clip.py:292-296) or the field is not an int or a list of ints."""
    feature = a.get("vision_feature_layer", -2)
    picks = feature if isinstance(feature, list) and feature else [feature]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in picks):
        return -1
    n = max(total + i + 1 if i < 0 else i for i in picks)
    return n if 0 <= n <= total else -1


def llava_clip_params(a: dict, text_hidden: int, tp: int) -> int:
    """Parameters on one TP rank of a LLaVA / LLaVA-NeXT CLIP vision tower, projector and image_newline
    (vllm==0.10.2). Only a CLIP tower (vision_config model_type clip_vision_model, the CLIPVisionConfig
    branch of llava.py:463-469); SigLIP and Pixtral towers were not read: 0.
    Per CLIP layer (clip.py:90-200): qkv (QKVParallelLinear, bias by default: layers/linear.py:815, :849)
    and out_proj (RowParallelLinear, bias whole: linear.py:1161, :1198), fc1/fc2 with biases (clip.py:
    157-165), two LayerNorms. Embeddings (clip.py:58-71): class embedding, patch Conv2d without bias
    (channels x patch^2 x hidden), (image/patch)^2 + 1 positions; pre_layrnorm (:282); no post_layernorm
    (require_post_norm=False: llava.py:542, llava_next.py:257; clip.py:298-306). Projector (llava.py:96-117):
    linear_1 vision -> text hidden (ColumnParallel), linear_2 text -> text (RowParallel), biases when
    multimodal_projector_bias (transformers 5.24 LlavaConfig/LlavaNextConfig default True); LLaVA-NeXT's
    projector takes hidden x len(feature layers) (llava_next.py:235-245) and adds image_newline, one text
    hidden vector (:259-260). LLaVA builds the tower only with an image limit above 0 (llava.py:538-552);
    kvcalc has no such setting and counts it."""
    v = a.get("vision_config")
    archs = a.get("wrapper_architectures")
    arch = next((x for x in archs if x in LLAVA_ARCHS), "") if isinstance(archs, list) else ""
    if not arch or not isinstance(v, dict) or v.get("model_type") != "clip_vision_model":
        return 0
    h, inter = _get(v, "hidden_size", default=768), _get(v, "intermediate_size", default=3072)
    heads, patch = max(_get(v, "num_attention_heads", default=12), 1), max(_get(v, "patch_size", default=32), 1)
    layers = _llava_tower_layers(a, _get(v, "num_hidden_layers", default=12))
    if layers < 0:
        return 0
    layer = _vit_layer_params(h, heads, inter, tp)
    positions = (_get(v, "image_size", default=224) // patch) ** 2 + 1
    embeddings = h + _get(v, "num_channels", default=3) * patch * patch * h + positions * h + 2 * h
    feature = a.get("vision_feature_layer", -2)
    vision_out = h * len(feature) if arch == LLAVA_ARCHS[1] and isinstance(feature, list) else h
    th = text_hidden // tp
    bias = a.get("multimodal_projector_bias", True) is not False
    projector = vision_out * th + th * text_hidden + ((th + text_hidden) if bias else 0)
    newline = text_hidden if arch == LLAVA_ARCHS[1] else 0
    return layers * layer + embeddings + projector + newline


def gemma3_siglip_params(a: dict, text_hidden: int, tp: int) -> int:
    """Parameters on one TP rank of Gemma 3's SigLIP tower and projector (vllm==0.22.0: models/gemma3_mm.py:
    515-521). SigLIP (models/siglip.py): every layer built, each as _vit_layer_params (qkv_proj and out_proj,
    fc1/fc2 with biases, TP-sharded: disable_tp only in the encoder's data-parallel mode, :388-404; two
    LayerNorms); the patch Conv2d with bias and one position embedding per patch (:284-307); post_layernorm,
    kept when every layer is built (:717-724); no head (vision_use_head false). Projector (gemma3_mm.py:
    420-441): mm_input_projection_weight vision x text hidden, whole, and a Gemma RMSNorm over the vision
    width."""
    v, wrapper = a.get("vision_config"), a.get("wrapper")
    if not isinstance(v, dict) or not isinstance(wrapper, dict) or wrapper.get("model_type") != "gemma3":
        return 0
    h, inter = _get(v, "hidden_size", default=1152), _get(v, "intermediate_size", default=4304)
    heads, patch = max(_get(v, "num_attention_heads", default=16), 1), max(_get(v, "patch_size", default=14), 1)
    layers = _get(v, "num_hidden_layers", default=27)
    side = _get(v, "image_size", default=896) // patch
    embeddings = _get(v, "num_channels", default=3) * patch * patch * h + h + side * side * h
    return layers * _vit_layer_params(h, heads, inter, tp) + embeddings + 2 * h + h * text_hidden + h


def qwen3_vl_tower_params(a: dict, tp: int) -> int:
    """Qwen3-VL's vision transformer on one TP rank, as Qwen3.5/3.6 and Qwen3-VL build it (vllm==0.27.1:
    models/qwen3_vl.py:530-640; qwen3_5.py:479-485, skipped only when every image/video limit is 0): the patch
    Conv3d with bias (:358-386) and the learned position table (nn.Embedding, whole); each of `depth` blocks as
    _vit_layer_params (QKV and proj with biases, qwen2_5_vl.py:370-386; fc1/fc2 with biases; two LayerNorms);
    the merger (:478-520): a LayerNorm over the vision width, fc1 (width x merge^2, output split) and fc2 (input
    split, out_hidden_size), and one more such merger per deepstack index. 0 without a full vision_config."""
    v = a.get("vision_config")
    if not isinstance(v, dict) or not _wrapped_by(a, VIDEO_TOWER_PREFIXES):
        return 0
    keys = ("hidden_size", "intermediate_size", "num_heads", "depth", "patch_size", "out_hidden_size", "num_position_embeddings")
    if not all(isinstance(v.get(k), int) and not isinstance(v[k], bool) and v[k] > 0 for k in keys):
        return 0
    h, out = _get(v, "hidden_size"), _get(v, "out_hidden_size")
    hm = h * _get(v, "spatial_merge_size", default=2) ** 2
    merger = hm * (hm // tp) + hm // tp + (hm // tp) * out + out
    deep = v.get("deepstack_visual_indexes")
    deep_n = len(deep) if isinstance(deep, list) else 0
    patch = _get(v, "in_channels", default=3) * _get(v, "temporal_patch_size", default=2) * _get(v, "patch_size") ** 2 * h + h
    embeddings = patch + _get(v, "num_position_embeddings") * h
    layers = _get(v, "depth") * _vit_layer_params(h, _get(v, "num_heads"), _get(v, "intermediate_size"), tp)
    return layers + embeddings + 2 * h + merger + deep_n * (2 * hm + merger)


def qwen25_vl_tower_params(a: dict, tp: int) -> int:
    """Qwen2.5-VL's vision transformer on one TP rank (vllm==0.23.0: models/qwen2_5_vl.py:309-345 the MLP,
    :347-390 the attention, :472-530 the block, :534-560 the patch embed, :570-613 the merger, :616-700 the
    tower): the patch Conv3d without bias; each of `depth` blocks: two RMSNorms (weight only), qkv (heads split,
    with biases), proj (input split, bias whole), the merged gate/up projection (output split, with biases) and
    down (input split, bias whole); the merger: an RMSNorm over the vision width, fc1 (width x merge^2, output
    split, with bias) and fc2 (input split, out_hidden_size, with bias). Rotary position embedding, no learned
    table. 0 without a full vision_config."""
    v = a.get("vision_config")
    if not isinstance(v, dict) or not _wrapped_by(a, ("Qwen2_5_VL",)):
        return 0
    keys = ("hidden_size", "intermediate_size", "num_heads", "depth", "patch_size", "out_hidden_size")
    if not all(isinstance(v.get(k), int) and not isinstance(v[k], bool) and v[k] > 0 for k in keys):
        return 0
    h, heads, inter, out = _get(v, "hidden_size"), _get(v, "num_heads"), _get(v, "intermediate_size"), _get(v, "out_hidden_size")
    local, it = max(heads // tp, 1) * (h // heads), inter // tp
    block = 2 * h + h * 3 * local + 3 * local + local * h + h + h * 2 * it + 2 * it + it * h + h
    channels = _get(v, "in_chans", default=0) or _get(v, "in_channels", default=3)
    patch = channels * _get(v, "temporal_patch_size", default=2) * _get(v, "patch_size") ** 2 * h
    hm = h * _get(v, "spatial_merge_size", default=2) ** 2
    merger = h + hm * (hm // tp) + hm // tp + (hm // tp) * out + out
    return _get(v, "depth") * block + patch + merger


def mrope_rows_factor(a: dict, release: Release) -> int:
    """Rows of a multimodal-RoPE table per position for this wrapper at ``release`` (MROPE_FACTOR above)."""
    one = _wrapped_by(a, QWEN3_VL_FAMILY) and tuple(release) >= MROPE_FACTOR_ONE_FROM
    return 1 if one else MROPE_FACTOR
