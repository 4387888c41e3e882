"""``--gpu auto``: the local GPU's name and total memory as CUDA reports it.

torch (when installed and a GPU is visible): ``torch.cuda.mem_get_info()[1]``, the figure
vLLM sizes from. Otherwise ``nvidia-smi`` (its total, a little above CUDA's). No GPU: a
one-line error (exit 2). Reads only GPU 0, the device vLLM's first worker takes.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from kvcalc.errors import KvcalcError, named

MIB = 1 << 20


def _from_torch() -> tuple[str, int, str] | None:
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch absent or broken: fall back to nvidia-smi
        return None
    try:
        if not torch.cuda.is_available():
            return None
        total = int(torch.cuda.mem_get_info(0)[1])
        return torch.cuda.get_device_name(0), total, "local GPU 0: torch.cuda.mem_get_info() total (what vLLM reads)"
    except Exception:  # noqa: BLE001 - a driver error is "no GPU" here
        return None


def _from_nvidia_smi() -> tuple[str, int, str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(  # noqa: S603 - fixed arguments, no shell
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    name, _, mib = line.rpartition(",")
    if not name or not mib.strip().isdigit():
        return None
    return name.strip(), int(mib.strip()) * MIB, "local GPU 0: nvidia-smi total (CUDA reports ~0.5 GiB less; install torch for the exact figure)"


@functools.cache
def detect() -> tuple[str, int, str]:
    """(name, total bytes, source) of the local GPU 0, read once per process (the budget and the state-page rules
    both ask; a failure is not cached)."""
    found = _from_torch() or _from_nvidia_smi()
    if found is None:
        raise KvcalcError(
            f"{named('gpu')} auto: no local GPU found (neither torch.cuda nor nvidia-smi sees one); "
            f"name one from kvcalc gpus or pass {named('gpu_memory')}",
            exit_code=2,
        )
    return found
