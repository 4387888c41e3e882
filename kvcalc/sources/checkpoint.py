"""Exact weight bytes of a local checkpoint folder from its safetensors headers alone.

A ``.safetensors`` file starts with an 8-byte little-endian header length and a JSON header
(tensor name -> dtype, shape, data offsets). Only those bytes are read, never a tensor: the
header length is bounded, every shape must be non-negative integers and every tensor's
offsets must lie inside the file. The facts have the shape of the Hub's
(``kvcalc.sources.hub.checkpoint_facts``), so the budget reads both alike.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace

from kvcalc.errors import ConfigError
from kvcalc.sources.hub import checkpoint_facts

MAX_HEADER = 100 << 20  # safetensors itself refuses headers over 100 MB
MAX_FILES = 4096
MAX_DIM = 1 << 40


def read_header(path: Path) -> dict:
    """The JSON header of one safetensors file (the header's bytes only)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ConfigError(f"{path}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or n + 8 > size:
            raise ConfigError(f"{path}: safetensors header length {n} is out of bounds (file {size} bytes)")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: the safetensors header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: the safetensors header is not a JSON object")
    return _tensors(path, header, size - 8 - n)


def _tensors(path: Path, header: dict, data_size: int) -> dict:
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict):
            raise ConfigError(f"{path}: tensor {name!r} is not described by an object")
        shape, dtype, offsets = t.get("shape"), t.get("dtype"), t.get("data_offsets")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape):
            raise ConfigError(f"{path}: tensor {name!r} has an invalid shape {shape!r}")
        ok = isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        if not ok or not isinstance(offsets, list) or not (0 <= offsets[0] <= offsets[1] <= data_size):
            raise ConfigError(f"{path}: tensor {name!r} has data offsets {offsets!r} outside the file")
        if not isinstance(dtype, str):
            raise ConfigError(f"{path}: tensor {name!r} has no dtype")
        tensors[name] = SimpleNamespace(dtype=dtype, shape=shape, data_offsets=offsets)
    return tensors


def folder_facts(folder: Path) -> dict | None:
    """Parameters and bytes of every ``*.safetensors`` file in ``folder``; None when it has none."""
    files = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if not files:
        return None
    if len(files) > MAX_FILES:
        raise ConfigError(f"{folder}: {len(files)} safetensors files; kvcalc reads at most {MAX_FILES}")
    meta = {p.name: SimpleNamespace(tensors=read_header(p)) for p in files}
    return checkpoint_facts(meta, f"safetensors headers of {folder} ({len(files)} files)")
