"""One test per attention family on a real preset, each number derived by hand here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.sources.resolve import resolve


def test_mla_latent_not_split_by_tp(run_json):
    # DeepSeek-V3: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements, BF16, no x2
    d = run_json("size", "deepseek-v3", "--tokens", "1000", "--tp", "8")
    assert d["model"]["attention"] == "MLA"
    assert d["bytes_per_token"] == 61 * (512 + 64) * 2 == 70272
    # every TP rank holds the whole latent (vLLM: get_num_kv_heads -> 1, max_tp_shards 1)
    assert d["bytes_per_token_per_rank"] == 70272
    assert d["effective_bytes_per_rank"] == 1000 * 70272
    fp8 = run_json("size", "deepseek-v3", "--tokens", "1", "--kv-dtype", "fp8_ds_mla")
    assert fp8["bytes_per_token"] == 61 * 656  # 512 fp8 + 4 x 4 B scales + 64 x 2 B rope


def test_mla_fp8_ds_mla_refused_for_gqa(run):
    code, _, err = run("size", "qwen3-0.6b", "--kv-dtype", "fp8_ds_mla")
    assert code == 2 and "only for MLA" in err


def test_sliding_window_caps_at_the_window(run_json):
    # Mistral-7B-v0.1: 32 layers, all sliding, window 4096; 8 KV heads x 128 x 2 x 2 B = 4096 B per layer-token
    d = run_json("size", "mistral-7b-v0.1", "--tokens", "10001", "--block-size", "16")
    per_layer = 2 * 8 * 128 * 2
    assert d["bytes_per_token"] == 32 * per_layer  # one more token while all layers hold it
    assert d["effective_bytes"] == 32 * 4096 * per_layer  # the last 4096 positions only
    # window = positions 5905..10000: blocks 369 (5904..5919) .. 625 -> 626 - 369 = 257 blocks
    assert d["block_rounded_bytes"] == 32 * (626 - 369) * 16 * per_layer


def test_interleaved_local_global(run_json):
    # Gemma-3-1B: 26 layers, sliding_window_pattern 6 -> layers 5, 11, 17, 23 full (4), 22 sliding (512)
    # 1 KV head (MQA) x head_dim 256 x 2 (K,V) x 2 B = 1024 B per layer-token
    d = run_json("size", "gemma-3-1b", "--tokens", "1000")
    groups = {g["kind"]: g for g in d["model"]["layer_groups"]}
    assert groups["full"]["layers"] == 4 and groups["sliding"]["layers"] == 22
    assert groups["sliding"]["window"] == 512
    assert d["bytes_per_token"] == 26 * 1024
    assert d["effective_bytes"] == 22 * 512 * 1024 + 4 * 1000 * 1024


def test_gpt_oss_alternates(run_json):
    # gpt-oss-20b: 24 layer_types alternating sliding (128) / full; 8 KV heads x 64 x 2 x 2 B = 2048 B
    d = run_json("size", "gpt-oss-20b", "--tokens", "4096")
    groups = {g["kind"]: g for g in d["model"]["layer_groups"]}
    assert groups["full"]["layers"] == 12 and groups["sliding"]["layers"] == 12
    assert d["effective_bytes"] == 12 * 4096 * 2048 + 12 * 128 * 2048


def test_hybrid_state_is_per_request(run_json):
    # Qwen3-Next: full_attention_interval 4 -> 12 full layers (2 KV heads x 256), 36 GDN layers
    d = run_json("size", "qwen3-next", "--tokens", "1000")
    assert d["bytes_per_token"] == 12 * 2 * 2 * 256 * 2
    # GDN state: conv (2*128*16 + 128*32) x (4-1) x 2 B + temporal 32 x 128 x 128 x 2 B
    state = (2 * 128 * 16 + 128 * 32) * 3 * 2 + 32 * 128 * 128 * 2
    assert state == 1097728
    assert d["state_bytes_per_request"] == 36 * state
    two = run_json("size", "qwen3-next", "--tokens", "2000")
    assert two["effective_bytes"] - d["effective_bytes"] == 1000 * 12 * 2048  # the state does not grow


def test_mqa_falcon_multi_query(run_json):
    # falcon-7b: multi_query true -> 1 KV head (the saved num_kv_heads 71 is a trap); 4544 / 71 = 64
    d = run_json("size", "falcon-7b", "--tokens", "1")
    assert d["model"]["num_kv_heads"] == 1 and d["model"]["head_dim"] == 64
    assert d["bytes_per_token"] == 2 * 32 * 1 * 64 * 2  # float16


def test_mha_phi3(run_json):
    d = run_json("size", "phi-3-mini", "--tokens", "1")
    assert d["model"]["attention"].startswith("MHA")
    assert d["bytes_per_token"] == 2 * 32 * 32 * 96 * 2  # 3072 / 32 = 96


def test_encoder_decoder_cross_attention(run_json):
    # Whisper large-v3: 32 decoder layers, 20 heads x 64, fp16: self 5120 B per layer-token;
    # cross-attention holds the encoder's 1500 positions per request in every decoder layer
    d = run_json("size", "whisper-large-v3", "--tokens", "100", "--block-size", "16")
    per_layer = 2 * 20 * 64 * 2
    assert d["bytes_per_token"] == 32 * per_layer
    assert d["effective_bytes"] == 32 * 100 * per_layer + 32 * 1500 * per_layer
    # block-rounded: cdiv(100,16)=7 blocks self, cdiv(1500,16)=94 blocks cross
    assert d["block_rounded_bytes"] == 32 * 7 * 16 * per_layer + 32 * 94 * 16 * per_layer


def test_t5_not_served_by_vllm(run_json):
    d = run_json("size", "t5-v1_1-base", "--tokens", "10", "--kv-cache-memory", "1GiB")
    assert d["model"]["vllm_supported"] is False
    assert "pool" not in d and any("does not serve" in n for n in d["notes"])


def test_chunked_local_llama4(run_json):
    # Llama-4-Scout: chunk 8192 on RoPE layers, every 4th layer (NoPE) full: 36 chunked + 12 full
    d = run_json("size", "llama-4-scout", "--tokens", "10000")
    groups = {g["kind"]: g for g in d["model"]["layer_groups"]}
    assert groups["chunked"]["layers"] == 36 and groups["full"]["layers"] == 12
    per_layer = 2 * 8 * 128 * 2
    # position 9999 is in chunk [8192, 16384): 10000 - 8192 = 1808 positions held by chunked layers
    assert d["effective_bytes"] == 36 * 1808 * per_layer + 12 * 10000 * per_layer


@pytest.mark.parametrize(
    "name,heads,kv,hd",
    [("qwen3-8b", 32, 8, 128), ("llama-3.1-8b", 32, 8, 128), ("gemma-2-9b", 16, 8, 256), ("smollm2-135m", 9, 3, 64)],
)
def test_head_dim_rules(name, heads, kv, hd):
    # explicit head_dim wins (Qwen3, Gemma); else hidden_size / heads (Llama 4096/32, SmolLM2 576/9)
    spec = resolve(name).spec
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (heads, kv, hd)


def test_gemma3_text_config_takes_the_class_defaults(tmp_path):
    # google/gemma-3-4b-it publishes a text_config that names only these keys; transformers' Gemma3TextConfig
    # supplies the rest (transformers==4.57.1: models/gemma3/configuration_gemma3.py): 8 heads, 4 KV heads,
    # head_dim 256, 131072 positions, vocab 262208, tied embeddings, a 1-in-6 global pattern.
    import json

    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "torch_dtype": "bfloat16",
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = resolve(str(path)).spec
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (8, 4, 256)
    assert spec.max_model_len == 131072
    # K and V, 34 layers, 4 heads x 256 x 2 B: 2 x 34 x 4 x 256 x 2 = 139264 B per token at full length
    assert sum(2 * layer.num_kv_heads * layer.head_size * 2 for layer in spec.layers) == 139264
    # layers 6, 12, ..., 30 are global (5 of 34), the other 29 slide over 1024 tokens
    assert sum(1 for layer in spec.layers if layer.window == 1024) == 29
    assert spec.arch["vocab_size"] == 262208


def test_gemma4_full_layers_take_the_global_geometry_and_shared_layers_keep_no_cache(run_json):
    # Gemma-4-31B-it (tests/data/vllm-logs/configs/gemma-4-31b-it.json): 50 sliding layers of 16 KV heads x 256 and
    # 10 full-attention layers of num_global_key_value_heads 4 x global_head_dim 512 (attention_k_eq_v), K and V both
    # kept: 50 x 2 x 16 x 256 x 2 + 10 x 2 x 4 x 512 x 2 = 819,200 + 81,920 = 901,120 B per token
    cfg = Path(__file__).parent / "data" / "vllm-logs" / "configs" / "gemma-4-31b-it.json"
    d = run_json("size", str(cfg), "--tokens", "4096")
    assert d["bytes_per_token"] == 901_120
    # at 4096 tokens the sliding layers hold their 1024-token window: 50 x 1024 x 16,384 + 10 x 4096 x 8,192
    assert d["effective_bytes_per_rank"] == 50 * 1024 * 16_384 + 10 * 4096 * 8_192


def test_gemma4_31b_parameters_come_to_its_checkpoint():
    # The Kaggle vLLM 0.23.0 start of Gemma-4-31B-it (tests/data/vllm-logs/kaggle-gemma-4-31b-it-0.23.0.log) prints
    # "Checkpoint size: 58.25 GiB" (bf16). Hand count: sliding layer q 5376 x 32 x 256, k and v 5376 x 16 x 256,
    # o 32 x 256 x 5376, q/k norms 2 x 256; full layer q and o with 512-wide heads, k only (K = V) 5376 x 4 x 512,
    # q/k norms 2 x 512; MLP 3 x 5376 x 21504; four norms 4 x 5376 and a layer_scalar per layer; embedding
    # 262144 x 5376 (tied). Vision: 27 x (4 x 1152^2 + 2 x 72 + 3 x 1152 x 4304 + 4 x 1152), patch projection
    # 768 x 1152, position table 2 x 10240 x 1152, standardize bias and scale 2 x 1152, projector 1152 x 5376.
    from kvcalc.core.plan import ParallelPlan
    from kvcalc.core.weights import estimate_weights

    sliding = 2 * 5376 * 32 * 256 + 2 * 5376 * 16 * 256 + 2 * 256
    full = 2 * 5376 * 32 * 512 + 5376 * 4 * 512 + 2 * 512
    per_layer = 3 * 5376 * 21504 + 4 * 5376 + 1
    text = 50 * (sliding + per_layer) + 10 * (full + per_layer) + 262144 * 5376
    vision = 27 * (4 * 1152**2 + 2 * 72 + 3 * 1152 * 4304 + 4 * 1152) + 768 * 1152 + 2 * 10240 * 1152 + 2 * 1152 + 1152 * 5376
    final_norm = 5376
    assert round((text + vision + final_norm) * 2 / 2**30, 2) == 58.25  # the figure the log prints
    spec = resolve(str(Path(__file__).parent / "data" / "vllm-logs" / "configs" / "gemma-4-31b-it.json")).spec
    est = estimate_weights(spec, ParallelPlan(tp=1, pp=1, dp=1))
    assert est.parameters == text + vision  # kvcalc's parameter count leaves the final norm out (every model)
    # per GPU also the final norm and the two RoPE tables: 262144 positions x (256 + 512) x 2 B (proportional RoPE
    # keeps all 512 dims)
    assert est.bytes_per_stage == (2 * (text + vision + final_norm) + 262144 * (256 + 512) * 2,)


def test_gemma4_full_graphs_do_not_run_flashattention_3():
    # FA3 takes head sizes up to 256; Gemma 4's 512-wide full-attention heads make vLLM force TRITON_ATTN for every
    # layer (the Kaggle 0.23.0 log prints "Forcing TRITON_ATTN backend"), so no FA3 split accumulators are charged
    # on an H100, while Qwen3-8B (head 128, 32 query heads) keeps them
    from kvcalc.app.cudagraph_budget import fa3_full_graphs
    from kvcalc.app.settings import Settings
    from kvcalc.core.plan import ParallelPlan

    gemma = resolve(str(Path(__file__).parent / "data" / "vllm-logs" / "configs" / "gemma-4-31b-it.json")).spec
    one = ParallelPlan(tp=1, pp=1, dp=1)
    assert fa3_full_graphs(Settings(), gemma, one, 90) is None
    assert fa3_full_graphs(Settings(), resolve("qwen3-8b").spec, one, 90) == (32, 128)


def test_gemma4_kv_sharing_defaults_and_bidirectional_window(tmp_path):
    # An E2B-shaped text config (35 layers, 20 KV-shared): shared layers read the last earlier layer of their type and
    # keep no cache (vllm==0.33.0: gemma4.py:471-492, gpu_model_runner.py:7094-7107). Without layer_types transformers
    # fills five sliding to one full; the last layer is forced full; sliding_window absent is 512, and "all"
    # bidirectional attention makes it 512 // 2 + 1 = 257 (transformers==5.24.0: configuration_gemma4.py:169, 183-199).
    cfg = {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35, "num_attention_heads": 8,
           "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512, "num_kv_shared_layers": 20,
           "vocab_size": 262144, "max_position_embeddings": 131072, "use_bidirectional_attention": "all"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = resolve(str(path)).spec
    assert len(spec.layers) == 15  # layers 0-14 own a cache
    full = [x.layer for x in spec.layers if x.kind == "full"]
    assert full == [5, 11]  # (i + 1) % 6 == 0 below 15; no attention_k_eq_v: the full layers keep 1 KV head
    assert {(x.num_kv_heads, x.head_size) for x in spec.layers if x.kind == "full"} == {(1, 512)}
    assert {(x.num_kv_heads, x.head_size, x.window) for x in spec.layers if x.kind == "sliding"} == {(1, 256, 257)}
    # 13 sliding x 2 x 256 x 2 + 2 full x 2 x 512 x 2 = 13,312 + 4,096 B per token at full length
    assert sum(2 * x.num_kv_heads * x.head_size * 2 for x in spec.layers) == 17_408
    # a shared layer type with no earlier layer of its own is refused, as transformers and vLLM refuse it
    path.write_text(json.dumps({**cfg, "layer_types": ["sliding_attention"] * 15 + ["full_attention"] * 20}))
    from kvcalc.errors import ConfigError

    with pytest.raises(ConfigError, match="no earlier full_attention layer"):
        resolve(str(path))


def test_gemma3_linear_rope_table_is_factor_times_longer(tmp_path):
    # Gemma 3's global layers build get_rope from the config's rope_scaling, {"rope_type": "linear", "factor": 8.0}:
    # LinearScalingRotaryEmbedding keeps max_position x factor rows (vllm: rotary_embedding/linear_scaling_rope.py);
    # the sliding layers keep a default table of max_position rows. head_dim 256, bf16:
    # (131072 x 8 + 131072) x 256 x 2 = 603,979,776 B. A public MI300X start of gemma-3-4b-it (vLLM 0.23.0, set 16)
    # logs "Model loading took 8.58 GiB", 0.51 GiB above what the weights alone give.
    import json

    from kvcalc.core.weights import rope_table_bytes

    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = resolve(str(path)).spec
    assert rope_table_bytes(spec, spec.arch, 2)[0] == (131072 * 8 + 131072) * 256 * 2 == 603_979_776
    cfg["text_config"].pop("rope_scaling")  # default RoPE on both: two tables of 131072 rows
    path.write_text(json.dumps(cfg))
    spec = resolve(str(path)).spec
    assert rope_table_bytes(spec, spec.arch, 2)[0] == 2 * 131072 * 256 * 2


def test_qwen3_5_keeps_its_ssm_state_in_float32(run_json):
    """Qwen3.5 / 3.6 (model_type qwen3_5): vLLM's config hook sets an 'auto' mamba SSM cache dtype to the config's
    mamba_ssm_dtype, float32 (vllm==0.27.1: model_executor/models/config.py:799-829). Qwen3.5-27B's published config
    (tests/data/vllm-budget/configs/qwen3.5-27b.json): 64 layers, every 4th full attention (4 KV heads x 256), 48
    gated-delta-net layers with 16 key / 48 value heads of 128 and a conv kernel of 4."""
    config = "tests/data/vllm-budget/configs/qwen3.5-27b.json"
    d = run_json("size", config, "--tokens", "1000")
    conv = (2 * 16 * 128 + 48 * 128) * (4 - 1) * 2  # model dtype (bf16)
    ssm = 48 * 128 * 128 * 4  # float32
    assert d["state_bytes_per_request"] == 48 * (conv + ssm)
    assert d["bytes_per_token"] == 16 * 2 * 4 * 256 * 2
    # vLLM raises the attention block size until one attention page (4 KiB a token) holds a GDN state page,
    # in multiples of 16: ceil(3,207,168 / 4096) = 783 -> 784, and pads the state page by 0.13 % to match. A public
    # vLLM 0.27.1 start of Qwen3.6-27B-FP8 (the same text layer shapes) prints both lines.
    assert d["block_size"] == 784
    log = (Path(__file__).parent / "data" / "vllm-budget" / "phivan3008-qwen3.6-27b-fp8-h100-eager-0.27.1.log").read_text()
    assert "Setting attention block size to 784 tokens" in log and "Padding mamba page size by 0.13%" in log
    assert round((784 * 4096 / (conv + ssm) - 1) * 100, 2) == 0.13


def test_qwen3_5_family_is_reviewed():
    """The Qwen3.5/3.6 configs (dense: qwen3_5 with a qwen3_5_text text_config; MoE: qwen3_5_moe / qwen3_5_moe_text) are
    read by rules kvcalc has for them (the tests above and the Qwen3.6 logs of tests/data/vllm-logs), so they carry no
    'not reviewed' note."""
    for config in ("tests/data/vllm-budget/configs/qwen3.5-27b.json", "tests/data/vllm-logs/configs/qwen3.6-35b-a3b-nvfp4.json"):
        spec = resolve(config).spec
        assert spec.num_layers > 0 and not any("not reviewed" in n for n in spec.notes), spec.notes


def test_qwen3_5_ssm_dtype_that_names_no_dtype_is_refused(run, tmp_path):
    import json

    cfg = json.loads((Path(__file__).parent / "data" / "vllm-budget" / "configs" / "qwen3.5-27b.json").read_text())
    cfg["text_config"]["mamba_ssm_dtype"] = ["float32"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = run("size", str(path), "--tokens", "10")
    assert code == 2 and "mamba_ssm_dtype" in err and "float32" in err and "Traceback" not in err


def test_qwen3_5_gated_attention_and_vision_tower_in_the_weights():
    """Qwen3.5/3.6's full-attention layers are Qwen3NextAttention, whose q projection also yields an output gate per
    head (vllm==0.27.1: qwen3_next.py:263-272), and the checkpoint carries Qwen3-VL's vision tower, built unless every
    image/video limit is 0 (qwen3_5.py:479-485). Qwen3.5-27B's vision_config (hidden 1152, 16 heads, MLP 4304, depth
    27, patch 16 x 16 x 2 frames x 3 channels, 2304 positions, merge 2 x 2, out 5120, no deepstack) by hand at TP 1:
    block 4 x 1152 (norms) + qkv 3 x 1152^2 + 3456 + proj 1152^2 + 1152 + fc1 1152 x 4304 + 4304 + fc2 4304 x 1152
    + 1152 = 15,239,504, x 27 = 411,466,608; patch 1,769,472 + 1152; positions 2,654,208; merger 2 x 1152 +
    4608^2 + 4608 + 4608 x 5120 + 5120 = 44,838,656: 460,730,096 parameters."""
    from kvcalc.app.budget_check import predict
    from kvcalc.app.settings import Settings
    from kvcalc.core.towers import qwen3_vl_tower_params
    from kvcalc.core.weights import _layer_params

    spec = resolve("tests/data/vllm-budget/configs/qwen3.5-27b.json").spec
    assert qwen3_vl_tower_params(spec.arch, 1) == 460_730_096
    full = next(i for i, layer in enumerate(spec.layers) if layer.kind == "full")
    attn = _layer_params(spec, spec.arch, spec.layers[full].layer, "full")[0]
    assert attn == 5120 * 24 * 256 * 2 + 2 * 5120 * 4 * 256 + 24 * 256 * 5120
    # a public vLLM 0.27.1 start of Qwen3.6-27B (the same text and vision shapes) at TP 2 on A100-80GB:
    # "Model loading took 25.69 GiB" (24.58 without the gate and the tower)
    log = (Path(__file__).parent / "data" / "vllm-budget" / "souspilot-qwen3.6-27b-a100x2-tp2-0.27.1.log").read_text()
    assert "Model loading took 25.69 GiB" in log
    s = Settings().with_(gpu="A100-80GB", vllm_version="0.27.1", tp=2, max_model_len=65536, gpu_memory_utilization=0.92)
    assert abs(predict(spec, s)[0]["weights"] / 2**30 - 25.69) < 0.25


def test_hybrid_prefix_caching_state_pages_match_a_real_log(run_json):
    """With prefix caching on, vLLM 0.15+ holds 2 state pages a request for a gated delta net (mamba_cache_mode
    'align'). A public 0.27.1 start of Qwen3.6-27B (the Qwen3.5-27B text shapes; tests/data/vllm-budget/phivan3008-
    ...log, --enable-prefix-caching given, 'align') logs "GPU KV cache size: 292,522 tokens" and "Maximum concurrency
    for 4,096 tokens per request: 71.42x" for 41.03 GiB: per request 6 attention blocks of 784 tokens (cdiv(4096,
    784)) + 3 GDN groups x 2 pages = 12 pages. By hand: a page of 784 x 4096 B = 3,211,264 B per layer, 16 layers a
    group (64 layers: 16 full-attention, 48 GDN in 3 groups of 16): 51,380,224 B a block; 41.03 GiB // that = 857
    blocks; 857 / 12 = 71.42x, int(857 / 12 x 4096) = 292,522 tokens."""
    config = "tests/data/vllm-budget/configs/qwen3.5-27b.json"
    log = (Path(__file__).parent / "data" / "vllm-budget" / "phivan3008-qwen3.6-27b-fp8-h100-eager-0.27.1.log").read_text()
    assert "GPU KV cache size: 292,522 tokens" in log and "Mamba cache mode is set to 'align'" in log
    assert "'enable_prefix_caching': True" in log and "Maximum concurrency for 4,096 tokens per request: 71.42x" in log
    assert int(41.03 * 2**30) // (784 * 4096 * 16) == 857 and int(857 / 12 * 4096) == 292_522
    base = ("size", config, "--gpu", "H100-80GB", "--vllm-version", "0.27.1", "--max-model-len", "4096",
            "--kv-cache-memory", "41.03GiB", "--enforce-eager")
    on = run_json(*base, "--enable-prefix-caching")
    assert on["pool"]["kv_cache_size_tokens"] == 292_522
    assert round(on["pool"]["max_concurrency"], 2) == 71.42
    assert any("2 state pages per request" in n and "'align'" in n for n in on["notes"])
    # 0.27's default for a hybrid is prefix caching off: one page a request, 857 / 9 requests
    off = run_json(*base)
    assert off["pool"]["max_concurrency"] == pytest.approx(857 / 9)
    assert any("1 state page per request" in n and "off" in n for n in off["notes"])
    # the same with the flag spelled off, and with the mode forced to 'none'
    assert run_json(*base, "--no-enable-prefix-caching")["pool"]["max_concurrency"] == pytest.approx(857 / 9)
    forced = run_json(*base, "--enable-prefix-caching", "--mamba-cache-mode", "none")
    assert forced["pool"]["max_concurrency"] == pytest.approx(857 / 9)


@pytest.mark.parametrize(
    ("version", "flags", "pages"),
    [
        ("0.11.0", ("--enable-prefix-caching",), 1),  # vLLM turns it off for every hybrid (models/config.py:294-297)
        ("0.14.0", ("--enable-prefix-caching",), 1),  # kept only for SupportsMambaPrefixCaching (not Qwen3.5)
        ("0.25.0", (), 1),  # off by default for hybrids up to 0.27
        ("0.25.0", ("--enable-prefix-caching",), 2),  # 'align' for a gated delta net
        ("0.28.0", (), 2),  # on by default from 0.28: 'align'
        ("0.28.0", ("--mamba-cache-mode", "all"), 2),  # 'all' falls back to 'align' without SupportsMambaPrefixCaching
        ("0.32.0", (), 2),  # no prefill checkpoint for a GDN in 0.32
    ],
)
def test_gdn_state_pages_per_release(run_json, version, flags, pages):
    """State pages per request of Qwen3.5-27B (48 GDN layers in 3 groups, 16 full-attention layers), 4096 tokens:
    the concurrency is blocks / (cdiv(4096, 784) attention blocks + 3 x pages)."""
    d = run_json("size", "tests/data/vllm-budget/configs/qwen3.5-27b.json", "--gpu", "A100-80GB", "--vllm-version", version,
                 "--max-model-len", "4096", "--kv-cache-memory", "41.03GiB", *flags)
    blocks = int(41.03 * 2**30) // (784 * 4096 * 16)
    assert d["pool"]["max_concurrency"] == pytest.approx(blocks / (6 + 3 * pages))


def test_gdn_prefill_checkpoint_on_hopper_in_0_33(run_json):
    """vLLM 0.33 runs a gated delta net's prefill with FlashInfer on Hopper and then keeps one prefill-checkpoint
    page per request besides 'align''s two, with the attention block a multiple of 64 (vllm==0.33.0:
    qwen_gdn_linear_attn.py:691-699, :739-760; gdn_attn.py:34; platforms/interface.py:1088-1093): the page of
    3,207,168 B needs cdiv(3,207,168, 64 x 4096) = 13 x 64 = 832 tokens, not 784. On an A100 neither applies."""
    base = ("size", "tests/data/vllm-budget/configs/qwen3.5-27b.json", "--vllm-version", "0.33.0", "--max-model-len",
            "4096", "--kv-cache-memory", "41.03GiB")
    h100 = run_json(*base, "--gpu", "H100-80GB")
    assert h100["block_size"] == 832
    blocks = int(41.03 * 2**30) // (832 * 4096 * 16)
    assert h100["pool"]["max_concurrency"] == pytest.approx(blocks / (5 + 3 * 3))
    a100 = run_json(*base, "--gpu", "A100-80GB")
    assert a100["block_size"] == 784
    assert a100["pool"]["max_concurrency"] == pytest.approx((int(41.03 * 2**30) // (784 * 4096 * 16)) / (6 + 3 * 2))


def test_mamba_cache_mode_refused_where_vllm_has_none(run):
    config = "tests/data/vllm-budget/configs/qwen3.5-27b.json"
    code, _, err = run("size", config, "--vllm-version", "0.14.0", "--mamba-cache-mode", "align", "--kv-cache-memory", "40GiB")
    assert code == 2 and "--mamba-cache-mode" in err and "0.15.0" in err and "Traceback" not in err
    code, _, err = run("size", config, "--vllm-version", "0.33.0", "--mamba-cache-mode", "all", "--kv-cache-memory", "40GiB")
    assert code == 2 and "--mamba-cache-mode" in err and "none, align" in err
    code, _, err = run("size", config, "--mamba-cache-mode", "most", "--kv-cache-memory", "40GiB")
    assert code == 2 and "--mamba-cache-mode" in err and "valid" in err


def test_probe_reads_prefix_caching_from_a_hybrid_log(run_json):
    """`probe --from-vllm-log` reads enable_prefix_caching from the log (the phivan3008 0.27.1 Qwen3.6 start gives it)
    and so predicts the logged 292,522 tokens; the weight prefetcher's "block_size=16777216 bytes" is not the
    cache's block size."""
    d = run_json("probe", "tests/data/vllm-budget/configs/qwen3.5-27b.json", "--from-vllm-log",
                 "tests/data/vllm-budget/phivan3008-qwen3.6-27b-fp8-h100-eager-0.27.1.log")
    text = json.dumps(d)
    assert "enable_prefix_caching True read from the log" in text and "block_size 16777216" not in text
    assert d["verdict"] == "agree" and d["exit_code"] == 0


