"""What the machine offers a probe: torch, transformers, a device, free memory, resident memory.

Everything that cannot be had raises ``KvcalcError(..., exit_code=EXIT_CANNOT_RUN)`` with
the reason and what would make it work.
"""

from __future__ import annotations

import os
from typing import Any

from kvcalc.errors import EXIT_CANNOT_RUN, KvcalcError

INSTALL = "pip install 'kvcalc[probe]'"
MIN_TRANSFORMERS = (5, 0)


def cannot(message: str) -> KvcalcError:
    return KvcalcError(message, exit_code=EXIT_CANNOT_RUN)


def need_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise cannot(f"the probe needs torch, which is not installed here ({INSTALL})") from None
    return torch


def version_tuple(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
        if not part.isdigit():
            break
    return tuple(out)


def need_transformers() -> Any:
    need_torch()
    try:
        import transformers
    except ImportError:
        raise cannot(f"--model-cache needs transformers, which is not installed here ({INSTALL})") from None
    if version_tuple(transformers.__version__) < MIN_TRANSFORMERS:
        raise cannot(
            f"--model-cache knows the cache layout of transformers >= 5.0 (DynamicCache layers); "
            f"installed: {transformers.__version__} ({INSTALL})"
        )
    return transformers


def resolve_device(name: str) -> str:
    """cpu | cuda | cuda:N | auto (cuda when torch sees a GPU, else cpu)."""
    torch = need_torch()
    key = (name or "auto").strip().lower()
    if key == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if key == "cpu":
        return "cpu"
    if key == "cuda" or key.startswith("cuda:"):
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if not torch.backends.cuda.is_built() else "no CUDA device is visible"
            raise cannot(f"--device {name}: {why} (torch {torch.__version__}); use --device cpu")
        if ":" in key:
            idx = key.split(":", 1)[1]
            if not idx.isdigit() or int(idx) >= torch.cuda.device_count():
                raise KvcalcError(f"--device {name}: no such CUDA device; {torch.cuda.device_count()} visible")
        return key
    raise KvcalcError(f"--device {name!r} is not known; valid: auto, cpu, cuda, cuda:N")


# ---------------------------------------------------------------- CPU memory


def meminfo_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no /proc)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_anon() -> int | None:
    """Resident anonymous memory of this process (RssAnon of /proc/self/status), bytes.

    Anonymous only: shared libraries that torch pages in on first use are file-backed and
    would otherwise show up in a plain RSS delta."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 4096


def thp_mode() -> str:
    """Transparent huge pages setting: always | madvise | never | unknown."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            text = f.read()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unknown"


def pin_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold (M_MMAP_THRESHOLD = -3) at its initial 128 KiB.

    glibc raises the threshold up to 32 MiB after large frees, after which a new
    allocation may reuse heap pages that are already resident and the resident-memory
    delta undercounts it. With the threshold pinned every allocation of 128 KiB or more is
    a fresh anonymous mapping whose pages become resident exactly when touched. Returns
    False where this is not glibc."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(-3, threshold))
