"""How many recurrent-state pages one request of a hybrid (attention + Mamba / linear attention) model holds in
vLLM, release by release: vLLM's prefix caching for hybrids and its ``mamba_cache_mode``.

Without prefix caching a request holds one state page ('none'); with it, 2 ('align': the running state and the
last block-aligned one) or one per block of the context ('all'), and from 0.32 'align' adds a prefill-checkpoint
page for the mixers that export one. 'all' also changes the attention block size (a multiple of the Mamba kernel's
chunk). Every boundary below is read from the wheels (docs/vllm-releases.md section 7 cites both sides of each):

- prefix caching's default for hybrids: off up to 0.27.x (0.12-0.25: ``ModelConfig.is_prefix_caching_supported``
  is False for attn_type 'hybrid', vllm==0.12.0: config/model.py:1839; 0.26-0.27: ``and not
  model_config.is_hybrid``, vllm==0.27.1: engine/arg_utils.py:2604-2606), on from 0.28.0 (vllm==0.28.0:
  config/model.py:2071-2072, arg_utils's default is is_prefix_caching_supported);
- up to 0.11.0 vLLM turns it off for every hybrid even when asked (vllm==0.11.0: models/config.py:294-297);
- 0.11.1-0.14: kept only for model classes declaring SupportsMambaPrefixCaching, whose MambaSpec block is then the
  attention block (cdiv(L, block) pages, the block a multiple of the chunk); off for the others
  (vllm==0.11.1: models/config.py MambaModelConfig; vllm==0.14.0: :332-352, kv_cache_interface.py:292-294);
- 0.15-0.27: ``mamba_cache_mode`` 'all' for those classes, 'align' for the others (vllm==0.15.1:
  models/config.py:332-352); 0.28-0.31: 'align' for every hybrid, 'all' only when asked (vllm==0.28.0:
  models/config.py MambaModelConfig); 0.32+: 'all' is gone (vllm==0.32.0: config/cache.py:63);
- prefill-checkpoint pages ('align'): Mamba-2 mixers from 0.32.0 (vllm==0.32.0: layers/mamba/mamba_mixer2.py:1107),
  gated delta nets in 0.33.0 when FlashInfer runs their prefill, which 0.33.0 picks on Hopper
  (vllm==0.33.0: layers/mamba/gdn/qwen_gdn_linear_attn.py:148-166, :691-699, :739-760), with a 64-token
  alignment the attention block size then keeps (gdn_attn.py:34; platforms/interface.py:1088-1093).

Pure: stdlib only.
"""

from __future__ import annotations

from kvcalc.core.record import record

Release = tuple[int, ...]

NONE, ALIGN, ALL = "none", "align", "all"
MODES = (NONE, ALIGN, ALL)

# the model types among kvcalc's families whose vLLM class declares SupportsMambaPrefixCaching (0.11.1-0.31:
# granitemoehybrid.py, jamba.py; Qwen3-Next and Qwen3.5 do not)
SUPPORTS_ALL = frozenset({"granitemoehybrid", "jamba", "nemotron_h"})  # nemotron_h.py from 0.11.1 as granite
# the state mixer of each family kvcalc reads: gated delta net, Mamba-2, Mamba-1
GDN, MAMBA2, MAMBA1 = "gdn", "mamba2", "mamba1"
MIXERS = {"granitemoehybrid": MAMBA2, "jamba": MAMBA1, "nemotron_h": MAMBA2}
# FlashInfer's gated-delta-net prefill checkpoints land on multiples of 64 tokens (vllm==0.33.0: gdn_attn.py:34)
GDN_CHECKPOINT_ALIGNMENT = 64


@record
class MambaCacheLine:
    """How one range of releases (from ``first`` to the next line's) holds recurrent state with prefix caching."""

    first: Release
    default_on: bool  # prefix caching on by default for hybrids
    policy: str  # "off" (always off), "supported" (kept only for SupportsMambaPrefixCaching), "modes"
    default_supported: str  # the mode a SupportsMambaPrefixCaching model gets ("all" or "align")
    modes: tuple[str, ...]  # the --mamba-cache-mode values the release accepts
    all_adds_speculative: bool  # 'all' pages + num_speculative_blocks (0.22+)
    checkpoint_mixers: frozenset[str]  # mixers with one prefill-checkpoint page in 'align'
    # the pool's sizing counts a request's K speculative state pages ('none' 1 + K, 'align' 2 + K; 0.15+): before,
    # MambaSpec.max_memory_usage_bytes was one page (or one per block) whatever K (vllm==0.11.0:
    # v1/kv_cache_interface.py:235-239; vllm==0.14.0: :292-294; vllm==0.15.1: :293-300)
    counts_speculative: bool = True