def test_granite_all_mode_and_mamba2_checkpoint_pages(run_json):
    """Granite-4.0-H-Micro (36 Mamba-2 layers, 4 attention layers: 9 state groups + 1 attention group of 4). By hand:
    state page conv (2 x 2048 + 2 x 1 x 128) x (4 - 1) x 2 B = 26,112 + SSM 64 x 64 x 128 x 2 B = 1,048,576:
    1,074,688 B; attention 8 KV heads x 64 x 2 x 2 B = 2048 B a token.
    - 0.25 with --enable-prefix-caching: Granite declares SupportsMambaPrefixCaching, so 'all'; the block is a multiple
      of lcm(mamba_chunk_size 256, 16) holding a state page: cdiv(1,074,688, 2048) = 525 -> 768 tokens; a request of
      8192 holds cdiv(8192, 768) = 11 blocks in each of the 10 groups.
    - 0.31 (prefix caching on by default from 0.28, 'align'): block 16 x cdiv(1,074,688, 16 x 2048) = 528; cdiv(8192,
      528) = 16 attention blocks + 9 x 2 state pages = 34; 0.32 adds a Mamba-2 prefill-checkpoint page: 16 + 9 x 3."""
    base = ("size", "tests/data/vllm-budget/configs/granite-4.0-h-micro.json", "--kv-cache-memory", "10GiB",
            "--max-model-len", "8192")
    old = run_json(*base, "--vllm-version", "0.25.0", "--enable-prefix-caching")["pool"]
    assert old["block_size"] == 768 and old["blocks_per_request"] == 10 * 11
    assert old["bytes_per_block"] == 4 * 768 * 2048
    assert run_json(*base, "--vllm-version", "0.25.0")["pool"]["blocks_per_request"] == 16 + 9 * 1
    assert run_json(*base, "--vllm-version", "0.31.0")["pool"]["blocks_per_request"] == 16 + 9 * 2
    assert run_json(*base, "--vllm-version", "0.32.0")["pool"]["blocks_per_request"] == 16 + 9 * 3


