"""``@record``: frozen dataclasses without the start-up cost, the one record system of the core.

``dataclasses.dataclass`` compiles several methods per class with ``exec``, ~1.5 ms a
class, and the module itself takes ~2 ms to import; kvcalc has dozens of such classes on
the path of ``kvcalc size`` and a start-up budget of a few milliseconds. ``record`` gives
the same behaviour from methods written once here: keyword/positional ``__init__`` with
defaults and ``default_factory`` (a class made more than 64 times gets its own compiled
``__init__``, 3x faster, for sweeps), ``__post_init__``, frozen attributes, ``__eq__`` and
``__hash__`` over the compared fields (the hash is computed once per record and kept:
records are immutable and are used as cache keys), ``__repr__``. ``replace`` and
``fields`` of this module work like dataclasses'; ``typing.dataclass_transform`` tells
type checkers so.

``dataclasses.replace``, ``fields``, ``asdict`` and ``is_dataclass`` accept records too:
``__dataclass_fields__`` is built on first use (and only then is ``dataclasses``
imported), from a shadow class made with the public ``dataclasses.make_dataclass``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Generic, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)
R = TypeVar("R")

__all__ = ["MISSING", "Field", "FrozenInstanceError", "cached_property", "field", "fields", "record", "replace"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_HASH = "__record_hash__"  # where a record keeps its hash (instance dict, never pickled)


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


class cached_property(Generic[R]):  # noqa: N801 - named as functools' (which takes a lock per first use)
    """A property of a record computed once and kept in the instance (records are immutable)."""

    def __init__(self, func: Callable[[Any], R]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached_property[R]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> R: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


def field(*, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True, hash: bool | None = None) -> Any:  # noqa: A002
    """Like ``dataclasses.field``: a default factory, or a field left out of ==/hash."""
    return Field(default, default_factory, compare)


_HOT = 64  # instances of a class after which its own __init__ is compiled
_made: dict[type, int] = {}


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """``__init__`` of every record class until it is hot: then its own is compiled."""
    cls = type(self)
    made = _made[cls] = _made.get(cls, 0) + 1
    if made >= _HOT:
        init = _compile_init(cls)
        setattr(cls, "__init__", init)  # noqa: B010
        init(self, *args, **kwargs)
        return
    names, defaults, factories, post, nameset = cls.__record_spec__
    if args:
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments but {len(args)} were given")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            kwargs[name] = value
    values = {**defaults, **kwargs}
    if len(values) != len(names) or not values.keys() <= nameset:
        for name in names:
            if name not in values:
                if name not in factories:
                    raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
                values[name] = factories[name]()
        for name in kwargs:
            if name not in nameset:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
    self.__dict__.update(values)
    if post is not None:
        post(self)


def _compile_init(cls: type) -> Callable[..., None]:
    """An ``__init__`` written for the class's fields, compiled once the class is hot (one
    small ``exec``, ~0.1-0.3 ms: too dear for a class made a few times per command).
    Every parameter defaults to MISSING so that a required field may follow a defaulted
    one, as in records with bases."""
    names, defaults, factories, post, _ = cls.__record_spec__  # type: ignore[attr-defined]
    ns: dict[str, Any] = {"_rec_M": MISSING, "_rec_post": post, "_rec_TypeError": TypeError}
    body = ["  _rec_d = self.__dict__"]
    for i, n in enumerate(names):
        if n in defaults:
            ns[f"_rec_{i}"] = defaults[n]
            body.append(f"  _rec_d[{n!r}] = _rec_{i} if {n} is _rec_M else {n}")
        elif n in factories:
            ns[f"_rec_{i}"] = factories[n]
            body.append(f"  _rec_d[{n!r}] = _rec_{i}() if {n} is _rec_M else {n}")
        else:
            message = f"{cls.__name__}() missing required argument: {n!r}"
            body.append(f"  if {n} is _rec_M:\n    raise _rec_TypeError({message!r})")
            body.append(f"  _rec_d[{n!r}] = {n}")
    if post is not None:
        body.append("  _rec_post(self)")
    params = "".join(f", {n}=_rec_M" for n in names)
    exec(f"def __init__(self{params}):\n" + "\n".join(body), ns)  # noqa: S102 - our own source
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init  # type: ignore[no-any-return]


def _eq(self: Any, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    if self is other:
        return True
    key = self.__record_key__
    return bool(key(self) == key(other))


def _hash(self: Any) -> int:
    d = self.__dict__
    h = d.get(_HASH)
    if h is None:
        h = d[_HASH] = hash((type(self).__name__, self.__record_key__(self)))
    return h


def _getstate(self: Any) -> dict[str, Any]:
    # string hashes differ between processes: a copy or an unpickled record hashes afresh
    return {k: v for k, v in self.__dict__.items() if k != _HASH}


def _repr(self: Any) -> str:
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_spec__[0])
    return f"{type(self).__name__}({inner})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _key_getter(compared: tuple[str, ...]) -> Callable[[Any], tuple]:
    if len(compared) > 1:
        return attrgetter(*compared)
    if compared:
        get = attrgetter(compared[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


class _DataclassFields:
    """``__dataclass_fields__`` built on first use, so dataclasses' helpers accept records.

    The ``dataclasses.Field`` objects come from ``dataclasses.make_dataclass`` (a shadow
    class with the same fields, no generated methods), so only public API is used."""

    def __get__(self, instance: Any, owner: type) -> dict:
        import dataclasses

        spec: list[tuple[str, Any, Any]] = []
        late: dict[str, Any] = {}
        for f in owner.__record_fields__.values():  # type: ignore[attr-defined]
            kw: dict[str, Any] = {"compare": f.compare}
            if f.default is not MISSING:
                if type(f.default).__hash__ is None:  # dataclasses refuses mutable defaults
                    late[f.name] = f.default
                else:
                    kw["default"] = f.default
            elif f.default_factory is not MISSING:
                kw["default_factory"] = f.default_factory
            spec.append((f.name, f.type, dataclasses.field(**kw)))
        shadow = dataclasses.make_dataclass(owner.__name__, spec, init=False, repr=False, eq=False)
        out = {f.name: f for f in dataclasses.fields(shadow)}
        for name, value in late.items():
            out[name].default = value
        type.__setattr__(owner, "__dataclass_fields__", out)
        return out


@overload
def record(cls: T, /) -> T: ...


@overload
def record(*, frozen: bool = True) -> Callable[[T], T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: T | None = None, /, *, frozen: bool = True) -> Any:
    """Make ``cls`` a frozen record of its annotated fields (bases' fields first).
    ``@record(frozen=False)``: fields may be assigned, and the record is unhashable (as a
    dataclass with eq and not frozen)."""
    if cls is None:
        return lambda c: _make(c, frozen)
    return _make(cls, frozen)


def _make(cls: T, frozen: bool) -> T:
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
    post = getattr(cls, "__post_init__", None)
    members: dict[str, Any] = {
        "__record_fields__": found,
        "__record_spec__": (names, defaults, factories, post, frozenset(names)),
        "__record_key__": staticmethod(_key_getter(compared)),
        "__dataclass_fields__": _DataclassFields(),
        "__init__": _init,
        "__eq__": _eq,
        "__hash__": _hash,
        "__repr__": _repr,
        "__getstate__": _getstate,
        "__setattr__": _setattr,
        "__delattr__": _delattr,
    }
    if not frozen:
        members["__hash__"] = None
        del members["__setattr__"], members["__delattr__"]
    for name, value in members.items():
        setattr(cls, name, value)
    return cls


def fields(obj: Any) -> tuple[Field, ...]:
    cls: Any = obj if isinstance(obj, type) else type(obj)
    return tuple(cls.__record_fields__.values())


def replace(obj: Any, /, **changes: Any) -> Any:
    """A copy of a record with some fields changed (``dataclasses.replace`` for records): the
    fields copied as they are (every default and factory already applied), the changes put
    in, then ``__post_init__`` run, as ``__init__`` would (a sweep makes one per row)."""
    cls = type(obj)
    names, _, _, post, nameset = cls.__record_spec__
    if not changes.keys() <= nameset:
        unknown = sorted(set(changes) - nameset)
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    new = object.__new__(cls)
    values = new.__dict__
    values.update(obj.__dict__)  # the fields, in order (one copy of the instance dict: a sweep makes one per row)
    if len(values) != len(names):  # values kept on the instance (its hash, cached properties): not copied
        for k in [k for k in values if k not in nameset]:
            del values[k]
    values.update(changes)
    if post is not None:
        post(new)
    return new
