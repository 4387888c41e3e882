"""Every setting of kvcalc, declared once.

Each field of ``Settings`` is one setting: its name (the gate-file key), type and default,
and with ``setting(...)`` its command-line flags (vLLM's spellings among them), help text,
value kind, help panel and whether ``compare`` sweeps it. From this one declaration come:

- ``Settings`` itself (what every command and every gate deployment evaluates),
- the typer options of every command (``kvcalc.cli.options``),
- the gate file's keys and their aliases (vLLM's long flag names, ``-`` or ``_``),
- ``compare``'s sweep flags,
- how an error names a setting: ``--tp`` on the command line, ``tp`` in a gate file.

The first flag is the primary spelling and is always ``--`` + the name with ``_`` -> ``-``
(``kvcalc.errors.setting`` relies on it).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from kvcalc.core.record import Field, fields, record, replace

# value kinds: how a flag or gate value is read and checked
POSITIVE = "positive"  # integer >= 1
NONNEG = "nonneg"  # integer >= 0
TEXT = "text"
SIZE = "size"  # bytes: 80GiB, 79.1GiB, 80GB or an integer
UTIL = "util"  # fraction of GPU memory, 0 < f <= 1
BOOL = "bool"
INT_LIST = "int_list"  # comma-separated integers: 17,32
VERSION = "version"  # an engine release string
JSON = "json"  # a JSON object as vLLM takes it ('{"image": 0}'); a gate file may write it as a mapping

# help panels, in the order --help shows them
MODEL = "Model"
TRAFFIC = "Traffic"
PARALLEL = "Parallelism"
ENGINE = "Engine"
BUDGET = "Memory budget"
OUTPUT = "Output"
PANELS = (MODEL, TRAFFIC, PARALLEL, ENGINE, BUDGET, OUTPUT)

# the release whose rules apply when none is given
DEFAULT_VLLM_VERSION = "0.33"
DEFAULT_SGLANG_VERSION = "0.5.23"  # kvcalc.core.sglang.DEFAULT_VERSION (not imported: start-up)
ENGINES = ("vllm", "sglang")


class SettingField(Field):
    """A record field that also carries how the setting is spelled and explained."""

    def __init__(
        self, default: Any, flags: tuple[str, ...], help: str, kind: str, panel: str, sweep: bool,  # noqa: A002
        inert: bool = False,
    ) -> None:
        super().__init__(default=default)
        self.flags = flags
        self.help = help
        self.kind = kind
        self.panel = panel
        self.sweep = sweep
        # a `vllm serve` flag accepted so a command line pastes, that changes nothing in kvcalc
        self.inert = inert

    @property
    def flag(self) -> str:
        """The primary command-line spelling, e.g. ``--kv-dtype``."""
        return self.flags[0]

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other long spellings as gate keys: ``--tensor-parallel-size`` -> ``tensor_parallel_size``."""
        return tuple(f[2:].replace("-", "_") for f in self.flags[1:] if f.startswith("--"))

    @property
    def python_type(self) -> type:
        return {POSITIVE: int, NONNEG: int, BOOL: bool, UTIL: float}.get(self.kind, str)


def setting(
    default: Any,
    *flags: str,
    help: str,  # noqa: A002 - the typer/argparse word
    kind: str,
    panel: str,
    sweep: bool = False,
    inert: bool = False,
) -> Any:
    """Declare one setting (a field of ``Settings``)."""
    name_flag = flags[0]
    assert name_flag.startswith("--"), name_flag  # noqa: S101 - a declaration error, caught by the tests
    return SettingField(default, flags, help, kind, panel, sweep, inert)


