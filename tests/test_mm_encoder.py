"""The multimodal encoder's pass in vLLM's profile run (docs/vllm-budget.md 2.3.5): items from the encoder
budget, the tower's widest layer, what stays allocated under the decoder's pass. Figures by hand below."""

from __future__ import annotations

import json
from pathlib import Path

from kvcalc.core.mm_budget import encoder_items, encoder_profile
from kvcalc.sources.resolve import resolve
from kvcalc.sources.vision import vision_tower

GIB = 1 << 30
LLAVA = str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "llava-v1.6-mistral-7b-hf.json")

# Gemma-3-4b-it's shape (vision: SigLIP 1152 wide, MLP 4304, 896 px, 14 px patches; text 2560 wide)
GEMMA3 = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
    "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
        "max_position_embeddings": 131072, "sliding_window": 1024, "query_pre_attn_scalar": 256,
    },
    "vision_config": {
        "model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304, "image_size": 896,
        "patch_size": 14, "num_attention_heads": 16, "num_hidden_layers": 27,
    },
    "torch_dtype": "bfloat16",
}


def test_llava_next_items_match_the_log():
    # gh-llava-v1.6-mistral-7b-h100-0.10.2.log: "Encoder cache will be initialized with a budget of 16384 tokens,
    # and profiled with 5 image items of the maximum feature size." (max_num_batched_tokens 16384, 256 seqs, 4096 len)
    tower = vision_tower(resolve(LLAVA).spec.arch)
    assert tower is not None
    # the 672 x 672 pinpoint: 2 x 2 tiles of 24 x 24 features = 48 x 48, 48 newlines, 24 x 24 base features
    assert tower.tokens_per_item == 48 * 48 + 48 + 576 == 2928
    assert tower.tiles_per_item == 5 and tower.patches_per_tile == 577
    assert encoder_items(tower, 16384, 256, 4096, 999) == (16384, 5)  # 16384 // 2928 = 5
    phase, kept, _ = encoder_profile(tower, 5, 1, 2, images_kept=True)
    images = 25 * 3 * 336 * 336 * 2  # 25 tiles in fp16
    outputs = 5 * 2928 * 4096 * 2
    assert kept == images + outputs == 16_934_400 + 119_930_880
    assert phase == images + 25 * 577 * (2 * 1024 + 2 * 4096) * 2  # CLIP's MLP outgrows the projector
    # model runner V2 batches the images inside execute_mm_encoder: only the outputs stay
    assert encoder_profile(tower, 5, 1, 2, images_kept=False)[1] == outputs


def test_llava_next_peak_in_the_budget(run_json):
    base = (LLAVA, "--gpu", "H100-80GB", "--vllm-version", "0.10.2", "--max-model-len", "4096",
            "--max-num-batched-tokens", "16384", "--tokens", "1000")
    with_images = run_json("size", *base)["pool"]["activation_bytes"]
    without = run_json("size", *base, "--limit-mm-per-prompt", '{"image": 0}')["pool"]["activation_bytes"]
    assert with_images - without == 16_934_400 + 119_930_880  # the decoder's pass is the peak; these stay


def test_gemma3_encoder_phase(tmp_path, run_json):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3))
    tower = vision_tower(resolve(str(path)).spec.arch)
    assert tower is not None and tower.tokens_per_item == 256 and tower.patches_per_tile == 64 * 64
    # A100-80GB on 0.19: 2048 batched tokens -> 2048 // 256 = 8 images of one 896 x 896 crop
    assert encoder_items(tower, 2048, 256, 32768, 999) == (2048, 8)
    assert encoder_items(tower, 2048, 256, 32768, 3) == (2048, 8)  # 256 seqs x 3 per prompt still allow 8
    assert encoder_items(tower, 2048, 2, 32768, 1) == (2048, 2)  # 2 seqs x 1 image
    phase, kept, _ = encoder_profile(tower, 8, 1, 2, images_kept=True)
    images = 8 * 3 * 896 * 896 * 2
    assert phase == images + 8 * 4096 * (2 * 1152 + 2 * 4304) * 2
    assert kept == images + 8 * 256 * 2560 * 2
    # TP 2 splits the MLP only
    assert encoder_profile(tower, 8, 2, 2, True)[0] == images + 8 * 4096 * (2 * 1152 + 2 * 2152) * 2


