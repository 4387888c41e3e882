"""GPU catalog: total memory in bytes as the driver reports it, with the figure's source.

vLLM's budget is ``ceil(total x gpu_memory_utilization)`` where total is what CUDA reports
(``torch.cuda.mem_get_info``), a little under the marketed size. Pass ``--gpu-memory``
with the exact figure from ``nvidia-smi`` or vLLM's log when it matters.
"""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.errors import PlanError, named

MIB = 1 << 20
GIB = 1 << 30
_MODAL = "nvidia-smi total, listed in modal-labs/modal-client PR #2797"
_COMMON = "nvidia-smi total as commonly reported (not verified by kvcalc; pass --gpu-memory for yours)"


@record
class Gpu:
    name: str
    memory_bytes: int
    source: str
    aliases: tuple[str, ...] = ()


CATALOG: tuple[Gpu, ...] = (
    Gpu("H100-80GB", 81559 * MIB, _MODAL, ("H100", "H100-SXM", "H100-PCIE", "H100-80GB-HBM3")),
    Gpu("H100-NVL", 95830 * MIB, _COMMON, ("H100NVL",)),
    Gpu("H200", 143771 * MIB, _COMMON, ("H200-141GB", "H200-SXM")),
    Gpu("H20", 97871 * MIB, _COMMON, ()),
    Gpu("B200", 183359 * MIB, _COMMON, ("B200-180GB",)),
    Gpu("A100-80GB", 81920 * MIB, _MODAL, ("A100-SXM4-80GB", "A100-PCIE-80GB")),
    Gpu("A100-40GB", 40960 * MIB, _MODAL, ("A100", "A100-SXM4-40GB")),
    Gpu("L40S", 46068 * MIB, _MODAL, ()),
    Gpu("L4", 23034 * MIB, _MODAL, ()),
    Gpu("A10G", 23028 * MIB, f"{_MODAL} (A10; the A10G reports the same 24 GB class)", ("A10",)),
    Gpu("T4", 15360 * MIB, _MODAL, ()),
    Gpu("RTX-4090", 24564 * MIB, _COMMON, ("4090", "RTX4090")),
    Gpu("RTX-3090", 24576 * MIB, _COMMON, ("3090", "RTX3090")),
    Gpu("MI300X", 192 * GIB, "AMD specification: 192 GB HBM3 (binary GiB as ROCm reports it)", ()),
)


def _norm(name: str) -> str:
    return name.strip().upper().replace("_", "-").replace(" ", "-")


_BY_NAME: dict[str, Gpu] = {}


def find_gpu(name: str) -> Gpu:
    if not _BY_NAME:
        for gpu in reversed(CATALOG):  # the first entry wins when names collide
            _BY_NAME.update({_norm(a): gpu for a in gpu.aliases})
            _BY_NAME[_norm(gpu.name)] = gpu
    found = _BY_NAME.get(_norm(name))
    if found is not None:
        return found
    raise PlanError(
        f"{named('gpu')} {name!r} is not in the catalog; known: {', '.join(g.name for g in CATALOG)} "
        f"(or give {named('gpu_memory')})"
    )