@record
class Settings:
    """Every knob, named as the command-line flag (without dashes, '-' -> '_')."""

    # parallel plan
    tp: int = setting(1, "--tp", "--tensor-parallel-size", "-tp", help="Tensor-parallel size", kind=POSITIVE, panel=PARALLEL, sweep=True)
    pp: int = setting(1, "--pp", "--pipeline-parallel-size", "-pp", help="Pipeline-parallel size", kind=POSITIVE, panel=PARALLEL, sweep=True)
    dp: int = setting(
        1, "--dp", "--data-parallel-size", "-dp", "--dp-size",
        help="Data-parallel replicas (separate pools); SGLang --dp-size (with --enable-dp-attention: attention ranks inside the TP group)",
        kind=POSITIVE, panel=PARALLEL, sweep=True,
    )
    enable_dp_attention: bool = setting(
        False, "--enable-dp-attention", help="SGLang: data-parallel attention inside the TP group (attention TP = tp / dp-size)",
        kind=BOOL, panel=PARALLEL,
    )
    pp_layers: str | None = setting(
        None, "--pp-layers", help="Explicit layers per stage, e.g. 15,16,15,15 (VLLM_PP_LAYER_PARTITION)", kind=INT_LIST, panel=PARALLEL
    )
    gpus_per_node: int = setting(8, "--gpus-per-node", help="GPUs per node, for local ranks", kind=POSITIVE, panel=PARALLEL)
    # model and cache
    kv_dtype: str = setting(
        "auto",
        "--kv-dtype",
        "--kv-cache-dtype",
        help="auto | bfloat16 | float16 | float32 | fp8 | fp8_e4m3 | fp8_e5m2 | fp8_inc | fp8_per_token_head | "
        "int8_per_token_head | fp8_ds_mla",
        kind=TEXT,
        panel=MODEL,
        sweep=True,
    )
    dtype: str | None = setting(
        None, "--dtype", help="Override the model dtype (auto | bfloat16 | float16 | float32)", kind=TEXT, panel=MODEL
    )
    block_size: int | None = setting(
        None, "--block-size", "--page-size", help="Tokens per KV block (vLLM default 16); SGLang --page-size (default 1)",
        kind=POSITIVE, panel=ENGINE, sweep=True,
    )
    encoder_tokens: int | None = setting(
        None, "--encoder-tokens", help="Encoder positions held by cross-attention (encoder-decoder models)", kind=POSITIVE, panel=MODEL
    )
    engine: str = setting(
        "vllm", "--engine", help="Serving engine whose rules size the pool: vllm (default) | sglang", kind=TEXT, panel=ENGINE, sweep=True
    )
    sglang_version: str = setting(
        DEFAULT_SGLANG_VERSION,
        "--sglang-version",
        help=f"SGLang release whose rules apply with --engine sglang (default {DEFAULT_SGLANG_VERSION}; 0.4.0 and later)",
        kind=VERSION,
        panel=ENGINE,
    )
    vllm_version: str = setting(
        DEFAULT_VLLM_VERSION,
        "--vllm-version",
        help=f"vLLM release whose rules apply, as vLLM prints it: 0.8.0 to {DEFAULT_VLLM_VERSION} (default), e.g. 0.10.1.1, v0.22.0",
        kind=VERSION,
        panel=ENGINE,
    )
    # traffic
    tokens: int | None = setting(
        None, "--tokens", "-t", help="Cached tokens of one request (or of each with --batch)", kind=NONNEG, panel=TRAFFIC, sweep=True
    )
    requests: str | None = setting(
        None, "--requests", help="Comma-separated token counts, one per request: 17,32", kind=INT_LIST, panel=TRAFFIC
    )
    batch: int | None = setting(
        None, "--batch", "-b", help="Number of requests of --tokens (or --prompt/--gen) each", kind=POSITIVE, panel=TRAFFIC, sweep=True
    )
    prompt: int | None = setting(
        None, "--prompt", help="Prompt tokens (with --gen: caches prompt + gen - 1)", kind=NONNEG, panel=TRAFFIC
    )
    gen: int | None = setting(None, "--gen", help="Generated tokens", kind=NONNEG, panel=TRAFFIC)
    continuation: bool = setting(
        False, "--continuation", help="Keep the last token's KV for a follow-up turn (P + G)", kind=BOOL, panel=TRAFFIC
    )
    max_model_len: int | None = setting(
        None, "--max-model-len", "--context-length", help="Longest request (default: from the config); SGLang --context-length",
        kind=POSITIVE, panel=MODEL, sweep=True,
    )
    # the pool (see kvcalc.core.pool) and its budget (kvcalc.app.budget)
    gpu: str | None = setting(
        None, "--gpu", help="GPU from the catalog (kvcalc gpus): H100-80GB, H200, A100-80GB, ...", kind=TEXT, panel=BUDGET, sweep=True
    )
    gpu_memory: str | None = setting(
        None, "--gpu-memory", help="Total GPU memory: 80GiB, 79.1GiB, 80GB or bytes", kind=SIZE, panel=BUDGET
    )
    nvidia_driver: int | None = setting(
        None, "--nvidia-driver",
        help="NVIDIA driver branch (550, 570, 580, ...): GeForce cards, the T4 and the A10G report less memory from 570 on (default: "
        "what the release's wheel needs: vLLM 0.20.1+ is a CUDA 13 build, driver 580+)", kind=POSITIVE, panel=BUDGET,
    )
    gpu_memory_utilization: float | None = setting(
        None,
        "--gpu-memory-utilization",
        "--gpu-util",
        help="Fraction of total memory vLLM may use (0.92)",
        kind=UTIL,
        panel=BUDGET,
    )
    kv_cache_memory: str | None = setting(
        None, "--kv-cache-memory", "--kv-cache-memory-bytes",
        help="KV pool per GPU, bypassing the budget; one per PP stage: 12.13GiB,11.33GiB (SGLang: its K size + V size, or KV size for MLA)", kind=SIZE, panel=BUDGET,
    )
    mem_fraction_static: float | None = setting(
        None, "--mem-fraction-static", help="SGLang: fraction of the free memory for weights + KV pool (default: SGLang's, by GPU)",
        kind=UTIL, panel=BUDGET, sweep=True,
    )
    free_before_weights: str | None = setting(
        None, "--free-before-weights",
        help="SGLang: free memory before weights load, its 'Load weight begin. avail mem=' (SGLang's GB are GiB: 78.81GiB)",
        kind=SIZE, panel=BUDGET,
    )
    free_after_weights: str | None = setting(
        None, "--free-after-weights",
        help="SGLang: free memory after weights load, its 'Load weight end. ... avail mem=' (GiB: 63.72GiB)", kind=SIZE, panel=BUDGET,
    )
    weights_bytes: str | None = setting(
        None, "--weights-bytes", help="Weights of the whole model (overrides the estimate)", kind=SIZE, panel=BUDGET
    )
    activation_bytes: str | None = setting(
        None, "--activation-bytes", help="Activation peak per GPU (overrides the estimate)", kind=SIZE, panel=BUDGET
    )
    overhead_bytes: str | None = setting(
        None, "--overhead-bytes", help="Non-torch memory per GPU: CUDA context, NCCL", kind=SIZE, panel=BUDGET
    )
    cudagraph_bytes: str | None = setting(
        None, "--cudagraph-bytes", help="CUDA graph memory per GPU (0 with --enforce-eager)", kind=SIZE, panel=BUDGET
    )
    max_num_batched_tokens: int | None = setting(
        None,
        "--max-num-batched-tokens",
        help="Scheduler token budget (default: vLLM's serve default for the GPU)",
        kind=POSITIVE,
        panel=ENGINE,
    )
    max_num_seqs: int | None = setting(
        None,
        "--max-num-seqs",
        help="Most requests in one step; sizes the profile run's dummy sampler (default: vLLM's for the release and GPU)",
        kind=POSITIVE,
        panel=ENGINE,
    )
    enforce_eager: bool = setting(
        False, "--enforce-eager", help="No CUDA graphs: the CUDA-graph term is 0", kind=BOOL, panel=ENGINE
    )
    enable_expert_parallel: bool = setting(
        False, "--enable-expert-parallel",
        help="vLLM: MoE experts split whole across the TP x DP ranks instead of each expert sliced by TP "
        "(same weight bytes; the fused-MoE buffers take the full expert width)",
        kind=BOOL, panel=ENGINE,
    )
    enable_lora: bool = setting(
        False, "--enable-lora", help="LoRA adapters: vLLM's stacked adapter buffers join the weights term", kind=BOOL, panel=ENGINE
    )
    max_loras: int | None = setting(None, "--max-loras", help="LoRA adapters per batch (vLLM default 1)", kind=POSITIVE, panel=ENGINE)
    max_lora_rank: int | None = setting(
        None, "--max-lora-rank", help="Largest LoRA rank (vLLM default 16; 1, 8, 16, 32, 64, 128, 256, 320, 512)",
        kind=POSITIVE, panel=ENGINE,
    )
    cudagraph_capture_sizes: str | None = setting(
        None,
        "--cudagraph-capture-sizes",
        help="Batch sizes captured as CUDA graphs, e.g. 1,2,4,8 (default: vLLM's from max_num_seqs)",
        kind=INT_LIST,
        panel=ENGINE,
    )
    quantization: str | None = setting(
        None,
        "--quantization",
        "-q",
        help="Weights quantization when the config has none: fp8 | fp8_e4m3 | mxfp4 | awq | gptq | compressed-tensors | bitsandbytes",
        kind=TEXT,
        panel=MODEL,
    )
    sampler: str | None = setting(
        None,
        "--sampler",
        help="Top-k/top-p path of vLLM's profile run: auto (the release's and GPU's) | native | flashinfer | triton",
        kind=TEXT,
        panel=BUDGET,
    )
    compile_cache: str | None = setting(
        None,
        "--compile-cache",
        help="torch.compile cache at launch: cold (default: the first launch compiles inside vLLM's profile run, "
        "autotuning on a copy of the embedding table) | warm (compiled artifacts found in VLLM_CACHE_ROOT, or the graph in "
        "torch Inductor's own cache from an earlier launch on the machine)",
        kind=TEXT,
        panel=BUDGET,
    )
    expandable_segments: bool = setting(
        False, "--expandable-segments", help="PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF)=expandable_segments:True for vLLM: "
        "PyTorch's allocator splits every block, so the weights figure carries no segment slack", kind=BOOL, panel=BUDGET,
    )
    usage_context: str | None = setting(
        None,
        "--usage-context",
        help="How vLLM was started, which sets its batch defaults: serve (default: vllm serve, the OpenAI server) | llm "
        "(the offline LLM class: 16384 or 8192 batched tokens) | engine (LLMEngine built directly: 2048 tokens, 128 seqs)",
        kind=TEXT,
        panel=BUDGET,
    )
    limit_mm_per_prompt: str | None = setting(
        None,
        "--limit-mm-per-prompt",
        help='vLLM\'s per-prompt item limits as JSON, e.g. \'{"image": 2}\' (sizes the multimodal encoder\'s profile '
        'pass; {"image": 0}: no encoder pass)',
        kind=JSON,
        panel=BUDGET,
    )
    language_model_only: bool = setting(
        False, "--language-model-only",
        help="vLLM 0.17+: every modality's limit is 0: no encoder pass, and no vision tower loaded where the release "
        "skips it (0.15+ for every wrapper kvcalc models)",
        kind=BOOL, panel=BUDGET,
    )
    num_gpu_blocks_override: int | None = setting(
        None, "--num-gpu-blocks-override", help="Force the number of blocks", kind=POSITIVE, panel=ENGINE
    )
    max_concurrent_batches: int | None = setting(
        None,
        "--max-concurrent-batches",
        help=f"Batches in flight ({DEFAULT_VLLM_VERSION} default: pp + 1 with async scheduling)",
        kind=POSITIVE,
        panel=ENGINE,
    )
    disable_hybrid_kv_cache_manager: bool = setting(
        False,
        "--disable-hybrid-kv-cache-manager",
        help="Allocate sliding/chunked layers as full attention",
        kind=BOOL,
        panel=ENGINE,
    )
    max_total_tokens: int | None = setting(
        None, "--max-total-tokens", help="SGLang: cap on the token pool (max_total_num_tokens)", kind=POSITIVE, panel=ENGINE
    )
    max_running_requests: int | None = setting(
        None, "--max-running-requests", help="SGLang: requests run at once (default: from the pool)", kind=POSITIVE, panel=ENGINE
    )
    chunked_prefill_size: int | None = setting(
        None, "--chunked-prefill-size", help="SGLang: prefill chunk (default: by GPU memory; sets mem_fraction_static's reserve)",
        kind=POSITIVE, panel=ENGINE,
    )
    attention_backend: str | None = setting(
        None,
        "--attention-backend",
        help="Backend whose block size applies: FLASH_ATTN, FLASHMLA, CUTLASS_MLA, ...",
        kind=TEXT,
        panel=ENGINE,
    )

    enable_prefix_caching: bool | None = setting(
        None, "--enable-prefix-caching",
        help="vLLM prefix caching (default: the release's; for hybrid models off up to 0.27, on from 0.28): how many "
        "state pages a hybrid model's request holds; no pool size changes otherwise (see kvcalc lifecycle --prefix)",
        kind=BOOL, panel=ENGINE,
    )
    mamba_cache_mode: str | None = setting(
        None, "--mamba-cache-mode",
        help="vLLM 0.15+, hybrid models with prefix caching: auto (vLLM's pick) | none | align | all (to 0.31)",
        kind=TEXT, panel=ENGINE,
    )
    speculative_config: str | None = setting(
        None, "--speculative-config",
        help="vLLM's JSON: method (mtp, eagle, eagle3, draft_model, dflash, ngram, suffix...), model (the draft "
        "checkpoint) and num_speculative_tokens; the drafter's KV layers, a hybrid's state pages, MTP weights and graph "
        "sizes are counted (SGLang: not modelled)", kind=JSON, panel=ENGINE,
    )
    # vLLM serve flags a pasted command line carries
    trust_remote_code: bool = setting(
        False, "--trust-remote-code", help="vLLM flag: accepted; kvcalc reads config.json as data, never runs its code",
        kind=BOOL, panel=MODEL, inert=True,
    )
    served_model_name: str | None = setting(
        None, "--served-model-name", help="vLLM flag: accepted, changes nothing here", kind=TEXT, panel=MODEL, inert=True
    )
    seed: int | None = setting(None, "--seed", help="vLLM flag: accepted, changes nothing here", kind=NONNEG, panel=ENGINE, inert=True)
    swap_space: str | None = setting(
        None, "--swap-space", help="vLLM flag (CPU swap, GiB): accepted, changes no GPU pool", kind=TEXT, panel=BUDGET, inert=True
    )
    host: str | None = setting(None, "--host", help="vLLM flag: accepted, changes nothing here", kind=TEXT, panel=OUTPUT, inert=True)
    port: int | None = setting(None, "--port", help="vLLM flag: accepted, changes nothing here", kind=POSITIVE, panel=OUTPUT, inert=True)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)  # type: ignore[no-any-return]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(TABLE)

    @property
    def has_pool(self) -> bool:
        return _pool_values(self).count(None) != len(POOL_SETTINGS)


