"""GPU catalog: total memory in bytes as CUDA reports it, with the figure's source.

vLLM sizes its budget from ``torch.cuda.mem_get_info()[1]`` (the same figure as torch's
"GPU 0 has a total capacity of X GiB"), a little under nvidia-smi's total. Entries marked
``cuda=True`` hold that figure from a log line or a public measurement; the others hold
nvidia-smi's total or the vendor's size (an upper bound: pass ``--gpu-memory`` with the
figure from vLLM's log, or ``--gpu auto`` on the machine itself).
"""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.errors import PlanError, named

MIB = 1 << 20
GIB = 1 << 30
_ISSUE14 = "mem_get_info total measured with vLLM 0.11 (issue 14)"
_SMI = "nvidia-smi total (CUDA reports ~0.5 GiB less; not verified by kvcalc)"
# Every cuda=True figure is quoted, with its URL, in tests/data/gpu-totals/SOURCES.md (tests/test_gpu_catalog.py
# checks the two agree).


def _oom(total: str, url: str) -> str:
    return f"torch OOM 'GPU 0 has a total capacity of {total} GiB' ({url})"


def _gib(x: float) -> int:
    """A figure printed to 0.01 GiB, in bytes (the middle of what rounds to it)."""
    return round(x * GIB)


@record
class Gpu:
    name: str
    memory_bytes: int
    source: str
    aliases: tuple[str, ...] = ()
    cuda: bool = False  # the figure is CUDA's total (mem_get_info), not nvidia-smi's
    sm: int = 0  # CUDA compute capability x 10 (0: not NVIDIA); picks kernels that pad weights
    nvswitch: bool = False  # SXM boards behind an NVSwitch: NCCL uses NVLS from sm90 on
    # streaming multiprocessors (AMD: compute units) = torch's multi_processor_count, which sizes
    # vLLM's Triton top-k/top-p buffer (budget_rules.topk_sm_buffer); 0: no citable figure found.
    # Each figure's source: tests/data/gpu-totals/SM-COUNTS.md
    sms: int = 0
    # CUDA's total under the drivers CUDA 13 needs (R580 and later; the 570 series already reports it: app.budget_gpu
    # LOWER_TOTALS_FROM; 0: not measured, or no different): GeForce cards
    # report less there (RTX 4090: 23.52 GiB against 23.64). Used for the vLLM releases whose wheels are CUDA 13 builds
    # (RuleLine.cuda13_wheel); the source is in r580_source and tests/data/gpu-totals/SOURCES.md (role r580)
    total_r580: int = 0
    r580_source: str = ""