def test_limit_flag_is_checked(run, tmp_path):
    for bad in ("{", "[1]", '{"image": -1}', '{"image": "x"}', "[" * 2000 + "]" * 2000, "x" * 5000):
        code, _, err = run("size", LLAVA, "--gpu", "H100-80GB", "--tokens", "10", "--limit-mm-per-prompt", bad)
        assert code == 2 and "--limit-mm-per-prompt" in err and "Traceback" not in err, bad


def test_text_models_and_unread_towers_have_no_encoder_term(tmp_path):
    assert vision_tower(resolve("llama-3.1-8b").spec.arch) is None
    qwen_vl = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584,
        "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "max_position_embeddings": 128000, "torch_dtype": "bfloat16",
        "vision_config": {"hidden_size": 1280, "intermediate_size": 3420, "patch_size": 14, "depth": 32},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(qwen_vl))
    arch = resolve(str(path)).spec.arch
    assert "vision_config" in arch and vision_tower(arch) is None  # max_pixels is the preprocessor's: not modelled


def test_gemma3_siglip_weights(tmp_path):
    from kvcalc.core.towers import gemma3_siglip_params

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3))
    arch = resolve(str(path)).spec.arch
    # one SigLIP layer: qkv 1152 x 3456 + bias, out 1152 x 1152 + bias, fc1/fc2 1152 x 4304 + biases, 2 LayerNorms
    layer = 1152 * 3456 + 3456 + 1152 * 1152 + 1152 + 2 * 1152 * 4304 + 4304 + 1152 + 4 * 1152
    embeddings = 3 * 14 * 14 * 1152 + 1152 + 64 * 64 * 1152  # patch conv with bias, 4096 positions
    projector = 1152 * 2560 + 1152  # mm_input_projection_weight + the soft-embedding RMSNorm
    assert gemma3_siglip_params(arch, 2560, 1) == 27 * layer + embeddings + 2 * 1152 + projector == 419_816_304
    # TP 2 halves qkv, out's input, fc1's output and fc2's input (biases of the column-split layers too)
    half = 1152 * 1728 + 1728 + 576 * 1152 + 1152 + 2 * 1152 * 2152 + 2152 + 1152 + 4 * 1152
    assert gemma3_siglip_params(arch, 2560, 2) == 27 * half + embeddings + 2 * 1152 + projector


def test_gemma3_items_count_the_placeholder_up_to_0_12(tmp_path):
    # Two public Gemma 3 logs on 0.11: "budget of 8192 tokens, and profiled with 31 image items" (gemma-3-27b-it,
    # find_string id 9297248278) and "budget of 2048 tokens ... 7 image items" (medgemma-4b-it, id 61758073700).
    # 0.10-0.12 count the whole placeholder, "\n\n<start_of_image>" + 256 image tokens + "<end_of_image>\n\n"
    # = 260 tokens: 8192 // 260 = 31, 2048 // 260 = 7. From 0.13 the 256 embeddings: 32 and 8.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3))
    tower = vision_tower(resolve(str(path)).spec.arch)
    assert tower is not None
    assert encoder_items(tower, 8192, 1024, 4096, 2, placeholder=True) == (8192, 31)
    assert encoder_items(tower, 2048, 8, 4096, 999, placeholder=True) == (2048, 7)
    assert encoder_items(tower, 8192, 1024, 4096, 2) == (8192, 32)
    assert encoder_items(tower, 2048, 8, 4096, 999) == (2048, 8)