# --------------------------------------------------------------------------- bounds
# What a deployment can be: a larger value is refused with one line (exit 2) before anything
# is computed, so every answer comes in well under a second (docs/hardening.md lists them).
MAX_PARALLEL = 1 << 20  # tp, pp, dp, gpus per node, batches in flight
# kvcalc lists every rank of the deployment (tp x pp x dp): 4,096 GPUs take about 0.3 s; a
# larger fleet is DP copies of one replica (size it with --dp 1 and multiply)
MAX_WORLD_SIZE = 4096
MAX_TOKENS = 1 << 40  # tokens, prompt, gen, max_model_len, block size, blocks, encoder positions
MAX_REQUESTS = 1_000_000  # requests listed one by one (--batch, --requests)
MAX_COMPARE_ROWS = 1_000  # rows of one `kvcalc compare` (models x attention variants x swept values): about 1 s
LIMITS: dict[str, int] = {
    "tp": MAX_PARALLEL,
    "pp": MAX_PARALLEL,
    "dp": MAX_PARALLEL,
    "gpus_per_node": MAX_PARALLEL,
    "max_concurrent_batches": MAX_PARALLEL,
    "batch": MAX_REQUESTS,
    "block_size": MAX_TOKENS,
    "encoder_tokens": MAX_TOKENS,
    "tokens": MAX_TOKENS,
    "prompt": MAX_TOKENS,
    "gen": MAX_TOKENS,
    "max_model_len": MAX_TOKENS,
    "max_num_batched_tokens": MAX_TOKENS,
    "num_gpu_blocks_override": MAX_TOKENS,
}


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def bound_error(name: str, value: Any) -> str | None:
    """Why ``value`` of setting ``name`` is beyond what a deployment can be, or None. Sizes
    are bounded where they are parsed (``kvcalc.core.units.MAX_BYTES``)."""
    limit = LIMITS.get(name)
    if limit is not None and isinstance(value, int) and not isinstance(value, bool) and value > limit:
        from kvcalc.errors import named

        return f"{named(name)} {_shown(value)} is beyond what a deployment can be (limit {limit:,})"
    kind = TABLE[name].kind
    if kind == SIZE and value is not None:
        from kvcalc.core.units import parse_size
        from kvcalc.errors import KvcalcError, named

        try:
            for part in str(value).split(",") if isinstance(value, str) else (value,):  # one per PP stage
                parse_size(part.strip() if isinstance(part, str) else part, named(name))  # bounded by MAX_BYTES
        except KvcalcError as exc:
            return str(exc.args[0])
    if kind == INT_LIST and value is not None:
        from kvcalc.errors import named

        parts = str(value).split(",")
        if len(parts) > MAX_REQUESTS:
            return f"{named(name)} lists {len(parts):,} values; kvcalc takes at most {MAX_REQUESTS:,}"
        big = next((p.strip() for p in parts if len(p.strip()) > 14 or (p.strip().isdigit() and int(p) > MAX_TOKENS)), None)
        if big is not None:
            return f"{named(name)} holds {_shown(big)}, beyond what a request can be (limit {MAX_TOKENS:,} tokens)"
    return None


