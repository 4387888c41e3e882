"""Capacity gates: load a gate file, validate every key, evaluate every promise.

A gate file pins deployments (model, plan, engine settings) and the capacity promised for
each (``min_concurrency``, ``max_kv_bytes_per_rank``, ...). ``load_gate_file`` turns the YAML
into ``Deployment`` objects or raises ``GateFileError`` listing every problem found (one line
each, naming the deployment and the key); ``evaluate_gate`` checks every promise of every
deployment, failures included, and for each failure searches the nearest setting that would
pass. Nothing here prints; ``kvcalc.render.gate`` and ``kvcalc.cli.gate`` do the output.

The schema is documented in ``docs/gate.md``; ``EXAMPLE`` is what ``kvcalc gate --init`` prints.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcalc.app.service import Settings
from kvcalc.core.units import format_bytes, parse_size
from kvcalc.errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_USAGE, KvcalcError
from kvcalc.sources.files import read_limited

MAX_FILE_BYTES = 1 << 20  # a gate file is a few KiB; 1 MiB leaves room for thousands of deployments
MAX_ALIASES = 200  # alias references (*name) in one file
MAX_NODES = 100_000  # YAML nodes after expanding every alias (a billion-laughs file expands to 9^9)
MAX_DEPTH = 32  # nesting of YAML collections; a gate file needs 4
TP_SEARCH_LIMIT = 64  # the largest tensor-parallel size tried when looking for a passing setting


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

# vLLM's long flag names, accepted as keys too (kvcalc size takes them as aliases)
ALIASES = {
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "kv_cache_dtype": "kv_dtype",
    "gpu_util": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory",
}

# the value each Settings field takes in a gate file
_POSITIVE = "positive"
_NONNEG = "nonneg"
_TEXT = "text"
_SIZE = "size"
_UTIL = "util"
_BOOL = "bool"
_INT_LIST = "int_list"
_VERSION = "version"
SETTING_KINDS: dict[str, str] = {
    "tp": _POSITIVE,
    "pp": _POSITIVE,
    "dp": _POSITIVE,
    "pp_layers": _INT_LIST,
    "gpus_per_node": _POSITIVE,
    "kv_dtype": _TEXT,
    "dtype": _TEXT,
    "block_size": _POSITIVE,
    "max_model_len": _POSITIVE,
    "encoder_tokens": _POSITIVE,
    "vllm_version": _VERSION,
    "tokens": _NONNEG,
    "requests": _INT_LIST,
    "batch": _POSITIVE,
    "prompt": _NONNEG,
    "gen": _NONNEG,
    "continuation": _BOOL,
    "gpu": _TEXT,
    "gpu_memory": _SIZE,
    "gpu_memory_utilization": _UTIL,
    "kv_cache_memory": _SIZE,
    "weights_bytes": _SIZE,
    "activation_bytes": _SIZE,
    "overhead_bytes": _SIZE,
    "cudagraph_bytes": _SIZE,
    "max_num_batched_tokens": _POSITIVE,
    "num_gpu_blocks_override": _POSITIVE,
    "max_concurrent_batches": _POSITIVE,
    "disable_hybrid_kv_cache_manager": _BOOL,
    "attention_backend": _TEXT,
}
_POOL_KEYS = ("gpu", "gpu_memory", "kv_cache_memory", "num_gpu_blocks_override")


def setting_kind(name: str) -> str:
    """The value kind of a Settings field; fields added later fall back on their annotation."""
    if name in SETTING_KINDS:
        return SETTING_KINDS[name]
    ann = str(Settings.__dataclass_fields__[name].type)
    if ann.startswith("bool"):
        return _BOOL
    if ann.startswith("int"):
        return _NONNEG
    if ann.startswith("float"):
        return _UTIL
    return _TEXT


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


@dataclass(frozen=True)
class Suggestion:
    key: str  # the setting changed
    value: Any  # the value that passes
    actual: Any  # the promise's figure at that value

    def text(self) -> str:
        return f"{self.key} {self.value}"


@dataclass(frozen=True)
class Outcome:
    """One promise of one deployment."""

    deployment: str
    model: str
    promise: str
    required: Any
    actual: Any
    margin: Any
    status: str  # pass | fail | error
    message: str = ""
    suggestions: tuple[Suggestion, ...] = ()
    line: int | None = None
    max_model_len: int | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class GateReport:
    path: str
    outcomes: tuple[Outcome, ...]
    problems: tuple[Problem, ...]  # deployments that could not be evaluated (exit 2)
    deployments: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_USAGE
        return EXIT_GATE_FAILED if self.count("fail") else EXIT_OK


# --------------------------------------------------------------------------- loading


def load_gate_file(path: str | Path) -> GateFile:
    """Read and validate a gate file ('-' reads standard input); GateFileError lists every problem."""
    import sys

    name = str(path)
    if name == "-":
        text = sys.stdin.read()
        return load_gate_text(text, "<stdin>")
    p = Path(path)
    try:
        if p.is_dir():
            raise GateFileError(name, [Problem("is a folder; give a gate file such as capacity.yaml")])
        # bounded read: a device (/dev/zero) stops at the limit, an idle pipe after a wait
        raw = read_limited(p, MAX_FILE_BYTES, "gate file")
    except GateFileError:
        raise
    except KvcalcError as exc:  # read_limited's one line names the file itself
        text = exc.message
        text = text.split(repr(name), 1)[1].strip() if repr(name) in text else text
        raise GateFileError(name, [Problem(text)]) from None
    except OSError as exc:
        raise GateFileError(name, [Problem(f"cannot be read: {exc.strerror or exc}")]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GateFileError(name, [Problem(f"is not UTF-8 text (byte {exc.start})")]) from None
    return load_gate_text(text, name)


def load_gate_text(text: str, path: str = "<gate>") -> GateFile:
    data, lines = parse_yaml(text, path)
    return validate(data, lines, path)


class _Refused(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def _limited_loader(text: str):  # noqa: ANN202 - a PyYAML safe loader instance
    """A safe loader (SafeConstructor + Resolver, what yaml.safe_load uses) whose composer
    refuses deep nesting and many aliases. libyaml scans and parses when present (about 5x
    faster); composing stays in Python either way, so a deep file meets the depth limit
    instead of the C composer's unbounded recursion."""
    import yaml
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
    from yaml.resolver import Resolver

    def compose_node(self, parent, index):  # noqa: ANN001, ANN202 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Refused(f"uses more than {MAX_ALIASES} aliases (*name); refused", event.start_mark.line + 1)
        nested = isinstance(event, (MappingStartEvent, SequenceStartEvent))
        if nested:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _Refused(f"nests collections more than {MAX_DEPTH} deep; refused", event.start_mark.line + 1)
        try:
            return Composer.compose_node(self, parent, index)
        finally:
            if nested:
                self.depth -= 1

    try:
        from yaml.cyaml import CParser
    except ImportError:  # PyYAML without libyaml
        CParser = None

    if CParser is None:

        class GateLoader(yaml.SafeLoader):
            depth = 0
            aliases = 0

        GateLoader.compose_node = compose_node
        return GateLoader(text)

    class GateCLoader(CParser, Composer, SafeConstructor, Resolver):
        depth = 0
        aliases = 0

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

        # the Python composer on top of libyaml's events (CParser has its own, recursive in C)
        check_node = Composer.check_node
        get_node = Composer.get_node
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document

    GateCLoader.compose_node = compose_node
    return GateCLoader(text)