def test_the_release_picks_the_count(tmp_path, run_json):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3))
    base = (str(path), "--gpu", "A100-80GB", "--max-model-len", "4096", "--max-num-batched-tokens", "2048",
            "--max-num-seqs", "8", "--tokens", "100")
    for release, items in (("0.11.0", 7), ("0.12.0", 7), ("0.13.0", 8), ("0.19.0", 8)):
        text = json.dumps(run_json("size", *base, "--vllm-version", release))
        assert f"SigLIP tower: {items} items" in text, release


QWEN35 = str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen3.5-27b.json")
SOUSPILOT = Path(__file__).parent / "data" / "vllm-budget" / "souspilot-qwen3.6-27b-a100x2-tp2-0.27.1.log"


def test_qwen35_tower_items_match_the_log():
    """Qwen3.5/3.6's largest dummy image: the checkpoints' preprocessor_config.json allows 16,777,216 pixels, so
    16,777,216 // (16 x 2)^2 = 16,384 merged tokens, 4 patches each; the souspilot 0.27.1 start of Qwen3.6-27B (the
    Qwen3.5-27B shapes) prints that budget and one item."""
    tower = vision_tower(resolve(QWEN35).spec.arch)
    assert tower is not None
    assert tower.tokens_per_item == 16_777_216 // 32**2 == 16_384 and tower.patches_per_tile == 65_536
    assert tower.pixels_per_tile == 65_536 * 3 * 2 * 16 * 16
    assert encoder_items(tower, 2048, 256, 65536, 999) == (16384, 1)
    assert "budget of 16384 tokens, and profiled with 1 image items" in SOUSPILOT.read_text()


def test_qwen35_tower_peak_by_hand():
    """A Qwen3-VL block's widest moment (1152 wide, 16 heads of 72, MLP 4304), bf16, per patch. Kept through every
    block: pixels 3 x 2 x 16 x 16 = 1536 values, position embeddings 1152, the block input 1152, cos + sin 2 x 36.
    At the attention's output projection: norm 1152, qkv 3 x 1152 / TP, the contiguous q/k and the rotated q/k
    2 x 1152 / TP each, FlashAttention's output 1152 / TP, the projection's 1152 and, at TP 2, its all-reduce 1152.
    TP 1: (1536 + 1152 + 1152 + 72 + 1152 + 8 x 1152 + 1152) x 2 B = 30,864 B; TP 2: the split parts halve and the
    all-reduce adds 1152: 23,952 B. From 0.32 the pixels arrive as uint8 (1 B each, GPU-side normalization)."""
    tower = vision_tower(resolve(QWEN35).spec.arch)
    assert tower is not None
    assert encoder_profile(tower, 1, 1, 2, images_kept=True)[0] == 65_536 * 30_864 == 2_022_703_104
    phase, kept, how = encoder_profile(tower, 1, 2, 2, images_kept=True)
    assert phase == 65_536 * 23_952 == 1_569_718_272 and "attention" in how
    assert kept == 65_536 * 1536 * 2 + 16_384 * 5120 * 2 == 369_098_752  # pixels (a local of V1's profile_run) + outputs
    assert encoder_profile(tower, 1, 2, 2, images_kept=False, pixel_bytes=1)[:2] == (65_536 * (23_952 - 1536), 16_384 * 5120 * 2)


def test_qwen35_pixels_are_uint8_from_0_32(run_json):
    """vLLM 0.32 gives Qwen3-VL's towers GPU-side normalization (qwen3_vl.py:1964, not in 0.31.0): the processor hands
    over uint8 pixels, 1 B per value instead of 2. Under model runner V2 (0.29+) the encoder's pass is the peak."""
    base = (QWEN35, "--gpu", "A100-80GB", "--tp", "2", "--max-model-len", "65536", "--tokens", "1")
    act = {v: run_json("size", *base, "--vllm-version", v)["pool"]["activation_bytes"] for v in ("0.31.0", "0.32.0")}
    assert act == {"0.31.0": 65_536 * 23_952, "0.32.0": 65_536 * (23_952 - 1536)}


