"""Per-layer KV cache specs, the way vLLM's ``vllm/v1/kv_cache_interface.py`` models them.

Every spec is a frozen record describing what ONE layer on ONE rank stores, and it
answers the same questions, so no capacity code special-cases a layer kind:

- ``bytes_per_token``: bytes one more cached token costs in this layer (0 for state layers)
- ``page_size_bytes``: bytes of one block of this layer (vLLM's "page")
- ``max_memory_usage_bytes(max_model_len, in_flight)``: what one request of
  ``max_model_len`` tokens may hold in this layer (vLLM's rule for the spec kind)
- ``held_tokens(t)`` / ``held_blocks(t)``: what a request with ``t`` cached positions
  holds at that moment (effective measure and block-rounded measure)
- ``effective_bytes(t)`` / ``block_rounded_bytes(t)``: the same in bytes, state included
- ``decoder_bytes_per_token``: ``bytes_per_token`` of the decoder's own cache (0 for
  cross-attention, whose positions are the encoder's): "bytes per token" of a model
- ``state_bytes``: bytes held per request whatever its length (mamba state)

``CacheSpec`` is that set of answers as a ``typing.Protocol``. Integers in bytes
everywhere. No I/O.
"""

from __future__ import annotations

from typing import Protocol

from kvcalc.core.record import cached_property, record, replace


class CacheSpec(Protocol):
    """What every per-layer cache spec answers (see the module docstring)."""

    @property
    def kind(self) -> str: ...

    @property
    def block_size(self) -> int: ...

    @property
    def bytes_per_token(self) -> int: ...

    @property
    def decoder_bytes_per_token(self) -> int: ...

    @property
    def page_size_bytes(self) -> int: ...

    @property
    def real_page_size_bytes(self) -> int: ...

    @property
    def state_bytes(self) -> int: ...

    @property
    def type_key(self) -> tuple: ...

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int: ...

    def held_tokens(self, tokens: int) -> int: ...

    def held_blocks(self, tokens: int) -> int: ...

    def effective_bytes(self, tokens: int) -> int: ...

    def block_rounded_bytes(self, tokens: int) -> int: ...

    def with_block_size(self, block_size: int) -> CacheSpec: ...

    def with_padding(self, page_size_padded: int) -> CacheSpec: ...


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


@record
class AttentionSpec:
    """Dense K/V attention over every cached token (vLLM ``FullAttentionSpec``)."""

    block_size: int
    num_kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: int
    # bytes stored per (token, kv head) besides K and V: inline fp32 scales of the
    # *_per_token_head cache dtypes (2 x 4 B). Per-tensor fp8 scales are per-layer
    # scalars and add nothing here.
    scale_bytes_per_head: int = 0
    # packed formats whose bytes per token are fixed by the backend (fp8_ds_mla: 656)
    token_bytes_override: int = 0
    page_size_padded: int = 0

    kind = "full"
    state_bytes = 0  # bytes held per request regardless of its length: none for attention

    @cached_property
    def bytes_per_token(self) -> int:
        if self.token_bytes_override:
            return self.token_bytes_override
        per_head = (self.head_size + self.head_size_v) * self.dtype_bytes + self.scale_bytes_per_head
        return self.num_kv_heads * per_head

    @property
    def decoder_bytes_per_token(self) -> int:
        return self.bytes_per_token

    @cached_property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @cached_property
    def page_size_bytes(self) -> int:
        return self.page_size_padded or self.real_page_size_bytes

    def effective_bytes(self, tokens: int) -> int:
        return self.held_tokens(tokens) * self.bytes_per_token

    def block_rounded_bytes(self, tokens: int) -> int:
        return self.held_blocks(tokens) * self.real_page_size_bytes

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes

    def held_tokens(self, tokens: int) -> int:
        return tokens

    def held_blocks(self, tokens: int) -> int:
        return cdiv(tokens, self.block_size)

    def with_block_size(self, block_size: int) -> AttentionSpec:
        return replace(self, block_size=block_size)

    def with_padding(self, page_size_padded: int) -> AttentionSpec:
        return replace(self, page_size_padded=page_size_padded)

    @property
    def type_key(self) -> tuple:
        """Specs with equal keys need the same number of blocks for every request."""
        return (self.kind, self.block_size)


@record
class MLASpec(AttentionSpec):
    """Multi-head latent attention: one compressed latent per token per layer
    (``kv_lora_rank + qk_rope_head_dim`` elements, no separate V, no x2), the same
    on every TP rank (vLLM ``MLAAttentionSpec``)."""

    kind = "mla"


