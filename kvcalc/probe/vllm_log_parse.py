"""Reading a vLLM start-up log: the figures it reports and the settings it names, run by run.

Lines read (any prefix, any order, hard wraps of pasted logs tolerated):

- ``Available KV cache memory: 6.51 GiB`` (``gpu_worker.py``; one per worker, or one per node);
- ``GPU KV cache size: 42,656 tokens`` and ``Maximum concurrency for 32,768 tokens per request:
  1.30x``: two lines up to 0.27.x (one pair per worker before 0.11.1), one line joined by ", "
  from 0.28.0 (``GPU``/the device name first from 0.30.0);
- ``num_gpu_blocks is: 74510`` (the stat logger, 0.9.0-0.11.0) and V0 ``# GPU blocks: 1478``;
- the fit check's refusal: ``To serve at least one request with the models's max seq len (L),
  (X GiB KV cache is needed, ... memory (Y GiB). ... estimated maximum model length is N``
  (``models's`` up to 0.21.x, ``model's`` from 0.22.0; ``GB`` up to 0.8.2) and ``No available
  memory for the cache blocks``;
- V0 ``kv_cache_size=2.89GiB`` / ``reserved for KV Cache is 1.57GiB``;
- the release: the banner (``vLLM API server version 0.10.1.1``, ``version 0.15.0rc1``),
  ``LLM engine (v0.20.1)``, a wheel name ``vllm-0.15.2rc1.dev93+g…``, ``vllm0.8.2``;
- settings: the ``non-default args: {...}`` dict, the engine's ``key=value`` config line, CLI
  flags (``--tensor-parallel-size 4``, ``-tp 4``, ``--kv-cache-dtype fp8``),
  ``max_num_batched_tokens=2048`` of the chunked-prefill line, ``VLLM_PP_LAYER_PARTITION=16,32``.

A file holding several runs (a banner or an args line after capacity figures) is split.
Pure: no I/O.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

_NUM = r"(-?\d{1,15}(?:\.\d{1,15})?)"  # a log's figures are short: 5,000 digits are not read as one
_REL = r"(\d+\.\d+(?:\.\d+){0,2}(?:\.?(?:rc|dev|post|a|b)\d*)*(?:\+[\w.]+)?)"
AVAILABLE = [
    re.compile(r"Available KV cache memory:\s*" + _NUM + r"\s*GiB"),
    re.compile(r"kv_cache_size=" + _NUM + r"\s*GiB"),
    re.compile(r"the rest of the memory reserved for KV Cache is\s*" + _NUM + r"\s*GiB"),
]
TOKENS = re.compile(r"KV cache size:\s*(\d[\d,]{0,24})\s*tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for\s*(\d[\d,]{0,24})\s*tokens per request:\s*(\d{1,15}(?:\.\d{1,15})?)x")
BLOCKS = [re.compile(r"(?:GPU|cuda) blocks:\s*(\d[\d,]{0,24})\b", re.IGNORECASE), re.compile(r"num_gpu_blocks is\s*:\s*(\d{1,24})\b")]
FIT = re.compile(
    r"To serve at least one request with the models?'s? max seq len \((\d+)\),\s*\(?\s*(\d+(?:\.\d+)?) (GiB|GB) KV\s+cache"
    r" is needed, which is larger than the available KV cache memory \((-?\d+(?:\.\d+)?) (?:GiB|GB)\)"
)
SERVE = re.compile(r"To serve at least one request with the models?'s? max seq len")
ESTIMATE = re.compile(r"estimated maximum model length is (\d{1,24})\b")
NO_MEMORY = re.compile(r"No available memory for the cache blocks")
V0_NO_FIT = re.compile(r"larger than the maximum number of tokens that can be stored in KV cache")
VERSION = [
    re.compile(r"LLM engine \(v" + _REL + r"\)"),
    re.compile(r"(?:API server version|█\s*version)\s+v?" + _REL),
    re.compile(r"\bvllm[-_ ]?v?" + _REL, re.IGNORECASE),
    re.compile(r"vllm-openai:v?" + _REL),  # the docker image tag
    re.compile(r"^\s*v?" + _REL + r"\s*$"),  # `vllm --version` output
]
ARGS = re.compile(r"non-default args:\s*(\{.*)")
KEYS = {  # setting -> (key in args/config lines, CLI flags)
    "tp": ("tensor_parallel_size", ("--tensor-parallel-size", "-tp")),
    "pp": ("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp")),
    "kv_dtype": ("kv_cache_dtype", ("--kv-cache-dtype",)),
    "max_num_batched_tokens": ("max_num_batched_tokens", ("--max-num-batched-tokens",)),
    "block_size": ("block_size", ("--block-size",)),
    "dtype": ("dtype", ("--dtype",)),
    "gpu_memory_utilization": ("gpu_memory_utilization", ("--gpu-memory-utilization",)),
    "max_model_len": ("max_model_len", ("--max-model-len",)),
    "num_gpu_blocks_override": ("num_gpu_blocks_override", ("--num-gpu-blocks-override",)),
    # a hybrid model's state pages per request depend on these two (kvcalc.core.mamba_cache)
    "enable_prefix_caching": ("enable_prefix_caching", ()),
    "mamba_cache_mode": ("mamba_cache_mode", ("--mamba-cache-mode",)),
}
INTS = {"tp", "pp", "max_num_batched_tokens", "block_size", "max_model_len", "num_gpu_blocks_override"}
# speculative decoding as the engine-config line, a pasted command or the non-default args name it (not None)
SPECULATIVE = re.compile(r"speculative_config=(SpeculativeConfig\([^)]{0,400}\))|--speculative[-_]config[= ]+'?(\{[^}]{0,400}\})")
# the line of vLLM's "KV cache size" logger call in kv_cache_utils.py -> the release it was read in
# (docs/vllm-releases.md section 6, fingerprints read in each wheel): dates a log without a banner
SIZE_LINE = re.compile(r"kv_cache_utils\.py:(\d+)\][^\n]*KV cache size:")
FINGERPRINTS = {
    537: "0.8.0", 578: "0.8.3", 634: "0.8.4", 637: "0.9.0", 715: "0.9.1", 870: "0.9.1", 716: "0.9.2", 873: "0.9.2",
    833: "0.10.0", 997: "0.10.0", 849: "0.10.1.1", 1013: "0.10.1.1", 864: "0.10.2", 1028: "0.10.2", 1087: "0.11.0",
    1229: "0.11.1", 1286: "0.12.0", 1291: "0.13.0", 1305: "0.14.0", 1307: "0.15.1", 1314: "0.17.0", 1316: "0.18.0",
    1319: "0.19.0", 1711: "0.20.0", 1708: "0.20.1", 1710: "0.21.0", 1733: "0.22.0", 1744: "0.23.0", 2146: "0.24.0",
    2177: "0.26.0", 2235: "0.27.0", 1869: "0.28.0", 2032: "0.29.0", 2395: "0.30.0", 2464: "0.31.0", 2327: "0.32.0",
    1147: "0.33.0",
}
# the "Available KV cache memory" call in gpu_worker.py (same section); 298 is 0.10.2 and 0.11.0
# (same rules but for cross-attention), 440 all of 0.20.x (whose token figures differ): 440 left out
AVAILABLE_LINE = re.compile(r"gpu_worker\.py:(\d+)\][^\n]*Available KV cache memory")
WORKER_FINGERPRINTS = {
    227: "0.9.1", 232: "0.9.2", 255: "0.10.0", 276: "0.10.1.1", 298: "0.11.0", 359: "0.12.0", 375: "0.13.0",
    358: "0.14.0", 356: "0.15.1", 373: "0.16.0", 424: "0.17.0", 456: "0.18.0", 436: "0.19.0", 462: "0.21.0",
    466: "0.22.0", 480: "0.23.0", 508: "0.24.0", 538: "0.25.0", 560: "0.26.0", 563: "0.27.0", 578: "0.28.0",
    625: "0.29.0", 640: "0.30.0", 692: "0.31.0", 759: "0.32.0", 772: "0.33.0",
}
USING_LEN = re.compile(r"Using max model len (\d{1,24})\b")
PARTITION = re.compile(r"VLLM_PP_LAYER_PARTITION=['\"]?(\d[\d,]{0,200})")
_RUN_START = re.compile(r"non-default args:|vLLM API server version|LLM engine \(v|^\s*\$?\s*vllm serve\b")


@dataclass
class Pair:
    """One "GPU KV cache size" / "Maximum concurrency" pair as logged."""

    tokens: int | None = None
    concurrency: float | None = None
    concurrency_text: str | None = None
    max_model_len: int | None = None


@dataclass
class VllmLog:
    """One run of a log."""

    available_gib: list[str] = field(default_factory=list)  # as printed, one per line
    pairs: list[Pair] = field(default_factory=list)
    gpu_blocks: int | None = None
    one_line: bool = False
    version: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # tp, pp, kv_dtype, ... as the log names them
    pp_layers: str | None = None
    does_not_fit: bool = False
    no_memory: bool = False
    failed: bool = False  # "EngineCore failed to start" (the reason may be cut from the excerpt)
    fit_max_model_len: int | None = None
    needed_gib: str | None = None
    error_memory_gib: str | None = None
    fit_unit: str | None = None
    fingerprint: int | None = None  # kv_cache_utils.py line of the "KV cache size" logger call
    worker_fingerprint: int | None = None  # gpu_worker.py line of the "Available KV cache memory" call
    estimated_max_model_len: int | None = None
    lines: list[str] = field(default_factory=list)

    # the first pair, as older callers read it
    @property
    def tokens(self) -> int | None:
        return next((p.tokens for p in self.pairs if p.tokens is not None), None)

    @property
    def concurrency(self) -> float | None:
        return next((p.concurrency for p in self.pairs if p.concurrency is not None), None)

    @property
    def max_model_len(self) -> int | None:
        lens = [p.max_model_len for p in self.pairs if p.max_model_len is not None]
        return lens[0] if lens else self.fit_max_model_len

    @property
    def tp(self) -> int | None:
        return self.settings.get("tp")

    @property
    def pp(self) -> int | None:
        return self.settings.get("pp")

    @property
    def kv_cache_dtype(self) -> str | None:
        return self.settings.get("kv_dtype")

    @property
    def has_figures(self) -> bool:
        return bool(self.available_gib or self.pairs or self.gpu_blocks is not None or self.does_not_fit)

    @property
    def format(self) -> str:
        if self.one_line:
            return "V1, one capacity line (0.28.0 and later)"
        if self.pairs:
            return "V1, two capacity lines (0.8.0-0.27.x)"
        if self.gpu_blocks is not None:
            return "# GPU blocks / num_gpu_blocks"
        if self.does_not_fit:
            return "V1 start-up refusal"
        return "unknown"


def _unwrap(text: str) -> list[str]:
    """Lines with hard wraps undone where a logged figure was split (``num_gpu_blocks is\\n: 74510``)."""
    text = re.sub(r"num_gpu_blocks is\s*\n\s*:", "num_gpu_blocks is:", text)
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip().lstrip("▎> ").rstrip()
        if out and _continues(out[-1], line):
            out[-1] += (" " if out[-1].endswith(",") else "") + line.strip()
        else:
            out.append(line)
    return out


def _continues(prev: str, line: str) -> bool:
    """A wrapped sentence of vLLM's refusal, or an args dict left open."""
    if "non-default args: {" in prev and prev.count("{") > prev.count("}"):
        return True
    return bool(re.search(r"max seq len \(\d+\),$|KV cache memory \([\d.]+ GiB\)\.$", prev)) and not _RUN_START.search(line)


