"""Gate files: the schema (keys, aliases, value kinds, promises) and its validation.

A gate file pins deployments (model, plan, engine settings) and the capacity promised for
each (``min_concurrency``, ``max_kv_bytes_per_rank``, ...). ``load_gate_file`` reads it
(``kvcalc.sources.gatefile`` does the bounded read and the hardened YAML parse) and turns it
into ``Deployment`` records or raises ``GateFileError`` listing every problem found (one line
each, naming the deployment and the key). ``kvcalc.app.gate`` evaluates the promises.

The schema is documented in ``docs/gate.md``.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcalc.app.settings import (
    ALIASES,
    BOOL,
    INT_LIST,
    JSON,
    NONNEG,
    POOL_SETTINGS,
    POSITIVE,
    SIZE,
    TABLE,
    TEXT,
    UTIL,
    VERSION,
    Settings,
)
from kvcalc.core.units import parse_size
from kvcalc.errors import EXIT_USAGE, KvcalcError

# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class Promise:
    key: str
    kind: str  # min | max | flag
    value: str  # number | count | size | fraction | flag
    needs_pool: bool
    what: str  # the figure compared, for people


PROMISES: dict[str, Promise] = {
    p.key: p
    for p in (
        Promise("min_concurrency", "min", "number", True, "maximum concurrency at max_model_len (vLLM's 'Maximum concurrency')"),
        Promise("min_max_tokens", "min", "count", True, "tokens the KV pool holds (num_blocks x block_size)"),
        Promise("min_kv_cache_size_tokens", "min", "count", True, "vLLM's 'GPU KV cache size' in tokens"),
        Promise("fits_max_model_len", "flag", "flag", True, "one request of max_model_len fits the KV pool"),
        Promise("min_headroom", "min", "fraction", True, "fraction of the pool left free after the traffic"),
        Promise("max_kv_bytes_per_rank", "max", "size", False, "block-rounded KV of the traffic on the busiest rank"),
        Promise("max_bytes_per_token_per_rank", "max", "size", False, "KV bytes per token on the busiest rank"),
    )
}

IDENTITY_KEYS = ("name", "model", "revision")

# the value kinds of the settings (kvcalc.app.settings declares each setting's kind)
_POSITIVE = POSITIVE
_NONNEG = NONNEG
_TEXT = TEXT
_SIZE = SIZE
_UTIL = UTIL
_BOOL = BOOL
_INT_LIST = INT_LIST
_VERSION = VERSION
_POOL_KEYS = POOL_SETTINGS


def setting_kind(name: str) -> str:
    """The value kind of a setting, as the table of settings declares it."""
    return TABLE[name].kind


def deployment_keys() -> tuple[str, ...]:
    return (*IDENTITY_KEYS, *Settings.names(), *PROMISES)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the file: one line for people."""

    message: str
    line: int | None = None
    deployment: str | None = None
    key: str | None = None

    def text(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line else path
        return f"{where}: {self.message}"


class GateFileError(KvcalcError):
    """The gate file is wrong; ``problems`` lists every problem found (exit 2)."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = tuple(problems)
        super().__init__("\n".join(p.text(path) for p in problems), exit_code=EXIT_USAGE)

    def lines(self) -> list[str]:
        return [p.text(self.path) for p in self.problems]


@dataclass(frozen=True)
class Deployment:
    name: str
    model: str
    revision: str | None
    settings: Settings
    promises: tuple[tuple[str, Any], ...]  # (promise key, required value: int bytes, float, int or True)
    line: int | None = None
    key_lines: dict = field(default_factory=dict, compare=False)  # key -> line it was set on


@dataclass(frozen=True)
class GateFile:
    path: str
    deployments: tuple[Deployment, ...]


# --------------------------------------------------------------------------- loading


def load_gate_file(path: str | Path) -> GateFile:
    """Read and validate a gate file ('-' reads standard input); GateFileError lists every problem."""
    from kvcalc.sources.gatefile import GateSourceError, read_gate_file

    try:
        text, name = read_gate_file(path)
    except GateSourceError as exc:
        raise _file_error(exc) from None
    return load_gate_text(text, name)


def load_gate_text(text: str, path: str = "<gate>") -> GateFile:
    from kvcalc.sources.gatefile import GateSourceError, parse_gate_yaml

    try:
        data, lines = parse_gate_yaml(text, path)
    except GateSourceError as exc:
        raise _file_error(exc) from None
    return validate(data, lines, path)


def _file_error(exc: Any) -> GateFileError:
    return GateFileError(exc.path, [Problem(f.message, f.line) for f in exc.flaws])


# --------------------------------------------------------------------------- validation


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "text", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _did_you_mean(key: str, options: list[str]) -> str:
    hits = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
    return f"; did you mean {hits[0]!r}?" if hits else ""


class _Bad(Exception):
    """A value of the wrong type or range; the message says what would be valid."""


def _int(value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"must be an integer{' >= ' + str(least) if least else ' >= 0'}, got {_type_name(value)} {_show(value)}")
    if value < least:
        raise _Bad(f"must be an integer >= {least}, got {value}")
    return value


def _float(value: Any) -> float | None:
    """A finite float of an int or float; None for anything else (an int of 400 digits too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _number(value: Any) -> float:
    f = _float(value)
    if f is None:
        raise _Bad(f"must be a number, got {_type_name(value)} {_show(value)}")
    return f


def _size(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _Bad(f"must be a size like 80GiB, 79.1GiB, 80GB or a number of bytes, got {_type_name(value)} {_show(value)}")
    try:
        return parse_size(value, key)
    except KvcalcError:
        raise _Bad(f"must be a size like 80GiB, 79.1GiB, 80GB (SI) or a number of bytes, got {_show(value)}") from None


def _fraction(value: Any) -> float:
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            f = float(value.strip()[:-1]) / 100
        except ValueError:
            raise _Bad(f"must be a fraction like 0.2 or a percentage like 20%, got {_show(value)}") from None
    else:
        number = _float(value)
        if number is None:
            raise _Bad(f"must be a fraction like 0.2 or a percentage like 20%, got {_type_name(value)} {_show(value)}")
        f = number
    if not (0 <= f < 1):
        raise _Bad(f"must be a fraction from 0 up to (not including) 1, got {_show(value)}")
    return f


def setting_value(key: str, value: Any) -> Any:
    """A gate-file value -> the value Settings takes (the same text the flag would carry).

    null is accepted where the setting's default is 'unset' (tokens, gpu, max_model_len, ...):
    it drops a value the defaults gave."""
    if value is None and TABLE[key].default is None:
        return None
    kind = setting_kind(key)
    if kind == _POSITIVE:
        return _int(value, 1)
    if kind == _NONNEG:
        return _int(value, 0)
    if kind == _BOOL:
        if not isinstance(value, bool):
            raise _Bad(f"must be true or false, got {_type_name(value)} {_show(value)}")
        return value
    if kind == _TEXT:
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"must be text, got {_type_name(value)} {_show(value)}")
        return value.strip()
    if kind == JSON:  # vLLM's JSON flags: a mapping as YAML writes it, or the JSON text
        if isinstance(value, dict):
            import json

            return json.dumps(value)
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"must be a mapping or its JSON text, got {_type_name(value)} {_show(value)}")
        return value.strip()
    if kind == _VERSION:
        if isinstance(value, float) and not isinstance(value, bool):
            # YAML reads 0.20 as the number 0.2 and 0.10 as 0.1: a one-digit minor under 8 lost its
            # trailing 0 (no release 0.1-0.7 has the V1 engine); 0.8, 0.9 and 0.33 stay as written
            major, _, minor = repr(value).partition(".")
            return f"{major}.{minor}0" if len(minor) == 1 and int(minor) < 8 else f"{major}.{minor}"
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"must be a vLLM release like '0.33' or '0.10.1.1', got {_type_name(value)} {_show(value)}")
        return value.strip()
    if kind == _SIZE:
        _size(value, key)  # checked here so the message names the deployment; the pool parses it again
        return str(value)
    if kind == _UTIL:
        f = _number(value)
        if not (0 < f <= 1):
            raise _Bad(f"must be a fraction of the GPU's memory, above 0 and at most 1, got {_show(value)}")
        return f
    if kind == _INT_LIST:
        if isinstance(value, bool):
            raise _Bad(f"must be a list of integers like [17, 32], got {_type_name(value)}")
        if isinstance(value, int):
            value = [value]
        if isinstance(value, list):
            for item in value:
                if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                    raise _Bad(f"must be a list of non-negative integers like [17, 32], got {_show(item)} in it")
            if not value:
                raise _Bad("must list at least one integer")
            return ",".join(str(v) for v in value)
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",")]
            if not all(p.isdigit() for p in parts):
                raise _Bad(f"must be a list of integers like [17, 32] or '17,32', got {_show(value)}")
            return ",".join(parts)
        raise _Bad(f"must be a list of integers like [17, 32], got {_type_name(value)} {_show(value)}")
    raise _Bad(f"has no known kind {kind!r}")  # pragma: no cover - setting_kind covers every field