def test_qwen35_encoder_in_the_budget_against_a_log(run_json):
    """souspilot's vLLM 0.27.1 start of Qwen3.6-27B, TP 2 on 2 x A100-80GB, max_model_len 65536 (the log's non-default
    args): 'Model loading took 25.69 GiB', 'Estimated CUDA graph memory: 0.96 GiB', 'Available KV cache memory:
    44.73 GiB'. With those two logged terms, kvcalc's profile peak (the encoder's pass) and non-torch estimate leave
    within 0.1 GiB of the log; without the encoder's pass, 0.5 GiB too much."""
    base = (QWEN35, "--gpu", "A100-80GB", "--tp", "2", "--max-model-len", "65536", "--vllm-version", "0.27.1", "--tokens", "1")
    pool = run_json("size", *base)["pool"]
    off = run_json("size", *base, "--limit-mm-per-prompt", '{"image": 0, "video": 0}')["pool"]
    assert pool["activation_bytes"] == 1_569_718_272  # the encoder's pass outgrows the sampler's 0.85 GiB + 0.34 kept
    requested = pool["requested_bytes"] / GIB

    def error(p: dict) -> float:
        return requested - 25.69 - 0.96 - (p["activation_bytes"] + p["overhead_bytes"]) / GIB - 44.73

    assert abs(error(pool)) < 0.1 and error(off) > 0.45, (error(pool), error(off))
    video_only = run_json("size", *base, "--limit-mm-per-prompt", '{"image": 0}')
    assert any("encoder profile run is not modelled" in n for n in video_only["notes"])


def test_malformed_tower_fields_are_data_not_crashes(tmp_path, run):
    """Found by a fuzz sweep: a boolean num_heads in a Qwen3.5 vision_config (bool is an int to Python) and an
    image_grid_pinpoints that is not a list had raised inside kvcalc; the tower is now left unread, with a note."""
    qwen = json.loads(Path(QWEN35).read_text())
    qwen["vision_config"]["num_heads"] = True
    llava = json.loads(Path(LLAVA).read_text())
    llava["image_grid_pinpoints"] = 3
    for name, cfg in (("qwen.json", qwen), ("llava.json", llava)):
        path = tmp_path / name
        path.write_text(json.dumps(cfg))
        code, out, err = run("size", str(path), "--gpu", "A100-80GB", "--tokens", "10")
        assert code == 0 and "Traceback" not in err and "internal error" not in err, err