def check_bounds(s: Settings, *, traffic_only: bool = False) -> None:
    """PlanError naming the first setting beyond its bound, or the world size beyond MAX_WORLD_SIZE.
    ``traffic_only``: only the traffic's settings (the others' values were checked already)."""
    from kvcalc.errors import PlanError, named

    if traffic_only:
        for (name, limit), value in zip(_TRAFFIC_BOUNDED, _traffic_values(s)):
            if value is not None and not (limit and isinstance(value, int) and value <= limit):
                why = bound_error(name, value)
                if why:
                    raise PlanError(why)
        return
    for (name, limit), value in zip(_BOUNDED, _bounded_values(s)):  # in the table's order
        # an integer within its limit, or unset, passes (bound_error says why anything else fails)
        if value is None or (limit and isinstance(value, int) and value <= limit):
            continue
        why = bound_error(name, value)
        if why:
            raise PlanError(why)
    sizes = [v for v in (s.tp, s.pp, s.dp) if isinstance(v, int) and not isinstance(v, bool)]
    if len(sizes) == 3 and s.tp * s.pp * s.dp > MAX_WORLD_SIZE:
        raise PlanError(
            f"{named('tp')} x {named('pp')} x {named('dp')} = {s.tp * s.pp * s.dp:,} GPUs; kvcalc lists every rank and "
            f"takes at most {MAX_WORLD_SIZE:,} (DP replicas are copies: size one with {named('dp')} 1 and multiply)"
        )