def test_vision_tower_skipped_when_every_modality_limit_is_0():
    """vLLM builds no vision tower when every limit of its modalities is 0 (SupportsMultiModal._mark_tower_model
    puts it on the meta device: vllm==0.15.1: models/interfaces.py:217-257, utils.py no_init_weights), from 0.15 for
    Gemma 3 and LLaVA-NeXT, earlier for Qwen3-VL/3.5 (image and video; 0.11.0: qwen3_vl.py:1129-1130). Qwen3.5-27B's
    tower, counted by hand in test_qwen3_5_gated_attention_and_vision_tower_in_the_weights, is 460,730,096 bf16
    parameters. The public 0.27.1 Qwen3.6-27B-FP8 start (phivan3008 log) runs with language_model_only True and logs
    "Model loading took 27.67 GiB": without the tower kvcalc's estimate comes nearer (the rest: the FP8 checkpoint's
    modules kept in bf16, which --quantization fp8 on the bf16 config does not know)."""
    from kvcalc.app.budget_check import predict
    from kvcalc.app.settings import Settings

    spec = resolve("tests/data/vllm-budget/configs/qwen3.5-27b.json").spec
    s = Settings().with_(gpu="H100-80GB", vllm_version="0.27.1", max_model_len=4096, gpu_memory_utilization=0.88,
                         enforce_eager=True, quantization="fp8", max_num_batched_tokens=4096, max_num_seqs=32)
    full = predict(spec, s)[0]["weights"]
    lmo = predict(spec, s.with_(language_model_only=True))[0]["weights"]
    both = predict(spec, s.with_(limit_mm_per_prompt='{"image": 0, "video": 0}'))[0]["weights"]
    image_only = predict(spec, s.with_(limit_mm_per_prompt='{"image": 0}'))[0]["weights"]
    assert full - lmo == 460_730_096 * 2 and both == lmo and image_only == full  # video still on: the tower stays
    log = (Path(__file__).parent / "data" / "vllm-budget" / "phivan3008-qwen3.6-27b-fp8-h100-eager-0.27.1.log").read_text()
    assert "'language_model_only': True" in log and "Model loading took 27.67 GiB" in log
    assert abs(lmo / 2**30 - 27.67) < abs(full / 2**30 - 27.67)


