"""``@record``: frozen dataclasses without the start-up cost.

``dataclasses.dataclass`` compiles several methods per class with ``exec``, ~1.5 ms a
class; kvcalc has dozens on the path of ``kvcalc size`` and its start-up budget is a few
milliseconds. ``record`` gives the same behaviour from methods written once here:
keyword/positional ``__init__`` with defaults and ``default_factory``, ``__post_init__``,
frozen attributes, ``__eq__``/``__hash__`` over the compared fields, ``__repr__``; and it
registers real ``dataclasses.Field`` objects, so ``dataclasses.replace``, ``fields``,
``asdict`` and ``is_dataclass`` work on records unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T", bound=type)
_MISSING = dataclasses.MISSING
FrozenInstanceError = dataclasses.FrozenInstanceError


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    spec = type(self).__record_spec__
    names = spec[0]
    if len(args) > len(names):
        raise TypeError(f"{type(self).__name__}() takes {len(names)} positional arguments but {len(args)} were given")
    setter = object.__setattr__
    for name, value in zip(names, args):
        if name in kwargs:
            raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
        setter(self, name, value)
    defaults, factories = spec[1], spec[2]
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


def record(cls: T) -> T:
    """Make ``cls`` a frozen record of its annotated fields (bases' fields first)."""
    fields: dict[str, dataclasses.Field] = {}
    for base in reversed(cls.__mro__[1:]):
        fields.update(getattr(base, "__dataclass_fields__", {}))
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        value = cls.__dict__.get(name, _MISSING)
        if isinstance(value, dataclasses.Field):
            f = value
        else:
            f = dataclasses.field(default=value)
        f.name = name
        f.type = annotation
        f._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what dataclasses.fields() lists
        fields[name] = f
    names = tuple(fields)
    defaults = {n: f.default for n, f in fields.items() if f.default is not _MISSING}
    factories = {n: f.default_factory for n, f in fields.items() if f.default_factory is not _MISSING}
    compared = tuple(n for n, f in fields.items() if f.compare)
    for name, f in fields.items():  # class attributes keep plain defaults only
        if isinstance(cls.__dict__.get(name), dataclasses.Field):
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    cls.__dataclass_fields__ = fields
    cls.__record_spec__ = (names, defaults, factories, compared)
    cls.__init__ = _init
    cls.__eq__ = _eq
    cls.__hash__ = _hash
    cls.__repr__ = _repr
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    return cls
