"""``@record``: frozen dataclasses without the start-up cost.

``dataclasses.dataclass`` compiles several methods per class with ``exec``, ~1.5 ms a
class, and the module itself takes ~2 ms to import; kvcalc has dozens of such classes on
the path of ``kvcalc size`` and a start-up budget of a few milliseconds. ``record`` gives
the same behaviour from methods written once here: keyword/positional ``__init__`` with
defaults and ``default_factory``, ``__post_init__``, frozen attributes, ``__eq__`` and
``__hash__`` over the compared fields, ``__repr__``; ``replace``/``fields`` of this module
work like dataclasses'. ``dataclasses.replace``, ``fields``, ``asdict`` and
``is_dataclass`` work on records too: their ``__dataclass_fields__`` is built (and the
dataclasses module imported) only when something asks for it.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound=type)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a record."""


class Field:
    __slots__ = ("name", "type", "default", "default_factory", "compare")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True) -> None:
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True, hash: bool | None = None) -> Any:  # noqa: A002
    """Like ``dataclasses.field``: a default factory, or a field left out of ==/hash."""
    return Field(default, default_factory, compare)


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    names, defaults, factories, _ = type(self).__record_spec__
    if len(args) > len(names):
        raise TypeError(f"{type(self).__name__}() takes {len(names)} positional arguments but {len(args)} were given")
    setter = object.__setattr__
    for name, value in zip(names, args):
        if name in kwargs:
            raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
        setter(self, name, value)
    for name in names[len(args):]:
        if name in kwargs:
            setter(self, name, kwargs.pop(name))
        elif name in defaults:
            setter(self, name, defaults[name])
        elif name in factories:
            setter(self, name, factories[name]())
        else:
            raise TypeError(f"{type(self).__name__}() missing required argument: {name!r}")
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _key(self: Any) -> tuple:
    return tuple(getattr(self, n) for n in type(self).__record_spec__[3])


def _eq(self: Any, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _key(self) == _key(other)


def _hash(self: Any) -> int:
    return hash((type(self).__name__, _key(self)))


def _repr(self: Any) -> str:
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_spec__[0])
    return f"{type(self).__name__}({inner})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


class _DataclassFields:
    """``__dataclass_fields__`` built on first use, so dataclasses' helpers accept records."""

    def __get__(self, instance: Any, owner: type) -> dict:
        import dataclasses

        out = {}
        for f in owner.__record_fields__.values():
            kw: dict[str, Any] = {"compare": f.compare}
            if f.default is not MISSING:
                kw["default"] = f.default
            elif f.default_factory is not MISSING:
                kw["default_factory"] = f.default_factory
            df = dataclasses.field(**kw)
            df.name, df.type = f.name, f.type
            df._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what dataclasses.fields() lists
            out[f.name] = df
        type.__setattr__(owner, "__dataclass_fields__", out)
        return out


def record(cls: T) -> T:
    """Make ``cls`` a frozen record of its annotated fields (bases' fields first)."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        found.update(getattr(base, "__record_fields__", {}))
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        f.name, f.type = name, annotation
        found[name] = f
        if isinstance(value, Field):  # the class keeps plain defaults only
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    names = tuple(found)
    defaults = {n: f.default for n, f in found.items() if f.default is not MISSING}
    factories = {n: f.default_factory for n, f in found.items() if f.default_factory is not MISSING}
    compared = tuple(n for n, f in found.items() if f.compare)
    cls.__record_fields__ = found
    cls.__record_spec__ = (names, defaults, factories, compared)
    cls.__dataclass_fields__ = _DataclassFields()
    cls.__init__ = _init
    cls.__eq__ = _eq
    cls.__hash__ = _hash
    cls.__repr__ = _repr
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    return cls


def fields(obj: Any) -> tuple[Field, ...]:
    cls = obj if isinstance(obj, type) else type(obj)
    return tuple(cls.__record_fields__.values())


def replace(obj: Any, /, **changes: Any) -> Any:
    """A copy of a record with some fields changed (``dataclasses.replace`` for records)."""
    names = type(obj).__record_spec__[0]
    unknown = set(changes) - set(names)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    values = {n: getattr(obj, n) for n in names}
    values.update(changes)
    return type(obj)(**values)