def _args_dict(line: str) -> dict[str, Any]:
    m = ARGS.search(line)
    if not m:
        return {}
    text = m.group(1)
    text = text[: text.rfind("}") + 1] if "}" in text else text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, dict):
        return value
    found: dict[str, Any] = {}  # a cut dict: take the keys that are whole
    for key, raw in re.findall(r"'(\w+)':\s*('[^']*'|[\w.]+)", text):
        try:
            found[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            found[key] = raw
    return found


def _human_int(text: str) -> int | None:
    """vLLM's human-readable ints: 32k = 32000, 32K = 32768."""
    m = re.fullmatch(r"(\d+)([kKmM]?)", str(text).strip())
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2)
    return n * {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 1 << 20}[unit]


# the CUDA-graph profiling's minimal KV cache (0.18+) overrides 0 blocks with max_cudagraph_capture_size: vLLM's own,
# not the user's setting (vllm==0.20.0: v1/worker/gpu_model_runner.py:5871-5879, kv_cache_utils.may_override_num_blocks)
PROFILING_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=0 with num_gpu_blocks_override")


def _settings(line: str, found: dict[str, Any]) -> None:
    args = _args_dict(line)
    for name, (key, flags) in KEYS.items():
        if name == "num_gpu_blocks_override" and PROFILING_OVERRIDE.search(line):
            continue
        value: Any = None
        if key in args:
            value = args[key]
        else:
            # the engine-config line prints the model dtype as torch.bfloat16
            torch_prefix = r"(?:torch\.)?" if key == "dtype" else ""
            m = re.search(r"\b" + key + r"['\"]?\s*[=:]\s*['\"]?" + torch_prefix + r"([A-Za-z0-9_]+(?:\.\d+)?)", line)
            # a size in bytes is not the setting (0.27's weight prefetch logs "block_size=16777216 bytes")
            if m and not line[m.end():].lstrip().startswith("bytes"):
                value = m.group(1)
            for flag in flags:
                f = re.search(r"(?:^|\s)" + re.escape(flag) + r"(?:\s+|=)([A-Za-z0-9_]+(?:\.\d+)?)", line)
                if f:
                    value = f.group(1)
        if value is None or name in found:
            continue
        if name in INTS:
            value = _human_int(str(value))
        elif name == "enable_prefix_caching":
            value = {"True": True, "False": False}.get(str(value))
        elif name == "mamba_cache_mode":
            value = str(value) if str(value) in ("none", "align", "all") else None
        elif name == "gpu_memory_utilization":
            try:
                value = float(value)
            except ValueError:
                value = None
        if value is not None and value != "None":
            found[name] = value
    if "speculative" not in found:
        spec: Any = args.get("speculative_config")
        m = SPECULATIVE.search(line) if spec is None else None
        spec = (m.group(1) or m.group(2)) if m else spec
        if spec:
            found["speculative"] = str(spec)[:1000]  # bounded; a draft's local path can be long