CATALOG: tuple[Gpu, ...] = (
    Gpu("H100-80GB", _gib(79.18), _ISSUE14 + "; vLLM 0.6 logs on H100 print total_gpu_memory 79.22GiB (PR 12126)",
        ("H100", "H100-SXM", "H100-SXM5-80GB", "H100-80GB-HBM3"), True, sm=90, nvswitch=True, sms=132),
    Gpu("H100-PCIe", _gib(79.19), "torch OOM 'GPU 0 has a total capacity of 79.19 GiB' printed after 'device model=NVIDIA "
        "H100 PCIe' in a public training log (search-index file 62670082324, no repository URL)", ("H100-PCIE-80GB",), True,
        sm=90, sms=114),
    Gpu("H100-NVL", _gib(93.00), _oom("93.00", "github.com/ali-vilab/VACE/issues/56"), ("H100NVL",), True, sm=90, sms=132),
    Gpu("H200", _gib(139.80), "vLLM log 'Free memory on device (137.64/139.8 GiB) on startup' on H200 "
        "(public run notes, no URL found yet; torch OOM messages on 8xH200 print 139.80)", ("H200-141GB", "H200-SXM"), True, sm=90, nvswitch=True, sms=132),
    Gpu("H20", _gib(95.00), "torch OOM 'GPU  has a total capacity of 95.00 GiB' on an H20 96G "
        "(github.com/modelscope/DiffSynth-Studio/issues/1238)", ("H20-96GB",), True, sm=90, nvswitch=True),
    Gpu("B200", _gib(178.35), "device query 'Total Global Memory: 178.35 GB' (GiB despite the label) on NVIDIA B200 "
        "(github.com/pytorch/ao/pull/4002)", ("B200-180GB",), True, sm=100, nvswitch=True, sms=148),
    Gpu("B300", 287428771840, "torch device properties printed as '显存：267.69 GiB (287428771840 bytes)', 148 SMs, "
        "compute capability 10.3, on an NVIDIA B300 SXM6 AC (Modal; index file 69718187100)", ("B300-SXM6",), True, sm=103,
        nvswitch=True, sms=148),
    Gpu("GB200", _gib(184.31), _oom("184.31", "github.com/vllm-project/vllm/issues/43951") + " on 4x GB200; the same in "
        "github.com/vllm-project/vllm/issues/52511", (), True, sm=100, nvswitch=True),
    Gpu("A100-80GB", _gib(79.25), _ISSUE14 + "; dennislee22 vLLM 0.10.1.1 A100 logs at two utilizations imply 79.28",
        ("A100-SXM4-80GB", "A100-PCIE-80GB"), True, sm=80, nvswitch=True, sms=108),
    Gpu("A100-40GB", 42298834944, "deviceQuery 'Total amount of global memory: 40339 MBytes (42298834944 bytes)' on "
        "A100-SXM4-40GB (github.com/bottlerocket-os/bottlerocket/pull/3873)", ("A100", "A100-SXM4-40GB"), True,
        sm=80, nvswitch=True, sms=108),
    Gpu("L40S", _gib(44.39), "vLLM log 'Free memory on device (16.17/44.39 GiB) on startup' on L40S "
        "(public run notes, no URL found yet; torch OOM messages print 44.39-44.40)", (), True, sm=89, sms=142),
    Gpu("L4", _gib(22.05), _oom("22.05", "github.com/vllm-project/vllm/issues/20214") + " on vLLM's CI L4; a deviceQuery "
        "with the CUDA 12.4 driver prints 21.95 GiB (23570219008 B)", (), True, sm=89, sms=58),
    Gpu("A10G", _gib(22.19), "torch OOM '(GPU 0; 22.19 GiB total capacity; ...)' on AWS ml.g5 (A10G) instances "
        "(github.com/vllm-project/vllm/issues/372, 2023 driver; newer drivers report about 22.06)", (), True, sm=86,
        sms=80, total_r580=23684382720, r580_source="torch 2.15 nightly +cu130 (a CUDA 13 build: driver 580+) prints "
        "'total_memory=22587MB' (MiB, floored: 23684382720 B) for an NVIDIA A10G, multi_processor_count=80, in TorchCodec's "
        "CUDA decoding example page (index file 67234836605)"),
    # the A10 (PCIe) is another card than AWS's A10G: 72 SMs against 80, the same 24 GB
    Gpu("A10", _gib(22.18), _oom("22.18", "github.com/OpenBMB/MiniCPM-V/issues/640") + " on one A10 ('一张A10显卡'); a "
        "lambdalabs A10 line reads 21.99 (github.com/zai-org/CogVLM/issues/236)", ("A10-PCIE", "A10-24GB"), True, sm=86,
        sms=72, total_r580=_gib(22.06), r580_source="torch 2.14.0+cu130 (a CUDA 13 build: driver 580+; the file lists driver "
        "580.95.05) prints 'GPU 0 has a total capacity of 22.06 GiB' on an 'NVIDIA A10' (index file 71609078484)"),
    Gpu("T4", _gib(14.74), _oom("14.74", "github.com/zai-org/CogVideo/issues/741"), (), True, sm=75, sms=40,
        total_r580=_gib(14.56), r580_source="vLLM 0.28.0 log 'Free memory on device (14.46/14.56 GiB) on startup' on a Colab "
        "Tesla T4 with torch 2.13.0+cu130 (github.com/dipan010/keel, bench/colab/vllm_probe-2.ipynb)"),
    Gpu("RTX-5090", _gib(31.37), _oom("31.37", "github.com/Wan-Video/Wan2.1/issues/465"), ("5090", "RTX5090"), True,
        sm=120, sms=170, total_r580=_gib(31.36), r580_source="vLLM 0.28.0 log 'Free memory on device (30.86/31.36 GiB) on "
        "startup' on an RTX 5090 (github.com/Drolsey/syslab-server, docs/models.md)"),
    Gpu("RTX-4090", _gib(23.64), _oom("23.64", "github.com/ali-vilab/VGen/issues/104"), ("4090", "RTX4090"), True, sm=89, sms=128,
        total_r580=_gib(23.52), r580_source="vLLM 0.27.1 log 'Free memory on device (22.64/23.52 GiB) on startup' on a RunPod RTX "
        "4090 (github.com/alexostapiuk11/coldstart-recon-worker, fixtures/vllm_logs/startup_0.log)"),
    Gpu("RTX-3090", _gib(23.58), "vLLM log 'Memory profiling results: total_gpu_memory=23.58GiB' on RTX 3090 "
        "(github.com/vllm-project/vllm/issues/10517; 2023 torch OOM lines print 23.70, a 2026 one 23.54)",
        ("3090", "RTX3090"), True, sm=86, sms=82),
    Gpu("RTX-A6000", _gib(47.53), "torch OOM '(GPU 0; 47.53 GiB total capacity; ...)' on an RTX A6000 "
        "(github.com/allenai/open-instruct/issues/163); nvidia-smi 49140MiB (ECC off, the card's default)",
        ("A6000", "RTXA6000"), True, sm=86, sms=84),
    Gpu("RTX-6000-Ada", _gib(44.43), _oom("44.43", "github.com/DINGYANB/MTVCrafter/issues/21")
        + " on an RTX 6000 Ada with ECC on (nvidia-smi 46068MiB); with ECC off the card shows 49140MiB and CUDA "
        "~3 GiB more (no citable line found): pass --gpu-memory then",
        ("RTX6000-ADA", "RTX-6000-Ada-Generation", "6000-Ada"), True, sm=89),
    Gpu("RTX-3060", _gib(11.75), "torch OOM '(GPU 0; 11.75 GiB total capacity; ...)' on an RTX 3060 12GB "
        "(github.com/Kunhao-Liu/StyleGaussian/issues/12)", ("3060", "RTX3060", "RTX-3060-12GB"), True, sm=86, sms=28),
    Gpu("RTX-A4000", _gib(15.61), _oom("15.61", "github.com/DengKaiCQ/VGGT-Long/issues/6") + " on an RTX A4000 16GB "
        "(Linux; a Windows deviceQuery prints the whole 16376 MiB)", ("A4000", "RTXA4000"), True, sm=86),
    Gpu("RTX-A5000", _gib(23.57), "vLLM's free-memory check quoted as 'Your RTX A5000 (23.57 GB VRAM) only has 4.67 GB "
        "free' on RunPod (github.com/omertt27/ai-stanbul, RUNPOD_MEMORY_FIX.md); a deviceQuery of unknown date and driver "
        "prints 25402343424 bytes (23.66 GiB)", ("A5000", "RTXA5000"), True, sm=86),
    Gpu("A40", 47608692736, "deviceQuery 'Total amount of global memory: 45403 MBytes (47608692736 bytes)' on ten "
        "NVIDIA A40s, driver 550.127.05, nvidia-smi 46068MiB (github.com/thamada/nvidia-smi, nvsim/A40x10_deviceQuery.py "
        "at 5f6b772)",
        ("A40-48GB",), True, sm=86),
    Gpu("RTX-2080-Ti", 11348672512, "cuMemGetInfo total 'total=10822.94 MiB' on an RTX 2080 Ti with driver 570.133.20 "
        "(github.com/grgalex/nvshare/issues/26); drivers before 2024 give CUDA 10.76 GiB (torch OOM lines)",
        ("2080TI", "RTX2080TI", "RTX-2080TI", "GeForce-RTX-2080-Ti"), True, sm=75),
    Gpu("RTX-PRO-6000", _gib(94.97), "cudaMemGetInfo total printed as 'total=94.97 GiB' by ds4 on a 96GB RTX PRO 6000 "
        "Blackwell, nvidia-smi 97887MiB (github.com/antirez/ds4/issues/431); WSL2 reports 95.59",
        ("RTX-PRO-6000-Blackwell", "RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000-Blackwell-Workstation-Edition",
         "PRO-6000", "RTXPRO6000"), True, sm=120),
    # 2026-12-01 additions; "index file N": a public file the search index holds without naming its repository
    Gpu("H100-64GB", _gib(63.29), "cluster notes '4 × NVIDIA H100, 64 GB (63.29 GiB usable to CUDA)' on MareNostrum 5 "
        "acc nodes (index file 60688328609; other MN5 write-ups quote 63.29 beside nvidia-smi 65247MiB)",
        ("H100-64G", "H100-SXM-64GB"), True, sm=90),
    Gpu("A800-80GB", _gib(79.33), _oom("79.33", "github.com/hahnyuan/PB-LLM/issues/3") + " on an A800-80G; the same in "
        "github.com/MoonshotAI/Kimi-VL/issues/51 (8 x A800); SXM or PCIe not stated", ("A800", "A800-SXM4-80GB"), True,
        sm=80),
    Gpu("A30", _gib(23.53), _oom("23.53", "github.com/google/RB-Modulation/issues/5") + " ('only 24G in A30')", ("A30-24GB",),
        True, sm=80),
    Gpu("L20", _gib(44.53), _oom("44.53", "github.com/Tencent-Hunyuan/HunyuanCustom/issues/36") + " on 8 x L20", (), True,
        sm=89),
    Gpu("L40", _gib(44.40), _oom("44.40", "github.com/NVlabs/Eagle/issues/68") + " on a single L40", (), True, sm=89),
    Gpu("RTX-4080", 16049 * MIB, "torch device properties 'total_memory=16049MB, multi_processor_count=76' of an NVIDIA "
        "GeForce RTX 4080 (index file 22567041692)", ("4080", "RTX4080"), True, sm=89, sms=76),
    Gpu("RTX-4080-SUPER", 16852844544, "deviceQuery 'Total amount of global memory: 16072 MBytes (16852844544 bytes)' on "
        "an RTX 4080 SUPER, Linux, CUDA 12.4 driver (index file 13464696544)", ("RTX4080SUPER", "RTX-4080S"), True,
        sm=89, sms=80),
    Gpu("RTX-5080", _gib(15.47), "vLLM EngineCore OOM 'GPU 0 has a total capacity of 15.47 GiB' on an RTX 5080, vLLM 0.30 "
        "(index file 70302463552)", ("5080", "RTX5080"), True, sm=120, sms=84),
    Gpu("RTX-5060-Ti", _gib(15.47), "torch OOM 'GPU 0 has a total capacity of 15.47 GiB' on an RTX 5060 Ti 16GB (index file "
        "15211374239)", ("RTX-5060-Ti-16GB", "RTX5060TI"), True, sm=120),
    Gpu("RTX-4060-Ti-16GB", 16722821120, "deviceQuery 'Total amount of global memory: 15948 MBytes (16722821120 bytes)' on "
        "an RTX 4060 Ti 16GB, Linux, CUDA 13.1 driver (index file 29787678425)", ("RTX4060TI-16GB",), True, sm=89, sms=34),
    Gpu("RTX-4070-Ti-SUPER", 15974 * MIB, "torch device properties 'total_memory=15974MB, multi_processor_count=66' of an "
        "RTX 4070 Ti SUPER, driver 560.35.03 (index file 62007510912)", ("RTX4070TISUPER",), True, sm=89, sms=66),
    Gpu("RTX-3090-Ti", 24114 * MIB, "torch device properties 'total_memory=24114MB, multi_processor_count=84' of an RTX "
        "3090 Ti, driver 590.44.01 (index file 62087262535; 24112 MiB in github.com/pegainfer-project/pegainfer/issues/422)",
        ("3090TI", "RTX3090TI"), True, sm=86, sms=84),
    Gpu("RTX-4090-D", _gib(23.52), "a run report's 'GPU usable | 23.52 GiB (torch)' on an NVIDIA GeForce RTX 4090 D, driver "
        "595.71.05, torch 2.13.0 (index file 58195549105)", ("RTX4090D", "4090D"), True, sm=89),
    Gpu("RTX-3080", 10472390656, "deviceQuery 'Total amount of global memory: 9987 MBytes (10472390656 bytes)' on an RTX "
        "3080 10GB, Linux, CUDA 12.0 driver (index file 41764090233)", ("3080", "RTX3080", "RTX-3080-10GB"), True,
        sm=86, sms=68),
    Gpu("V100-32GB", 34089730048, "deviceQuery 'Total amount of global memory: 32510 MBytes (34089730048 bytes)' on a "
        "Tesla V100-SXM2-32GB (index file 3598356418); the PCIe card prints 34072559616", ("V100-SXM2-32GB",),
        True, sm=70, sms=80),
    Gpu("V100-16GB", 16928342016, "deviceQuery 'Total amount of global memory: 16144 MBytes (16928342016 bytes)' on a "
        "Tesla V100-SXM2-16GB, CUDA 12.4 driver (index file 41594833804)", ("V100-SXM2-16GB",), True, sm=70, sms=80),
    Gpu("H800", 84943110144, "PyTorch Profiler device properties '\"name\": \"NVIDIA H800\", \"totalGlobalMem\": "
        "84943110144' of DeepSeek's training trace (github.com/deepseek-ai/profile-data, train.json at de0b460), the same "
        "quantity as cudaMemGetInfo's total", ("H800-80GB", "H800-SXM", "H800-SXM5-80GB"), True, sm=90, nvswitch=True,
        sms=132),
    Gpu("RTX-3060-Ti", 8359641088, "deviceQuery 'Total amount of global memory: 7972 MBytes (8359641088 bytes)' on an RTX "
        "3060 Ti, Linux, CUDA 12.2 driver (index file 34099184611)", ("3060TI", "RTX3060TI"), True, sm=86, sms=38),
    Gpu("RTX-3070", _gib(7.78), _oom("7.78", "github.com/meta-llama/codellama/issues/82") + " on an RTX 3070 (2023; the same "
        "in github.com/akshitac8/OW-DETR/issues/46)", ("3070", "RTX3070"), True, sm=86, sms=46,
        total_r580=8197111808, r580_source="deviceQuery 'Total amount of global memory: 7817 MBytes (8197111808 bytes)' on "
        "an RTX 3070 under a CUDA 12.8 (570-series) driver (index file 12020098570)"),
    Gpu("RTX-3080-Ti", 12630491136, "deviceQuery 'Total amount of global memory: 12045 MBytes (12630491136 bytes)' on an "
        "RTX 3080 Ti, CUDA 11.4 driver (index file 47577401068)", ("3080TI", "RTX3080TI"), True, sm=86, sms=80),
    Gpu("RTX-4070-Ti", _gib(11.73), "torch OOM '(GPU 0; 11.73 GiB total capacity; ...)' on an RTX 4070 Ti "
        "(github.com/OpenLMLab/LOMO/issues/17)", ("4070TI", "RTX4070TI"), True, sm=89),
    Gpu("Quadro-RTX-8000", _gib(47.46), "torch OOM '(GPU 0; 47.46 GiB total capacity; ...)' on an RTX 8000 "
        "(github.com/Victarry/stable-dreambooth/issues/8)", ("RTX-8000", "QUADRO-RTX8000"), True, sm=75),
    Gpu("MI250X", 65520 * MIB, "torch device properties 'total_memory=65520MB, multi_processor_count=110' of one AMD "
        "Instinct MI250X GCD (index file 6974116335)", (), True, sms=110),
    Gpu("MI355X", _gib(287.98), "HIP OOM 'GPU 0 has a total capacity of 287.98 GiB' on 8 x MI355X, ROCm 7.2 (index file "
        "60904491974)", (), True),
    Gpu("MI300X", _gib(191.98), "HIP OOM 'GPU 0 has a total capacity of 191.98 GiB' on 8x MI300X "
        "(github.com/vllm-project/vllm/issues/7951)", (), True, sms=304),
    Gpu("MI325X", _gib(255.98), "HIP OOM 'GPU 0 has a total capacity of 255.98 GiB' on 8x MI325X "
        "(github.com/vllm-project/vllm/issues/41962)", (), True, sms=304),
)