QWEN25VL_3B = str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen2.5-vl-3b-instruct.json")
QWEN25VL_7B = str(Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen2.5-vl-7b-instruct.reconstructed.json")


def test_qwen25_vl_tower_and_mrope_table_in_the_weights(run_json):
    """Qwen2.5-VL's vision tower (width 1280, 16 heads, MLP 3420 gated, depth 32, patch 14, merge 2), by hand at TP 1:
    block 2 x 1280 (RMSNorms) + qkv 1280 x 3840 + 3840 + proj 1280^2 + 1280 + gate/up 1280 x 6840 + 6840 + down
    3420 x 1280 + 1280 = 19,702,200, x 32 = 630,470,400; patch 3 x 2 x 14^2 x 1280 = 1,505,280; merger 1280 +
    5120^2 + 5120 + 5120 x out + out (3B: out 2048; 7B: 3584). Its multimodal RoPE table: 4 x 128,000 positions x 128
    x 2 B (vLLM enlarges mrope's table 4 times for video positions). With both, the weights come within 0.01 GiB of
    three public starts: the 3B on an L4 (0.11.0, 'Model loading took 7.1550 GiB'; 0.15.0, '7.16 GiB') and the 7B on
    an L4 (a Red Hat 0.9.0.1 build, '15.6271 GiB')."""
    from kvcalc.core.towers import qwen25_vl_tower_params

    blocks, patch = 32 * 19_702_200, 3 * 2 * 14 * 14 * 1280
    for config, out in ((QWEN25VL_3B, 2048), (QWEN25VL_7B, 3584)):
        merger = 1280 + 5120 * 5120 + 5120 + 5120 * out + out
        assert qwen25_vl_tower_params(resolve(config).spec.arch, 1) == blocks + patch + merger
    data = Path(__file__).parent / "data" / "vllm-budget"
    for config, version, log, logged in (
        (QWEN25VL_3B, "0.11.0", "qwen25vl-raydocs-3b-l4-8k-0.11.0.log", "7.1550"),
        (QWEN25VL_3B, "0.15.0", "qwen25vl-anyscale-3b-l4-4k-0.15.0.log", "7.16"),
        (QWEN25VL_7B, "0.9.2", "qwen25vl-tsailiming-7b-l4-2k-0.9.0.1.log", "15.6271"),
    ):
        assert f"Model loading took {logged} GiB" in (data / log).read_text()
        pool = run_json("size", config, "--gpu", "L4", "--vllm-version", version, "--max-model-len", "2048", "--tokens", "1")["pool"]
        assert abs(pool["weights_bytes_per_rank"] / GIB - float(logged)) < 0.01, (log, pool["weights_bytes_per_rank"] / GIB)
    table = 4 * 128_000 * 128 * 2
    budget = run_json("size", QWEN25VL_3B, "--gpu", "L4", "--vllm-version", "0.11.0", "--tokens", "1")["pool"]["budget"][0]
    assert f"{table:,} B" in next(t["source"] for t in budget if t["term"].startswith("- weights"))


def test_qwen35_mrope_table_shrinks_from_0_32(run_json):
    """Qwen3.5/3.6's full-attention layers take multimodal RoPE (an mrope_section; 256-wide heads, partial rotary
    factor 0.25: 64 rotary dims). vLLM enlarges the table 4 times for video positions; from 0.32 Qwen3-VL's family
    passes a factor of 1 unless video pruning is on (vllm==0.32.0: models/qwen3_vl.py:1818-1825): 262,144 x 3 x 64
    x 2 B less on every rank."""
    w = {v: run_json("size", "qwen3.5-27b", "--gpu", "A100-80GB", "--tp", "2", "--vllm-version", v, "--tokens", "1")["pool"]
         ["weights_bytes_per_rank"] for v in ("0.31.0", "0.32.0")}
    assert w["0.31.0"] - w["0.32.0"] == 262_144 * 3 * 64 * 2


def test_qwen25_vl_items_by_max_model_len():
    """Qwen2.5-VL's largest image: the checkpoints' max_pixels 12,845,056 // 28^2 = 16,384 tokens (65,536 patches of
    3 x 2 x 14 x 14 values). Its dummy video takes the most 3584^2 frames whose tokens fit in max_model_len, two per
    temporal patch, at most 14 (vllm==0.23.0: models/qwen2_vl.py:1029-1065): 16,384 tokens below 32,768, 32,768 at
    32,768, 7 x 16,384 = 114,688 at the default 128,000, which a public 0.23.0 start prints."""
    from kvcalc.core.mm_budget import video_item_tokens

    tower = vision_tower(resolve(QWEN25VL_7B).spec.arch)
    assert tower is not None and tower.tokens_per_item == 16_384 and tower.patches_per_tile == 65_536
    assert tower.pixels_per_tile == 65_536 * 1176
    assert [video_item_tokens(tower, n) for n in (4096, 32_768, 128_000, 10**9)] == [16_384, 32_768, 114_688, 114_688]
    log = (Path(__file__).parent / "data" / "vllm-budget" / "qwen25vl-7b-a100-u022-0.23.0.log").read_text()
    assert "budget of 114688 tokens, and profiled with 1 video items" in log


def test_qwen25_vl_tower_peak_by_release(run_json):
    """Qwen2.5-VL's blocks over 65,536 patches, bf16, per patch (width 1280, 16 heads of 80, MLP 3420, rotary rows 40;
    pixels 1176 values). Kept through every block: the pixels, the window index and its reverse (4 B), the block's
    input (2560 B) and the rotary rows: fp32 (160 B) in 0.11, a cached bf16 cos and sin plus a copy (320 B) from 0.12.
    - 0.15-0.27 at down_proj: 2352 + 320 + 4 + 2560 + attention output, fused-norm output, new residual and down's
      output (4 x 2560) + gate/up and the activation 3 x 3420 x 2 / TP + the all-reduce's 2560 at TP 2: 35,996 at TP 1,
      28,296 at TP 2;
    - 0.11.0 at the fp32 rotary: 2352 + 160 + 4 + 2560 + norm 2560 + cos and sin fp32 320 + qkv, q/k/v copies, their
      concatenation and the bf16 result (10 x 1280 x 2 / TP) + the fp32 copy and output (4 x 1280 x 4 / TP): 54,036 at
      TP 1, 30,996 at TP 2;
    - 0.12-0.14 at the native SiLU-and-mul: 2352 + 320 + 4 + 2560 + 3 x 2560 + gate/up, SiLU and product 4 x 3420 x 2:
      40,276 at TP 1;
    - from 0.30 the pixels are uint8 (1176 B less): 34,820 at TP 1.
    Images only (the video limit 0), max_model_len 8192."""
    base = (QWEN25VL_7B, "--gpu", "A100-80GB", "--max-model-len", "8192", "--limit-mm-per-prompt", '{"video": 0}', "--tokens", "1")
    want = {("0.15.0", "1"): 35_996, ("0.23.0", "2"): 28_296, ("0.11.0", "1"): 54_036, ("0.11.0", "2"): 30_996,
            ("0.12.0", "1"): 40_276, ("0.33", "1"): 34_820}
    for (version, tp), per_patch in want.items():
        pool = run_json("size", *base, "--vllm-version", version, "--tp", tp)["pool"]
        assert pool["activation_bytes"] == 65_536 * per_patch, (version, tp)


def test_qwen25_vl_budget_against_logs(run_json):
    """Three public Qwen2.5-VL starts, whole prediction (weights, the encoder's pass, non-torch; no CUDA graphs before
    0.20): 3B on an L4, 0.11.0, 8192, 2048 batched tokens, native sampler: 'Available KV cache memory: 9.26 GiB';
    0.15.0, 4096: '10.43 GiB'; and the 7B on an A100-80GB at util 0.22 with the default 128,000-token context, whose
    114,688-token video leaves '-14.28 GiB' and the start fails: kvcalc refuses it too."""
    data = Path(__file__).parent / "data" / "vllm-budget"
    for log, logged, args in (
        ("qwen25vl-raydocs-3b-l4-8k-0.11.0.log", 9.26, (QWEN25VL_3B, "--gpu", "L4", "--vllm-version", "0.11.0",
         "--max-model-len", "8192", "--usage-context", "llm", "--sampler", "native", "--compile-cache", "warm")),
        ("qwen25vl-anyscale-3b-l4-4k-0.15.0.log", 10.43, (QWEN25VL_3B, "--gpu", "L4", "--vllm-version", "0.15.0",
         "--max-model-len", "4096", "--usage-context", "llm")),
        ("qwen25vl-7b-a100-u022-0.23.0.log", -14.28, (QWEN25VL_7B, "--gpu", "A100-80GB", "--vllm-version", "0.23.0",
         "--gpu-memory-utilization", "0.22")),
    ):
        assert f"Available KV cache memory: {logged} GiB" in (data / log).read_text()
        pool = run_json("size", *args, "--max-num-batched-tokens", "2048", "--tokens", "1")["pool"]
        available = pool["kv_cache_memory_bytes"] / GIB
        assert abs(available - logged) < max(0.02 * abs(logged), 0.3), (log, available)
    assert pool["num_blocks"] == 0  # the 7B start: no memory for the cache blocks, as vLLM found
    # 0.9's tower code (fp32 pixels, other rotary code) is not read: a note, no encoder term
    old = run_json("size", QWEN25VL_7B, "--gpu", "L4", "--vllm-version", "0.9.2", "--max-model-len", "2048", "--tokens", "1")
    assert any("encoder profile run is not modelled" in n for n in old["notes"])