def _line(log: VllmLog, line: str) -> bool:
    """Read one line into the run; True when it holds a figure."""
    hit = False
    for rx in AVAILABLE:
        m = rx.search(line)
        if m:
            log.available_gib.append(m.group(1))
            hit = True
    t, c = TOKENS.search(line), CONCURRENCY.search(line)
    if t or c:
        pair = log.pairs[-1] if (c and not t and log.pairs and log.pairs[-1].concurrency is None) else Pair()
        if pair is not (log.pairs[-1] if log.pairs else None):
            log.pairs.append(pair)
        if t:
            pair.tokens = int(t.group(1).replace(",", ""))
        if c:
            pair.max_model_len = int(c.group(1).replace(",", ""))
            pair.concurrency_text = c.group(2)
            pair.concurrency = float(c.group(2))
            log.one_line = log.one_line or bool(t)
        hit = True
    for rx in BLOCKS:
        b = rx.search(line)
        if b and log.gpu_blocks is None:
            log.gpu_blocks = int(b.group(1).replace(",", ""))
            hit = True
    hit = _errors(log, line) or hit
    if log.version is None:
        for rx in VERSION:
            v = rx.search(line)
            if v:
                log.version = v.group(1)
                break
    _settings(line, log.settings)
    fp = SIZE_LINE.search(line)
    if fp and log.fingerprint is None:
        log.fingerprint = int(fp.group(1))
    wf = AVAILABLE_LINE.search(line)
    if wf and log.worker_fingerprint is None:
        log.worker_fingerprint = int(wf.group(1))
    u = USING_LEN.search(line)
    if u:
        log.settings.setdefault("max_model_len", int(u.group(1)))
    p = PARTITION.search(line)
    if p and log.pp_layers is None:
        log.pp_layers = p.group(1)
    return hit


