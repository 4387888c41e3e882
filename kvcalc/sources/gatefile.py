"""Gate files as YAML: the bounded read and the hardened parse.

``read_gate_file`` reads a gate file ('-' is standard input) with a size limit and decodes it;
``parse_gate_yaml`` turns the text into plain data and the line of every key, refusing deep
nesting, many aliases, alias expansion past ``MAX_NODES`` and duplicate keys before any Python
object is built. Both raise ``GateSourceError`` listing the ``Flaw`` (message and line) found;
``kvcalc.app.gate_schema`` turns those into its problems and validates the data.

``example()`` is the commented sample gate file ``kvcalc gate --init`` prints, shipped in the
package as ``kvcalc/examples/gate_init.yaml`` (``examples/gate_init.yaml`` in the repository).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcalc.core.record import record
from kvcalc.errors import EXIT_USAGE, KvcalcError
from kvcalc.sources.files import read_limited

MAX_FILE_BYTES = 1 << 20  # a gate file is a few KiB; 1 MiB leaves room for thousands of deployments
MAX_ALIASES = 200  # alias references (*name) in one file
MAX_NODES = 100_000  # YAML nodes after expanding every alias (a billion-laughs file expands to 9^9)
MAX_DEPTH = 32  # nesting of YAML collections; a gate file needs 4
EXAMPLE_FILE = "gate_init.yaml"


@record
class Flaw:
    """One thing wrong with the file as text or YAML, and the line it is on."""

    message: str
    line: int | None = None


class GateSourceError(KvcalcError):
    """The gate file cannot be read or is not acceptable YAML; ``flaws`` says why."""

    def __init__(self, path: str, flaws: list[Flaw]) -> None:
        self.path = path
        self.flaws = tuple(flaws)
        super().__init__("\n".join(f"{path}: {f.message}" for f in flaws), exit_code=EXIT_USAGE)


# --------------------------------------------------------------------------- reading


def read_gate_file(path: str | Path) -> tuple[str, str]:
    """The text of a gate file and the name to report it by ('-' reads standard input)."""

    name = str(path)
    if name == "-":
        return _read_stdin(), "<stdin>"
    p = Path(path)
    try:
        if p.is_dir():
            raise GateSourceError(name, [Flaw("is a folder; give a gate file such as capacity.yaml")])
        # bounded read: a device (/dev/zero) stops at the limit, an idle pipe after a wait
        raw = read_limited(p, MAX_FILE_BYTES, "gate file")
    except GateSourceError:
        raise
    except KvcalcError as exc:  # read_limited's one line names the file itself
        text = exc.message
        text = text.split(repr(name), 1)[1].strip() if repr(name) in text else text
        raise GateSourceError(name, [Flaw(text)]) from None
    except OSError as exc:
        raise GateSourceError(name, [Flaw(f"cannot be read: {exc.strerror or exc}")]) from None
    try:
        return raw.decode("utf-8-sig"), name
    except UnicodeDecodeError as exc:
        raise GateSourceError(name, [Flaw(f"is not UTF-8 text (byte {exc.start})")]) from None


def _read_stdin() -> str:
    """Standard input, at most MAX_FILE_BYTES of it (``< /dev/zero`` stops there), as UTF-8."""
    import sys

    stream = getattr(sys.stdin, "buffer", None)
    try:
        raw = stream.read(MAX_FILE_BYTES + 1) if stream is not None else sys.stdin.read(MAX_FILE_BYTES + 1).encode()
    except (OSError, ValueError) as exc:
        raise GateSourceError("<stdin>", [Flaw(f"cannot be read: {getattr(exc, 'strerror', None) or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise GateSourceError("<stdin>", [Flaw(f"is not UTF-8 text (byte {exc.start})")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise GateSourceError("<stdin>", [Flaw(f"holds more than {MAX_FILE_BYTES} bytes; a gate file is a few KiB")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GateSourceError("<stdin>", [Flaw(f"is not UTF-8 text (byte {exc.start})")]) from None


def example() -> str:
    """The commented example gate file (``kvcalc gate --init``): package data in a wheel
    (``kvcalc/examples/``), ``examples/`` in a checkout, found as the bundled presets are."""
    here = Path(__file__).resolve().parent.parent  # .../kvcalc
    for folder in (here / "examples", here.parent / "examples"):
        if (folder / EXAMPLE_FILE).is_file():
            return (folder / EXAMPLE_FILE).read_text(encoding="utf-8")
    raise KvcalcError(f"the example gate file is missing from this installation (examples/{EXAMPLE_FILE})")


def __getattr__(name: str) -> Any:
    if name == "EXAMPLE":  # read when asked for, not on every import
        return example()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- parsing


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


def _mapping_lines(node: Any) -> tuple[int, dict[str, int], list[Flaw]]:
    """Start line of a mapping node, the line of each key written in it, and duplicate keys."""
    from yaml.nodes import MappingNode, ScalarNode

    lines: dict[str, int] = {}
    dups: list[Flaw] = []
    if not isinstance(node, MappingNode):
        return node.start_mark.line + 1, lines, dups
    for k, _v in node.value:
        if isinstance(k, ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
            line = k.start_mark.line + 1
            if k.value in lines:
                dups.append(Flaw(f"key {k.value!r} is given twice (lines {lines[k.value]} and {line})", line))
            else:
                lines[k.value] = line
    return node.start_mark.line + 1, lines, dups


def _line_map(root: Any) -> tuple[dict, list[Flaw]]:
    """Lines of the top level, of defaults and of each deployment (for messages and annotations)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    out: dict[str, Any] = {"top": {}, "defaults": (None, {}), "deployments": []}
    problems: list[Flaw] = []
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


