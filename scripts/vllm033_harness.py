"""Load vLLM 0.33.0's pure KV planning code (vllm/v1/core/kv_cache_planning.py,
kv_cache_utils.py, v1/kv_cache_interface.py) from an extracted wheel without the rest of vLLM:
every other ``vllm.*`` module is a stub. Needs torch (CPU) only. Not used by the test suite.

    VLLM_SRC=/work/vllm-src/0.33.0 python scripts/vllm033_harness.py   # smoke test
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

SRC = Path(os.environ.get("VLLM_SRC", "/work/vllm-src/0.33.0"))
REAL = {
    "vllm.v1.kv_cache_interface",
    "vllm.v1.kv_cache_spec_registry",
    "vllm.v1.kv_cache_layout",
    "vllm.v1.core.kv_cache_planning",
    "vllm.v1.core.kv_cache_config_builder",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.hisparse.layout",
    "vllm.v1.hisparse.types",
    "vllm.utils.math_utils",
    "vllm.utils.mem_constants",
}


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _Anything(metaclass=_AnyMeta):
    """Stands for any name a stub module is asked for."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __class_getitem__(cls, item):
        return cls

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())


class _Logger(logging.LoggerAdapter):
    def info_once(self, *a, **k):
        k.pop("scope", None)
        self.info(*a, **k)

    def warning_once(self, *a, **k):
        k.pop("scope", None)
        self.warning(*a, **k)

    def debug_once(self, *a, **k):
        k.pop("scope", None)
        self.debug(*a, **k)


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package: submodules import

    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (_Anything,), {})

    mod.__getattr__ = getattr_  # type: ignore[method-assign]
    return mod


def _specials() -> dict[str, types.ModuleType]:
    import torch

    out = {}
    logger = _stub("vllm.logger")
    logger.init_logger = lambda name: _Logger(logging.getLogger(name), {})
    out["vllm.logger"] = logger
    mem = _stub("vllm.utils.mem_utils")
    mem.format_gib = lambda b: f"{round(b / (1 << 30), 2)}"
    mem.GiB_bytes = 1 << 30
    out["vllm.utils.mem_utils"] = mem
    tu = _stub("vllm.utils.torch_utils")
    tu.get_dtype_size = lambda dtype: torch.tensor([], dtype=dtype).element_size()
    out["vllm.utils.torch_utils"] = tu
    envs = _stub("vllm.envs")
    envs.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE = True
    out["vllm.envs"] = envs
    return out


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.specials = _specials()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        if fullname in REAL:
            rel = fullname.replace(".", "/")
            file = SRC / (rel + ".py")
            return importlib.util.spec_from_file_location(fullname, file)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        if spec.name in self.specials:
            return self.specials[spec.name]
        return _stub(spec.name)

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


if __name__ == "__main__":
    install()
    import vllm.v1.core.kv_cache_planning as P  # noqa: F401
    import vllm.v1.core.kv_cache_utils as U  # noqa: F401

    print("loaded", P.get_kv_cache_configs, U.get_max_concurrency_for_kv_cache_config)