# name -> its declaration, in declaration order
TABLE: dict[str, SettingField] = {f.name: f for f in fields(Settings) if isinstance(f, SettingField)}
# the settings bound_error checks (a limit, a size or a list of integers); unset (None) passes
# (name, its limit or 0)
_BOUNDED = tuple((n, LIMITS.get(n, 0)) for n, f in TABLE.items() if n in LIMITS or f.kind in (SIZE, INT_LIST))
_bounded_values = attrgetter(*(n for n, _ in _BOUNDED))
# the settings of the requests measured (kvcalc.app.service.traffic): every other bounded setting is
# part of an evaluation's cached setup, so its bound holds once checked for those values
TRAFFIC_SETTINGS = ("tokens", "requests", "batch", "prompt", "gen", "continuation")
_TRAFFIC_BOUNDED = tuple((n, x) for n, x in _BOUNDED if n in TRAFFIC_SETTINGS)
_traffic_values = attrgetter(*(n for n, _ in _TRAFFIC_BOUNDED))
# settings that, when given, size a pool (the others can only change it)
POOL_SETTINGS = ("gpu", "gpu_memory", "kv_cache_memory", "num_gpu_blocks_override", "free_before_weights")
_pool_values = attrgetter(*POOL_SETTINGS)
# compare's sweep flags: name -> (primary flag, element type), in the order the product nests them
SWEEPS: dict[str, tuple[str, type]] = {n: (f.flag, f.python_type) for n, f in TABLE.items() if f.sweep}
# vLLM serve flags accepted that change nothing here (one note names those given)
INERT = tuple(n for n, f in TABLE.items() if f.inert)
# gate-file aliases: vLLM's long flag names -> the setting
ALIASES: dict[str, str] = {a: n for n, f in TABLE.items() for a in f.aliases}