def promise_value(key: str, value: Any) -> Any:
    p = PROMISES[key]
    if p.value == "flag":
        if not isinstance(value, bool):
            raise _Bad(f"must be true (check it) or false (skip it), got {_type_name(value)} {_show(value)}")
        return value
    if p.value == "number":
        f = _number(value)
        if f < 0:
            raise _Bad(f"must not be negative, got {_show(value)}")
        return f
    if p.value == "count":
        return _int(value, 0)
    if p.value == "size":
        return _size(value, key)
    return _fraction(value)


def _normalize_key(key: Any) -> str | None:
    if not isinstance(key, str):
        return None
    k = key.strip().replace("-", "_")
    return ALIASES.get(k, k)


def _check_mapping(
    data: dict, where: str, lines: dict[str, int], fallback_line: int | None, *, allow_name: bool
) -> tuple[dict[str, Any], dict[str, int | None], list[Problem]]:
    """Normalize keys and values of one mapping (defaults or a deployment)."""
    keys = set(deployment_keys())
    known = sorted(keys) + list(ALIASES)
    values: dict[str, Any] = {}
    key_lines: dict[str, int | None] = {}
    origin: dict[str, str] = {}
    problems: list[Problem] = []
    for raw, value in data.items():
        line = lines.get(raw, fallback_line) if isinstance(raw, str) else fallback_line
        key = _normalize_key(raw)
        if key is None:
            problems.append(Problem(f"{where}: key {_show(raw)} must be text", line))
            continue
        if key not in keys:
            hint = _did_you_mean(key, known)
            problems.append(Problem(f"{where}: unknown key {raw!r}{hint}", line, key=str(raw)))
            continue
        if key == "name" and not allow_name:
            problems.append(Problem(f"{where}: 'name' belongs to each deployment, not to defaults", line, key=key))
            continue
        if key in origin:
            problems.append(Problem(f"{where}: {raw!r} and {origin[key]!r} set the same thing; keep one", line, key=key))
            continue
        origin[key] = str(raw)
        key_lines[key] = line
        try:
            if key in ("name", "model"):
                if not isinstance(value, str) or not value.strip():
                    raise _Bad(f"must be text, got {_type_name(value)} {_show(value)}")
                values[key] = value.strip()
            elif key == "revision":
                if not isinstance(value, str) or not value.strip():  # YAML reads 0123456 as an octal number
                    raise _Bad(f"must be a branch, tag or commit as quoted text, got {_type_name(value)} {_show(value)}")
                from kvcalc.sources.hubdata import check_revision

                try:  # before any Hub call: huggingface_hub joins a revision onto a cache path
                    values[key] = check_revision(value.strip())
                except KvcalcError as exc:
                    raise _Bad(f"is {exc.message.split(' is ', 1)[-1]}") from None
            elif key in PROMISES:
                values[key] = promise_value(key, value)
            else:
                values[key] = setting_value(key, value)
        except _Bad as exc:
            problems.append(Problem(f"{where}: {raw} {exc}", line, key=key))
    return values, key_lines, problems