def _errors(log: VllmLog, line: str) -> bool:
    f = FIT.search(line)
    if f:
        log.does_not_fit = True
        log.fit_max_model_len = int(f.group(1))
        log.needed_gib, log.fit_unit, log.error_memory_gib = f.group(2), f.group(3), f.group(4)
    e = ESTIMATE.search(line)
    if e:
        log.does_not_fit = True
        log.estimated_max_model_len = int(e.group(1))
    log.failed = log.failed or "failed to start" in line
    no_memory = bool(NO_MEMORY.search(line))
    log.no_memory = log.no_memory or no_memory
    refused = no_memory or bool(V0_NO_FIT.search(line) or SERVE.search(line))
    log.does_not_fit = log.does_not_fit or refused or bool(f or e)
    return bool(f or e or refused)


def parse_runs(text: str) -> list[VllmLog]:
    """Every run in the text, in order (a new run starts at a banner, args or command line
    that follows capacity figures)."""
    runs = [VllmLog()]
    for line in _unwrap(text):
        if _RUN_START.search(line) and runs[-1].has_figures:
            runs.append(VllmLog())
        if _line(runs[-1], line):
            runs[-1].lines.append(line.strip())
    kept: list[VllmLog] = []
    for run in runs:
        if run.has_figures or not kept:
            kept.append(run)
        else:  # settings logged after the figures (an excerpt out of order): they belong to the run before
            _merge_settings(kept[-1], run)
    if len(kept) > 1 and not kept[0].has_figures:
        _merge_settings(kept[1], kept.pop(0))
    return kept