def _norm(name: str) -> str:
    return name.strip().upper().replace("_", "-").replace(" ", "-")


_BY_NAME: dict[str, Gpu] = {}


def is_auto(name: object) -> bool:
    """``--gpu auto``: the local GPU, read at run time (sources.localgpu), not a catalog entry."""
    return isinstance(name, str) and name.strip().lower() == "auto"


def cuda_total(gpu: Gpu, r580: bool, driver: int | None = None) -> tuple[int, str]:
    """The catalog total under a driver of the R580 era (``r580``: ``driver`` >= 570 as given, or the release's wheel
    is a CUDA 13 build, which needs one) or any other, with its source."""
    why = f"--nvidia-driver {driver}" if driver else "a CUDA 13 build of vLLM needs an R580+ driver"
    if r580 and gpu.total_r580:
        return gpu.total_r580, f"{gpu.r580_source} ({why})"
    return gpu.memory_bytes, gpu.source + (f" (--nvidia-driver {driver})" if driver and gpu.total_r580 else "")


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


_VENDOR_WORDS = frozenset(("NVIDIA", "TESLA", "GEFORCE", "QUADRO", "AMD", "INSTINCT", "RADEON"))
# words after a model number that make another card with its own memory ("RTX 3070 Ti", "RTX 4060 Laptop GPU")
_VARIANT_WORDS = frozenset(("TI", "SUPER", "D", "LAPTOP", "MOBILE", "MAX", "MAX-Q", "XT", "XTX"))


def match_device(device_name: str) -> Gpu | None:
    """The catalog entry for a device name as torch or nvidia-smi prints it ("NVIDIA H100 80GB HBM3",
    "Tesla T4", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X"): vendor words dropped, then the
    longest leading run of words that names an entry; None when none does (an uncatalogued card), or when
    the next word makes it another card (an "RTX 3070 Ti" is not the RTX 3070: _VARIANT_WORDS)."""
    words = [w for w in _norm(device_name).split("-") if w and w not in _VENDOR_WORDS]
    for n in range(len(words), 0, -1):
        found = _lookup("-".join(words[:n]))
        if found is not None:
            return None if n < len(words) and words[n] in _VARIANT_WORDS else found
    return None


def _lookup(key: str) -> Gpu | None:
    try:
        return find_gpu(key)
    except PlanError:
        return None