def test_gemma3_tower_skipped_from_0_15_and_language_model_only_from_0_17(run):
    """Gemma 3 built its SigLIP tower whatever the limits up to 0.14 (vllm==0.14.0: gemma3_mm.py has no limit
    test) and skips it from 0.15 (gemma3_mm.py:525 _mark_tower_model); --language-model-only exists from 0.17."""
    from kvcalc.app.budget_check import predict
    from kvcalc.app.settings import Settings
    from kvcalc.core.towers import gemma3_siglip_params

    spec = resolve("tests/data/vllm-budget/configs/gemma-3-4b-it.reconstructed.json").spec
    off = '{"image": 0}'
    for version, skipped in (("0.14.0", False), ("0.15.1", True), ("0.22.0", True)):
        s = Settings().with_(gpu="H100-80GB", vllm_version=version, max_model_len=8192)
        diff = predict(spec, s)[0]["weights"] - predict(spec, s.with_(limit_mm_per_prompt=off))[0]["weights"]
        assert diff == (gemma3_siglip_params(spec.arch, spec.arch["hidden_size"], 1) * 2 if skipped else 0), version
    code, _, err = run("size", "tests/data/vllm-budget/configs/gemma-3-4b-it.reconstructed.json", "--gpu", "H100-80GB",
                       "--vllm-version", "0.16.0", "--language-model-only")
    assert code == 2 and "--language-model-only" in err and "0.17.0" in err and "Traceback" not in err