@record
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention (vLLM ``SlidingWindowSpec``)."""

    window: int = 0
    extra_retained_tokens: int = 0

    kind = "sliding"

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        # Window W, W-1 earlier tokens plus the tokens in flight; +1 block because the
        # window need not start on a block boundary. Example: block 4, window 4, one
        # token in flight -> min(3+1, L)=4 tokens -> 1 block, +1 = 2 blocks.
        tokens = min(self.window - 1 + self.extra_retained_tokens + in_flight_tokens, max_model_len)
        return (cdiv(tokens, self.block_size) + 1) * self.page_size_bytes

    def held_tokens(self, tokens: int) -> int:
        # the positions the newest query reads: the last `window` ones
        return min(tokens, self.window)

    def held_blocks(self, tokens: int) -> int:
        # blocks wholly before the window are returned to the pool (vLLM
        # SlidingWindowManager.remove_skipped_blocks); the first kept block may be
        # partly outside the window. Example: block 4, window 4, 10 tokens: the
        # window is positions 6..9, blocks 1 (4..7) and 2 (8..9) -> 2 blocks.
        first = max(0, tokens - self.window) // self.block_size
        return cdiv(tokens, self.block_size) - first

    @property
    def type_key(self) -> tuple:
        return (self.kind, self.block_size, self.window)


@record
class ChunkedLocalSpec(AttentionSpec):
    """Chunked local attention, e.g. Llama 4 (vLLM ``ChunkedLocalAttentionSpec``)."""

    chunk: int = 0

    kind = "chunked"

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        tokens = min(self.chunk + in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) * self.page_size_bytes

    def _chunk_start(self, tokens: int) -> int:
        return ((tokens - 1) // self.chunk) * self.chunk if tokens else 0

    def held_tokens(self, tokens: int) -> int:
        return tokens - self._chunk_start(tokens)

    def held_blocks(self, tokens: int) -> int:
        return cdiv(tokens, self.block_size) - self._chunk_start(tokens) // self.block_size

    @property
    def type_key(self) -> tuple:
        return (self.kind, self.block_size, self.chunk)


@record
class CrossAttentionSpec(AttentionSpec):
    """Cross-attention of an encoder-decoder model: K/V of the encoder output, a fixed
    number of positions per request whatever the decoder length (vLLM
    ``CrossAttentionSpec``)."""

    encoder_tokens: int = 0
    # what vLLM's planner reserves per request: max_num_encoder_input_tokens
    # (= max_num_batched_tokens) from 0.11.0 (vllm==0.11.0: vllm/v1/kv_cache_interface.py:256-262;
    # vllm==0.33.0: :1224-1228); 0: the encoder length (vllm==0.10.2: :230-235)
    planned_tokens: int = 0

    kind = "cross"

    @property
    def decoder_bytes_per_token(self) -> int:
        return 0  # the encoder's positions, not the decoder's tokens

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        return cdiv(self.planned_tokens or self.encoder_tokens, self.block_size) * self.page_size_bytes

    def held_tokens(self, tokens: int) -> int:
        return self.encoder_tokens if tokens else 0

    def held_blocks(self, tokens: int) -> int:
        return cdiv(self.encoder_tokens, self.block_size) if tokens else 0

    @property
    def type_key(self) -> tuple:
        return (self.kind, self.block_size, self.encoder_tokens)


@record
class StateTensor:
    """One recurrent-state tensor of a mamba / linear-attention layer on one rank."""

    shape: tuple[int, ...]
    dtype_bytes: int

    @property
    def nbytes(self) -> int:
        n = self.dtype_bytes
        for d in self.shape:
            n *= d
        return n


@record
class MambaSpec:
    """Per-request recurrent state (Mamba, GDN, linear attention): the state pages a request
    holds, as vLLM's ``MambaSpec.max_memory_usage_bytes`` counts them for its
    ``mamba_cache_mode`` (kvcalc.core.mamba_cache): 'none' one page and 'align' 2 (+ prefill-
    checkpoint pages) whatever the request's length, 'all' one per block of its context; each
    plus one per speculative block ('all': from 0.28)."""

    block_size: int
    tensors: tuple[StateTensor, ...]
    page_size_padded: int = 0
    num_speculative_blocks: int = 0
    cache_mode: str = "none"
    checkpoint_blocks: int = 0
    all_adds_speculative: bool = False

    kind = "mamba"
    bytes_per_token = 0
    decoder_bytes_per_token = 0

    @cached_property
    def real_page_size_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @cached_property
    def page_size_bytes(self) -> int:
        return self.page_size_padded or self.real_page_size_bytes

    @cached_property
    def state_bytes(self) -> int:
        return self.real_page_size_bytes * (1 + self.num_speculative_blocks)

    def pages(self, tokens: int) -> int:
        """State pages one request of ``tokens`` holds."""
        if self.cache_mode == "align":
            return 2 + self.num_speculative_blocks + self.checkpoint_blocks
        if self.cache_mode == "all":
            return cdiv(tokens, self.block_size) + (self.num_speculative_blocks if self.all_adds_speculative else 0)
        return 1 + self.num_speculative_blocks

    def effective_bytes(self, tokens: int) -> int:
        return self.state_bytes if tokens else 0

    def block_rounded_bytes(self, tokens: int) -> int:
        if self.cache_mode == "none":
            return self.state_bytes if tokens else 0
        return self.real_page_size_bytes * self.pages(tokens) if tokens else 0

    def max_memory_usage_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        return self.page_size_bytes * self.pages(max_model_len)

    def held_tokens(self, tokens: int) -> int:
        return 0

    def held_blocks(self, tokens: int) -> int:
        return self.pages(tokens) if tokens else 0

    def with_block_size(self, block_size: int) -> MambaSpec:
        return replace(self, block_size=block_size)

    def with_padding(self, page_size_padded: int) -> MambaSpec:
        return replace(self, page_size_padded=page_size_padded)

    @property
    def type_key(self) -> tuple:
        return (self.kind, self.num_speculative_blocks, self.cache_mode, self.checkpoint_blocks)