LINES: tuple[MambaCacheLine, ...] = (  # newest first
    MambaCacheLine((0, 33, 0), True, "modes", ALIGN, (NONE, ALIGN), True, frozenset({MAMBA2, GDN})),
    MambaCacheLine((0, 32, 0), True, "modes", ALIGN, (NONE, ALIGN), True, frozenset({MAMBA2})),
    MambaCacheLine((0, 28, 0), True, "modes", ALIGN, MODES, True, frozenset()),
    # 'all' counts + K from 0.22.0 (vllm==0.22.0: v1/kv_cache_interface.py:582-591; vllm==0.21.0: :562-569 not)
    MambaCacheLine((0, 22, 0), False, "modes", ALL, MODES, True, frozenset()),
    MambaCacheLine((0, 15, 0), False, "modes", ALL, MODES, False, frozenset()),
    MambaCacheLine((0, 11, 1), False, "supported", ALL, (), False, frozenset(), counts_speculative=False),
    MambaCacheLine((0, 0, 0), False, "off", NONE, (), False, frozenset(), counts_speculative=False),
)


def line_for(release: Release) -> MambaCacheLine:
    r = tuple(release) + (0,) * (4 - len(release))
    return next(x for x in LINES if r >= x.first + (0,) * (4 - len(x.first)))


@record
class MambaCache:
    """What vLLM does with one hybrid model's state under prefix caching."""

    prefix_caching: bool  # on after vLLM's own checks
    mode: str  # none | align | all (0.11.1-0.14 with prefix caching: 'all', as its pages count)
    checkpoint_blocks: int = 0  # extra pages a request holds in 'align'
    checkpoint_alignment: int = 1  # tokens the attention block size is a multiple of ('align')
    all_adds_speculative: bool = False
    why: str = ""  # one clause: how vLLM came to this mode


def mamba_cache(
    release: Release, model_type: str, mixer: str, *, prefix_caching: bool | None, mode: str | None,
    flashinfer_gdn: bool,
) -> MambaCache:
    """vLLM's state mode for a hybrid model: ``prefix_caching`` None = the release's default, ``mode`` None =
    vLLM's pick. ``flashinfer_gdn``: vLLM runs the gated-delta-net prefill with FlashInfer (Hopper, 0.33).
    A ``mode`` the release does not accept raises ValueError whose argument is the tuple of the modes it accepts
    (empty before 0.15, which has no mamba_cache_mode)."""
    line = line_for(release)
    asked = prefix_caching if prefix_caching is not None else line.default_on
    if mode is not None and mode not in line.modes:
        raise ValueError(line.modes)
    if line.policy == "off" or not asked or mode == NONE:
        if line.policy == "off" and asked:
            return MambaCache(False, NONE, why="vLLM turns prefix caching off for every hybrid model before 0.11.1")
        default = "prefix caching off" + ("" if prefix_caching is not None or mode == NONE else " (the default for hybrids)")
        return MambaCache(False, NONE, why=default)
    supported = model_type in SUPPORTS_ALL
    if line.policy == "supported":
        if not supported:
            return MambaCache(False, NONE, why="vLLM turns prefix caching off for this model (no SupportsMambaPrefixCaching)")
        return MambaCache(True, ALL, why="prefix caching on: one state page per block of the context")
    picked = mode or (line.default_supported if supported else ALIGN)
    why = f"prefix caching on, mamba_cache_mode '{picked}'" + ("" if mode else " (vLLM's pick)")
    if picked == ALL and not supported:
        picked, why = ALIGN, "prefix caching on, mamba_cache_mode 'align' (vLLM falls back from 'all': no SupportsMambaPrefixCaching)"
    ckpt, alignment = 0, 1
    if picked == ALIGN and mixer in line.checkpoint_mixers:
        if mixer == MAMBA2:
            ckpt = 1
        elif mixer == GDN and flashinfer_gdn:
            ckpt, alignment = 1, GDN_CHECKPOINT_ALIGNMENT
    return MambaCache(True, picked, ckpt, alignment, line.all_adds_speculative and picked == ALL, why)


def mixer_of(model_type: str) -> str:
    return MIXERS.get(model_type, GDN)


def chunk_size(arch: dict) -> int:
    """vLLM ``ModelConfig.get_mamba_chunk_size``: the config's mamba_chunk_size, else chunk_size, else 2048
    (vllm==0.15.1: config/model.py:1267-1282)."""
    for key in ("mamba_chunk_size", "chunk_size"):
        value = arch.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 2048