def validate(data: Any, lines: dict, path: str) -> GateFile:
    """Plain data from the YAML -> deployments; GateFileError lists every problem at once."""
    items, defaults_data, problems = _top_level(data, lines, path)
    defaults: dict[str, Any] = {}
    default_lines: dict[str, int | None] = {}
    d_start, d_keys = lines.get("defaults", (None, {}))
    if not isinstance(defaults_data, dict):
        problems.append(Problem(f"defaults: must be a mapping of keys to values, got {_type_name(defaults_data)}", d_start))
    else:
        defaults, default_lines, found = _check_mapping(defaults_data, "defaults", d_keys, d_start, allow_name=False)
        problems += found

    if not items and not problems:
        problems.append(Problem("lists no deployments; nothing would be checked"))

    dep_lines = lines.get("deployments", [])
    deployments: list[Deployment] = []
    names: dict[str, int | None] = {}
    for i, item in enumerate(items):
        start, keys = dep_lines[i] if i < len(dep_lines) else (None, {})
        d = _deployment(i, item, start, keys, defaults, default_lines, names, problems)
        if d is not None:
            deployments.append(d)
    if problems:
        problems.sort(key=lambda p: p.line or 0)  # in file order (stable: one line keeps its order)
        raise GateFileError(path, problems)
    return GateFile(path, tuple(deployments))