def parse_gate_yaml(text: str, path: str) -> tuple[Any, dict]:
    """YAML text -> plain data and line numbers, with yaml.SafeLoader's constructors only.

    The node graph is composed first and checked (nesting, alias count, size after alias
    expansion, duplicate keys) before any Python object is built."""
    import yaml

    if not text.strip():
        raise GateSourceError(path, [Flaw("is empty; start from `kvcalc gate --init`")])
    loader = _limited_loader(text)
    try:
        try:
            root = loader.get_single_node()
        except _Refused as exc:
            raise GateSourceError(path, [Flaw(str(exc), exc.line)]) from None
        except yaml.MarkedYAMLError as exc:
            raise GateSourceError(path, [_yaml_flaw(exc)]) from None
        except yaml.YAMLError as exc:
            raise GateSourceError(path, [Flaw(f"is not valid YAML: {' '.join(str(exc).split())}")]) from None
        except RecursionError:
            raise GateSourceError(path, [Flaw(f"nests collections too deeply (limit {MAX_DEPTH})")]) from None
        if root is None:
            raise GateSourceError(path, [Flaw("holds no YAML document (only comments?); start from `kvcalc gate --init`")])
        try:
            _expanded_size(root)
        except _Refused as exc:
            raise GateSourceError(path, [Flaw(str(exc), exc.line)]) from None
        lines, dups = _line_map(root)
        if dups:
            raise GateSourceError(path, dups)
        try:
            data = loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            raise GateSourceError(path, [_yaml_flaw(exc)]) from None
        except (yaml.YAMLError, TypeError, ValueError) as exc:
            raise GateSourceError(path, [Flaw(f"is not valid YAML: {' '.join(str(exc).split())}")]) from None
    finally:
        loader.dispose()
    return data, lines


def _yaml_flaw(exc: Any) -> Flaw:
    mark = exc.problem_mark or exc.context_mark
    context = exc.context or ""
    if context and exc.context_mark is not None and mark is not None and exc.context_mark.line != mark.line:
        context += f" (opened on line {exc.context_mark.line + 1})"
    what = " ".join(str(x) for x in (context, exc.problem) if x)
    what = " ".join(what.split()) or "syntax error"
    if mark is None:
        return Flaw(f"is not valid YAML: {what}")
    return Flaw(f"column {mark.column + 1}: invalid YAML: {what}", mark.line + 1)

