"""Checked reads of config.json numbers, shared by the config reader and the state-shape reader."""

from __future__ import annotations

import math
from typing import Any

from kvcalc.errors import ConfigError

# No real architecture number comes near this; larger ones are corrupt or hostile configs.
MAX_FIELD = 1 << 40


def finite(v: int | float) -> bool:
    """math.isfinite, which raises OverflowError on ints beyond a float (JSON allows 10**400)."""
    return isinstance(v, int) or math.isfinite(v)


def required(cfg: dict, key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ConfigError(f"config{where} lacks '{key}', needed to size the KV cache")
    return cfg[key]


def checked_int(cfg: dict, key: str, where: str, *, minimum: int = 1) -> int:
    value = required(cfg, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            value = int(value)
        else:
            raise ConfigError(f"config{where} field '{key}' must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"config{where} field '{key}' must be >= {minimum}, got {value}")
    if value > MAX_FIELD:
        raise ConfigError(f"config{where} field '{key}' is {value}, beyond any real model (limit 2**40)")
    return value