def _top_level(data: Any, lines: dict, path: str) -> tuple[list, Any, list[Problem]]:
    """The deployments list and the defaults of the file's top level, and what is wrong there."""
    problems: list[Problem] = []
    if isinstance(data, list):
        return data, {}, problems
    if not isinstance(data, dict):
        raise GateFileError(
            path,
            [Problem(f"must hold a list of deployments or a mapping with 'deployments:', got {_type_name(data)}")],
        )
    top_lines = lines.get("top", {})
    for key in data:
        if key not in ("defaults", "deployments"):
            hint = _did_you_mean(str(key), ["defaults", "deployments"])
            if not hint and _normalize_key(key) in deployment_keys():
                hint = "; a deployment's keys go in a list under 'deployments:'"
            line = top_lines.get(key) if isinstance(key, str) else None
            problems.append(Problem(f"top level: unknown key {_show(key)}{hint}", line, key=str(key)))
    items: Any = []
    if "deployments" not in data:
        problems.append(Problem("top level: no 'deployments:' list; nothing would be checked"))
    else:
        items = data["deployments"]
        if not isinstance(items, list):
            why = f"top level: 'deployments' must be a list of deployments, got {_type_name(items)}"
            problems.append(Problem(why, top_lines.get("deployments"), key="deployments"))
            items = []
    defaults_data = data.get("defaults", {})
    return items, ({} if defaults_data is None else defaults_data), problems


def _deployment(
    i: int, item: Any, start: int | None, keys: dict[str, int], defaults: dict[str, Any],
    default_lines: dict[str, int | None], names: dict[str, int | None], problems: list[Problem],
) -> Deployment | None:
    """One entry of the deployments list merged over the defaults; its problems go to ``problems``."""
    label = f"deployment #{i + 1}"
    if not isinstance(item, dict):
        problems.append(Problem(f"{label}: must be a mapping with name, model and promises, got {_type_name(item)}", start))
        return None
    raw_name = item.get("name")
    if isinstance(raw_name, str) and raw_name.strip():
        label = f"deployment {raw_name.strip()!r}"
    values, key_lines, found = _check_mapping(item, label, keys, start, allow_name=True)
    problems += found
    merged = {**defaults, **values}
    merged_lines = {**{k: default_lines.get(k) for k in defaults}, **key_lines}
    missing = [k for k in ("name", "model") if k not in merged and not any(p.key == k for p in found)]
    for k in missing:
        problems.append(Problem(f"{label}: missing required key {k!r}", start, key=k))
    name = merged.get("name")
    if isinstance(name, str):
        if name in names:
            problems.append(Problem(f"{label}: the name is used twice (first on line {names[name]})", start, key="name"))
        names.setdefault(name, start)
    promises = tuple((k, merged[k]) for k in PROMISES if k in merged and merged[k] is not False)
    misspelled = any("unknown key" in p.message for p in found)  # the promise may be the misspelled key
    if not promises and not misspelled and not any(p.key in PROMISES for p in found):
        problems.append(Problem(f"{label}: no promise to check; give at least one of {', '.join(PROMISES)}", start))
    settings_values = {k: v for k, v in merged.items() if k in Settings.names()}
    has_pool = any(settings_values.get(k) is not None for k in _POOL_KEYS)
    for k, _ in promises:
        if PROMISES[k].needs_pool and not has_pool:
            why = "needs the KV pool; give gpu, gpu_memory, kv_cache_memory or num_gpu_blocks_override"
            problems.append(Problem(f"{label}: {k} {why}", merged_lines.get(k) or start, key=k))
    if missing or found:
        return None
    return Deployment(
        name=merged["name"],
        model=merged["model"],
        revision=merged.get("revision"),
        settings=Settings(**settings_values),
        promises=promises,
        line=start,
        key_lines={k: v for k, v in merged_lines.items() if v},
    )