def _merge_settings(into: VllmLog, other: VllmLog) -> None:
    for key, value in other.settings.items():
        into.settings.setdefault(key, value)
    into.version = into.version or other.version
    into.pp_layers = into.pp_layers or other.pp_layers


def parse_log(text: str) -> VllmLog:
    """The first run with figures (or an empty run)."""
    return parse_runs(text)[0]


_SPEC_FIELD = re.compile(r"\b(method|model|num_spec_tokens|num_speculative_tokens)=(?:'([^']{0,200})'|(\d{1,3}))")


def speculative_json(text: str) -> str | None:
    """The log's speculative config (the engine line's ``SpeculativeConfig(method='mtp', model='m',
    num_spec_tokens=3)``, or the non-default args' dict) as the JSON --speculative-config takes; None when it
    names no method or token count kvcalc can read. The text is data: read with json / ast.literal_eval only."""
    import json

    out: dict[str, object] = {}
    if text.startswith("SpeculativeConfig("):
        for key, word, number in _SPEC_FIELD.findall(text):
            out["num_speculative_tokens" if key.startswith("num_") else key] = int(number) if number else word
    else:
        import ast

        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
        if not isinstance(value, dict):
            return None
        out = {k: value[k] for k in ("method", "model", "num_speculative_tokens") if k in value}
    if "method" not in out and "model" not in out:
        return None
    method = out.get("method")
    if isinstance(method, str) and (method == "mtp" or method.endswith("_mtp")):
        out.pop("model", None)  # the target checkpoint itself
    return json.dumps(out, sort_keys=True)