def _expanded_size(root: Any) -> int:
    """Nodes after expanding every alias, counted without expanding (memo by node)."""
    from yaml.nodes import MappingNode, SequenceNode

    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def walk(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise _Refused("has an alias that refers to itself; refused", node.start_mark.line + 1)
        visiting.add(key)
        n = 1
        if isinstance(node, SequenceNode):
            n += sum(walk(c) for c in node.value)
        elif isinstance(node, MappingNode):
            n += sum(walk(k) + walk(v) for k, v in node.value)
        visiting.discard(key)
        sizes[key] = n
        if n > MAX_NODES:
            raise _Refused(
                f"expands to more than {MAX_NODES} YAML nodes through aliases (a 'billion laughs' file?); refused",
                node.start_mark.line + 1,
            )
        return n

    return walk(root)


def _mapping_lines(node: Any) -> tuple[int, dict[str, int], list[Problem]]:
    """Start line of a mapping node, the line of each key written in it, and duplicate keys."""
    from yaml.nodes import MappingNode, ScalarNode

    lines: dict[str, int] = {}
    dups: list[Problem] = []
    if not isinstance(node, MappingNode):
        return node.start_mark.line + 1, lines, dups
    for k, _v in node.value:
        if isinstance(k, ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
            line = k.start_mark.line + 1
            if k.value in lines:
                dups.append(Problem(f"key {k.value!r} is given twice (lines {lines[k.value]} and {line})", line))
            else:
                lines[k.value] = line
    return node.start_mark.line + 1, lines, dups


def _line_map(root: Any) -> tuple[dict, list[Problem]]:
    """Lines of the top level, of defaults and of each deployment (for messages and annotations)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    out: dict[str, Any] = {"top": {}, "defaults": (None, {}), "deployments": []}
    problems: list[Problem] = []
    seq = None
    if isinstance(root, SequenceNode):
        seq = root
    elif isinstance(root, MappingNode):
        _, out["top"], dups = _mapping_lines(root)
        problems += dups
        for k, v in root.value:
            if isinstance(k, ScalarNode) and k.value == "deployments" and isinstance(v, SequenceNode):
                seq = v
            if isinstance(k, ScalarNode) and k.value == "defaults":
                start, keys, dups = _mapping_lines(v)
                out["defaults"] = (start, keys)
                problems += dups
    if seq is not None:
        for item in seq.value:
            start, keys, dups = _mapping_lines(item)
            out["deployments"].append((start, keys))
            problems += dups
    return out, problems


def parse_yaml(text: str, path: str) -> tuple[Any, dict]:
    """YAML text -> plain data and line numbers, with yaml.SafeLoader's constructors only.

    The node graph is composed first and checked (nesting, alias count, size after alias
    expansion, duplicate keys) before any Python object is built."""
    import yaml

    if not text.strip():
        raise GateFileError(path, [Problem("is empty; start from `kvcalc gate --init`")])
    loader = _limited_loader(text)
    try:
        try:
            root = loader.get_single_node()
        except _Refused as exc:
            raise GateFileError(path, [Problem(str(exc), exc.line)]) from None
        except yaml.MarkedYAMLError as exc:
            raise GateFileError(path, [_yaml_problem(exc)]) from None
        except yaml.YAMLError as exc:
            raise GateFileError(path, [Problem(f"is not valid YAML: {' '.join(str(exc).split())}")]) from None
        except RecursionError:
            raise GateFileError(path, [Problem(f"nests collections too deeply (limit {MAX_DEPTH})")]) from None
        if root is None:
            raise GateFileError(path, [Problem("holds no YAML document (only comments?); start from `kvcalc gate --init`")])
        try:
            _expanded_size(root)
        except _Refused as exc:
            raise GateFileError(path, [Problem(str(exc), exc.line)]) from None
        lines, dups = _line_map(root)
        if dups:
            raise GateFileError(path, dups)
        try:
            data = loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            raise GateFileError(path, [_yaml_problem(exc)]) from None
        except (yaml.YAMLError, TypeError, ValueError) as exc:
            raise GateFileError(path, [Problem(f"is not valid YAML: {' '.join(str(exc).split())}")]) from None
    finally:
        loader.dispose()
    return data, lines


def _yaml_problem(exc: Any) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    context = exc.context or ""
    if context and exc.context_mark is not None and mark is not None and exc.context_mark.line != mark.line:
        context += f" (opened on line {exc.context_mark.line + 1})"
    what = " ".join(str(x) for x in (context, exc.problem) if x)
    what = " ".join(what.split()) or "syntax error"
    if mark is None:
        return Problem(f"is not valid YAML: {what}")
    return Problem(f"column {mark.column + 1}: invalid YAML: {what}", mark.line + 1)


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


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad(f"must be a number, got {_type_name(value)} {_show(value)}")
    return float(value)


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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"must be a fraction like 0.2 or a percentage like 20%, got {_type_name(value)} {_show(value)}")
        f = float(value)
    if not (0 <= f < 1):
        raise _Bad(f"must be a fraction from 0 up to (not including) 1, got {_show(value)}")
    return f


def setting_value(key: str, value: Any) -> Any:
    """A gate-file value -> the value Settings takes (the same text the flag would carry).

    null is accepted where the setting's default is 'unset' (tokens, gpu, max_model_len, ...):
    it drops a value the defaults gave."""
    if value is None and Settings.__dataclass_fields__[key].default is None:
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
    if kind == _VERSION:
        if isinstance(value, float) and not isinstance(value, bool):
            return f"{value:.2f}"  # YAML reads 0.20 as the number 0.2
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"must be a vLLM version like '0.33', got {_type_name(value)} {_show(value)}")
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
) -> tuple[dict[str, Any], dict[str, int], list[Problem]]:
    """Normalize keys and values of one mapping (defaults or a deployment)."""
    keys = set(deployment_keys())
    known = sorted(keys) + list(ALIASES)
    values: dict[str, Any] = {}
    key_lines: dict[str, int] = {}
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
                values[key] = value.strip()
            elif key in PROMISES:
                values[key] = promise_value(key, value)
            else:
                values[key] = setting_value(key, value)
        except _Bad as exc:
            problems.append(Problem(f"{where}: {raw} {exc}", line, key=key))
    return values, key_lines, problems


def validate(data: Any, lines: dict, path: str) -> GateFile:
    """Plain data from the YAML -> deployments; GateFileError lists every problem at once."""
    problems: list[Problem] = []
    defaults_data: Any = {}
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        top_lines = lines.get("top", {})
        for key in data:
            if key not in ("defaults", "deployments"):
                hint = _did_you_mean(str(key), ["defaults", "deployments"])
                if not hint and _normalize_key(key) in deployment_keys():
                    hint = "; a deployment's keys go in a list under 'deployments:'"
                line = top_lines.get(key) if isinstance(key, str) else None
                problems.append(Problem(f"top level: unknown key {_show(key)}{hint}", line, key=str(key)))
        if "deployments" not in data:
            problems.append(Problem("top level: no 'deployments:' list; nothing would be checked"))
            items = []
        else:
            items = data["deployments"]
            if not isinstance(items, list):
                problems.append(
                    Problem(
                        f"top level: 'deployments' must be a list of deployments, got {_type_name(items)}",
                        top_lines.get("deployments"),
                        key="deployments",
                    )
                )
                items = []
        defaults_data = data.get("defaults", {})
        if defaults_data is None:
            defaults_data = {}
    else:
        raise GateFileError(
            path,
            [Problem(f"must hold a list of deployments or a mapping with 'deployments:', got {_type_name(data)}")],
        )

    defaults: dict[str, Any] = {}
    default_lines: dict[str, int] = {}
    d_start, d_keys = lines.get("defaults", (None, {}))
    if not isinstance(defaults_data, dict):
        problems.append(Problem(f"defaults: must be a mapping of keys to values, got {_type_name(defaults_data)}", d_start))
    else:
        defaults, default_lines, found = _check_mapping(defaults_data, "defaults", d_keys, d_start, allow_name=False)
        problems += found

    if isinstance(data, (list, dict)) and not items and not problems:
        problems.append(Problem("lists no deployments; nothing would be checked"))

    dep_lines = lines.get("deployments", [])
    deployments: list[Deployment] = []
    names: dict[str, int | None] = {}
    for i, item in enumerate(items):
        start, keys = dep_lines[i] if i < len(dep_lines) else (None, {})
        label = f"deployment #{i + 1}"
        if not isinstance(item, dict):
            problems.append(Problem(f"{label}: must be a mapping with name, model and promises, got {_type_name(item)}", start))
            continue
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
            problems.append(
                Problem(f"{label}: no promise to check; give at least one of {', '.join(PROMISES)}", start)
            )
        settings_values = {k: v for k, v in merged.items() if k in Settings.names()}
        has_pool = any(settings_values.get(k) is not None for k in _POOL_KEYS)
        for k, _ in promises:
            if PROMISES[k].needs_pool and not has_pool:
                problems.append(
                    Problem(
                        f"{label}: {k} needs the KV pool; give gpu, gpu_memory, kv_cache_memory or num_gpu_blocks_override",
                        merged_lines.get(k) or start,
                        key=k,
                    )
                )
        if missing or found:
            continue
        deployments.append(
            Deployment(
                name=merged["name"],
                model=merged["model"],
                revision=merged.get("revision"),
                settings=Settings(**settings_values),
                promises=promises,
                line=start,
                key_lines={k: v for k, v in merged_lines.items() if v},
            )
        )
    if problems:
        problems.sort(key=lambda p: p.line or 0)  # in file order (stable: one line keeps its order)
        raise GateFileError(path, problems)
    return GateFile(path, tuple(deployments))


# --------------------------------------------------------------------------- evaluation


def _flag_names(message: str) -> str:
    """'--kv-dtype x is not known' -> 'kv_dtype x is not known': gate files use key names."""
    import re

    names = set(Settings.names())

    def swap(m: re.Match) -> str:
        k = m.group(1).replace("-", "_")
        return ALIASES.get(k, k) if ALIASES.get(k, k) in names else m.group(0)

    return re.sub(r"--([a-z][a-z0-9-]*)", swap, message)


class _Probe:
    """Evaluations of one deployment under changed settings, memoized."""

    def __init__(self, resolved: Any, settings: Settings) -> None:
        self.resolved = resolved
        self.settings = settings
        self.cache: dict[tuple, Any] = {}

    def run(self, **changes: Any) -> Any:
        from kvcalc.app.service import evaluate

        key = tuple(sorted(changes.items()))
        if key not in self.cache:
            try:
                self.cache[key] = evaluate(
                    self.resolved.spec, self.settings.with_(**changes), checkpoint=self.resolved.checkpoint
                )
            except KvcalcError:
                self.cache[key] = None
        return self.cache[key]


def _pool(result: Any) -> dict | None:
    from kvcalc.render.pool import pool_payload  # temporary: the split gate reads the record

    return None if result is None or result.pool is None else pool_payload(result.pool)


def headroom(block_rounded_bytes_per_rank: int, num_blocks: int, bytes_per_block: int) -> float | None:
    """1 - (KV the traffic holds on the busiest rank) / (num_blocks x bytes_per_block).

    The pool's bytes count every block vLLM allocates, its null block included (as vLLM's
    own concurrency figure does). Example: 1000 blocks of 1 MiB, traffic holding 250 MiB
    per rank -> 1 - 250/1000 = 0.75. None when the pool is empty."""
    capacity = num_blocks * bytes_per_block
    if capacity <= 0:
        return None
    return 1 - block_rounded_bytes_per_rank / capacity


def measure(key: str, result: Any) -> Any:
    """The figure a promise compares, from one SizeResult (None where it has no pool)."""
    fp = result.footprint
    if key == "max_kv_bytes_per_rank":
        return fp.block_rounded_bytes_per_rank
    if key == "max_bytes_per_token_per_rank":
        return fp.bytes_per_token_per_rank
    pool = _pool(result)
    if pool is None:
        return None
    if key == "min_concurrency":
        return float(pool["max_concurrency"])
    if key == "min_max_tokens":
        return int(pool["pool_tokens"])
    if key == "min_kv_cache_size_tokens":
        return int(pool["kv_cache_size_tokens"])
    if key == "fits_max_model_len":
        return bool(pool["fits_max_model_len"])
    if key == "min_headroom":
        return headroom(fp.block_rounded_bytes_per_rank, int(pool["num_blocks"]), int(pool["bytes_per_block"]))
    raise KeyError(key)  # pragma: no cover - PROMISES lists every key


def passes(key: str, required: Any, actual: Any) -> bool:
    if actual is None:
        return False
    kind = PROMISES[key].kind
    if kind == "min":
        return actual >= required
    if kind == "max":
        return actual <= required
    return actual is True


def margin(key: str, required: Any, actual: Any, result: Any) -> Any:
    """How far the figure is from the limit: positive = room to spare, negative = short by."""
    if actual is None:
        return None
    kind = PROMISES[key].kind
    if kind == "min":
        return actual - required
    if kind == "max":
        return required - actual
    # fits_max_model_len: tokens between max_model_len and the longest request that fits
    # (vLLM's estimated maximum model length, searched up to the model's own maximum)
    pool = _pool(result)
    if pool is None or pool.get("estimated_max_model_len") is None:
        return None
    return int(pool["estimated_max_model_len"]) - int(result.max_model_len)


def evaluate_gate(gate: GateFile, *, units: str = "iec", resolver: Any = None) -> GateReport:
    """Every promise of every deployment, failures included; unloadable models are problems."""
    if resolver is None:
        from kvcalc.sources.resolve import resolve as resolver
    outcomes: list[Outcome] = []
    problems: list[Problem] = []
    models: dict[tuple, Any] = {}
    for d in gate.deployments:
        key = (d.model, d.revision)
        if key not in models:
            try:
                models[key] = resolver(d.model, revision=d.revision)
            except (KvcalcError, OSError) as exc:
                msg = exc.message if isinstance(exc, KvcalcError) else f"{type(exc).__name__}: {exc}"
                models[key] = KvcalcError(" ".join(str(msg).split()))
        resolved = models[key]
        if isinstance(resolved, KvcalcError):
            problems.append(
                Problem(
                    f"deployment {d.name!r}: model {d.model!r} cannot be loaded: {resolved.message}",
                    d.key_lines.get("model", d.line),
                    deployment=d.name,
                    key="model",
                )
            )
            outcomes += [_error_outcome(d, k, v, "model cannot be loaded") for k, v in d.promises]
            continue
        probe = _Probe(resolved, d.settings)
        try:
            from kvcalc.app.service import evaluate

            result = evaluate(resolved.spec, d.settings, checkpoint=resolved.checkpoint)
        except KvcalcError as exc:
            problems.append(Problem(f"deployment {d.name!r}: {_flag_names(exc.message)}", d.line, deployment=d.name))
            outcomes += [_error_outcome(d, k, v, _flag_names(exc.message)) for k, v in d.promises]
            continue
        probe.cache[()] = result
        for k, required in d.promises:
            line = d.key_lines.get(k, d.line)
            if PROMISES[k].needs_pool and result.pool is None:
                why = "; ".join(n for n in result.notes if "pool" in n) or "no KV pool was computed"
                problems.append(Problem(f"deployment {d.name!r}: {k}: {why}", line, deployment=d.name, key=k))
                outcomes.append(_error_outcome(d, k, required, why))
                continue
            actual = measure(k, result)
            ok = passes(k, required, actual)
            suggestions: tuple[Suggestion, ...] = ()
            message = ""
            if not ok:
                suggestions = tuple(nearest(k, required, probe, result))
                message = failure_message(k, required, actual, result, suggestions, units)
            outcomes.append(
                Outcome(
                    deployment=d.name,
                    model=d.model,
                    promise=k,
                    required=required,
                    actual=actual,
                    margin=margin(k, required, actual, result),
                    status="pass" if ok else "fail",
                    message=message,
                    suggestions=suggestions,
                    line=line,
                    max_model_len=int(result.max_model_len),
                )
            )
    return GateReport(gate.path, tuple(outcomes), tuple(problems), len(gate.deployments))


def _error_outcome(d: Deployment, key: str, required: Any, why: str) -> Outcome:
    return Outcome(d.name, d.model, key, required, None, None, "error", why, (), d.key_lines.get(key, d.line))


# --------------------------------------------------------------------------- the nearest passing setting


def nearest(key: str, required: Any, probe: _Probe, result: Any) -> list[Suggestion]:
    """Settings one step away that would pass: the smallest larger TP, the gpu_memory_utilization
    needed, the largest max_model_len (fits / concurrency), fp8 KV."""
    from kvcalc.core.footprint import check_tp

    out: list[Suggestion] = []
    s = probe.settings
    pool = _pool(result)

    def ok(r: Any) -> bool:
        return r is not None and passes(key, required, measure(key, r))

    def actual_of(r: Any) -> float:
        return float(measure(key, r) or 0)

    if key == "fits_max_model_len" and pool is not None:
        est = pool.get("estimated_max_model_len")
        if est:
            out.append(Suggestion("max_model_len", int(est), True))
    elif key == "min_concurrency" and ok(probe.run(max_model_len=1)):
        # concurrency ~ 1 / max_model_len: start from that guess, then gallop and bisect
        L = int(result.max_model_len)
        guess = int(L * actual_of(result) / required) if required else L - 1
        best = largest_passing(lambda n: ok(probe.run(max_model_len=n)), 1, L - 1, guess, result.footprint.cache.block_size)
        if best is not None:
            out.append(Suggestion("max_model_len", best, measure(key, probe.run(max_model_len=best))))

    for tp in range(s.tp + 1, TP_SEARCH_LIMIT + 1):
        try:
            check_tp(probe.resolved.spec, tp)  # vLLM's divisibility rules, before a full evaluation
        except KvcalcError:
            continue
        r = probe.run(tp=tp)
        if ok(r):
            out.append(Suggestion("tp", tp, measure(key, r)))
            break

    util_applies = (
        PROMISES[key].needs_pool and pool is not None and s.kv_cache_memory is None and s.num_gpu_blocks_override is None
    )
    if util_applies:
        current = float(pool.get("gpu_memory_utilization") or s.gpu_memory_utilization or 0.92)
        lo, hi = int(current * 1000) + 1, 1000
        top = probe.run(gpu_memory_utilization=1.0)
        if lo <= hi and ok(top):
            best = (1000, top)
            while lo <= hi:  # more memory never shrinks the pool: search the smallest passing value
                mid = (lo + hi) // 2
                r = probe.run(gpu_memory_utilization=mid / 1000)
                if ok(r):
                    best, hi = (mid, r), mid - 1
                else:
                    lo = mid + 1
            out.append(Suggestion("gpu_memory_utilization", best[0] / 1000, measure(key, best[1])))

    kv = result.footprint.cache.kv_dtype
    if kv.bytes > 1 and not s.kv_dtype.lower().startswith(("fp8", "int8")):
        r = probe.run(kv_dtype="fp8")
        if ok(r):
            out.append(Suggestion("kv_dtype", "fp8", measure(key, r)))
    return out


def largest_passing(ok: Any, lo: int, hi: int, guess: int, step: int) -> int | None:
    """Largest n in [lo, hi] with ok(n), for ok true up to some n* and false above it.

    Gallops from ``guess`` by ``step``, doubling, until the answer is bracketed, then bisects:
    a few evaluations when the guess is close (concurrency ~ 1 / max_model_len makes it so)."""
    guess = min(max(guess, lo), hi)
    step = max(step, 1)
    if ok(guess):
        good, bad = guess, None
        while bad is None:
            if good == hi:
                return good
            x = min(good + step, hi)
            if ok(x):
                good = x
            else:
                bad = x
            step *= 2
    else:
        good, bad = None, guess
        while good is None:
            if bad == lo:
                return None
            x = max(bad - step, lo)
            if ok(x):
                good = x
            else:
                bad = x
            step *= 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


# --------------------------------------------------------------------------- words


def show(key: str, value: Any, units: str = "iec") -> str:
    """A promise's figure for people: 8.25x, 1,048,576 (tokens), 1.5 GiB, 25.0%."""
    if value is None:
        return "-"
    kind = PROMISES[key].value
    if kind == "number":
        return f"{value:.2f}x"
    if kind == "count":
        return f"{value:,}"
    if kind == "size":
        text = format_bytes(int(value), units)
        if "." in text and abs(value) < (1 << 20):  # not a whole KiB: exact bytes, so 114,687 B != 112 KiB
            return f"{int(value):,} B"
        return text
    if kind == "fraction":
        return f"{value * 100:.1f}%"
    return "fits" if value else "does not fit"


def show_margin(key: str, value: Any, units: str = "iec") -> str:
    if value is None:
        return "-"
    kind = PROMISES[key].value
    sign = "+" if value >= 0 else "-"
    if kind == "number":
        return f"{sign}{abs(value):.2f}x"
    if kind == "count":
        return f"{sign}{abs(value):,}"
    if kind == "size":
        return f"{sign}{show(key, abs(value), units)}"
    if kind == "fraction":
        return f"{sign}{abs(value) * 100:.1f} pts"
    return f"{sign}{abs(value):,} tokens"


def show_required(key: str, required: Any, units: str = "iec", max_model_len: int | None = None) -> str:
    kind = PROMISES[key].kind
    if kind == "flag":
        return f"fits {max_model_len:,}" if max_model_len else "fits"
    return (">= " if kind == "min" else "<= ") + show(key, required, units)


def failure_message(key: str, required: Any, actual: Any, result: Any, suggestions: tuple, units: str) -> str:
    """What is needed, what is available, and the nearest setting that passes (vLLM's error style)."""
    fp = result.footprint
    pool = _pool(result)
    L = int(result.max_model_len)

    def b(n: int) -> str:
        return format_bytes(int(n), units)

    where = ""
    if pool is not None:
        where = (
            f"{int(pool['num_blocks']):,} blocks of {int(pool.get('block_size') or fp.cache.block_size)} tokens, "
            f"{b(int(pool['num_blocks']) * int(pool['bytes_per_block']))} per GPU"
        )
    if key == "min_concurrency":
        text = (
            f"{required:.2f}x concurrency at max_model_len {L:,} is needed, but the KV cache ({where}) "
            f"holds {actual:.2f}x"
        )
    elif key == "min_max_tokens":
        text = f"{required:,} tokens of KV cache are needed, but the pool ({where}) holds {actual:,}"
    elif key == "min_kv_cache_size_tokens":
        text = (
            f"a GPU KV cache size of {required:,} tokens is needed, but it is {actual:,} "
            f"({float(pool['max_concurrency']):.2f}x concurrency x max_model_len {L:,}; {where})"
        )
    elif key == "fits_max_model_len":
        if pool and pool.get("error"):
            text = " ".join(str(pool["error"]).split())
        else:
            est = pool.get("estimated_max_model_len") if pool else None
            text = f"one request of max_model_len {L:,} does not fit the KV cache ({where})"
            if est:
                text += f"; the estimated maximum model length is {int(est):,}"
    elif key == "min_headroom":
        cap = int(pool["num_blocks"]) * int(pool["bytes_per_block"])
        left = "no pool" if actual is None else f"{actual * 100:.1f}%"
        text = (
            f"{required * 100:.1f}% of the pool must stay free after {fp.traffic.description}, but it holds "
            f"{b(fp.block_rounded_bytes_per_rank)} of the {b(cap)} pool per GPU, leaving {left}"
        )
    elif key == "max_kv_bytes_per_rank":
        text = (
            f"{fp.traffic.description} needs {b(actual)} of KV cache per GPU (block-rounded), "
            f"more than the {b(required)} allowed"
        )
    else:
        text = f"{b(actual)} of KV cache per token per GPU is needed, more than the {b(required)} allowed"
    text = text.rstrip(". ")
    if suggestions:
        text += ". Nearest settings that pass: " + "; ".join(_suggestion_text(key, s, units) for s in suggestions)
    else:
        text += f". No nearby setting passes (tried tp up to {TP_SEARCH_LIMIT}, gpu_memory_utilization up to 1.0, fp8 KV)"
    return text


def _suggestion_text(key: str, s: Suggestion, units: str) -> str:
    if s.key == "max_model_len" and key == "fits_max_model_len":
        return f"max_model_len <= {s.value:,}"
    if s.key == "max_model_len":
        return f"max_model_len <= {s.value:,} ({show(key, s.actual, units)})"
    if s.key == "gpu_memory_utilization":
        return f"gpu_memory_utilization >= {s.value:.3f} ({show(key, s.actual, units)})"
    return f"{s.key} {s.value} ({show(key, s.actual, units)})"


# --------------------------------------------------------------------------- the --init example

EXAMPLE = """\
# kvcalc capacity gates: `kvcalc gate capacity.yaml` exits 0 when every promise holds,
# 1 when one fails, 2 when this file is wrong. Schema: docs/gate.md.
#
# Keys are the flags of `kvcalc size` ('-' or '_'): tp, pp, dp, kv_dtype, block_size,
# max_model_len, gpu, gpu_memory, gpu_memory_utilization, kv_cache_memory, weights_bytes,
# max_num_batched_tokens, vllm_version, tokens, batch, requests, ... Sizes take units: 80GiB.

# Set once, overridden by any deployment that gives the same key.
defaults:
  vllm_version: "0.33"          # quote it: YAML reads 0.20 as the number 0.2
  kv_cache_memory: 8GiB         # KV pool per GPU (as --kv-cache-memory-bytes); or gpu / gpu_memory
  block_size: 16

deployments:
  - name: qwen3-0.6b-chat
    model: qwen3-0.6b           # a preset (kvcalc presets), a config.json path, or a Hub id
    max_model_len: 8192
    # traffic for max_kv_bytes_per_rank and min_headroom: 8 requests of 4096 tokens
    batch: 8
    tokens: 4096
    # the promises
    fits_max_model_len: true    # one request of max_model_len fits the pool
    min_concurrency: 8          # vLLM's 'Maximum concurrency for 8,192 tokens per request'
    min_max_tokens: 65536       # tokens the pool holds: num_blocks x block_size
    max_kv_bytes_per_rank: 4GiB # block-rounded KV of the traffic above, busiest GPU
    min_headroom: 0.25          # at least 25% of the pool left free under that traffic

  - name: llama-3.1-8b-tp2-fp8
    model: llama-3.1-8b
    tp: 2
    kv_dtype: fp8
    max_model_len: 32768
    requests: [32768, 4096, 512]  # one request per entry, in tokens
    fits_max_model_len: true
    min_concurrency: 4
    max_bytes_per_token_per_rank: 64KiB
    max_kv_bytes_per_rank: 1.5GiB # 37,376 tokens x 32 KiB per token per GPU = 1.14 GiB
"""
