"""`@frozen`: the frozen dataclass every stage hands to the next, made at a fraction of the cost.

A `@dataclass(frozen=True)` compiles six methods from source when its class is made (`__init__`,
`__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`), about 0.1 to 0.3 ms each on
Python 3.11: with the hundred-odd value types a worker imports, a tenth of a second of every
run, more than a small check's own work. `@frozen` lets dataclasses find the fields (defaults,
factories, `repr=False`, ClassVars left out) and compiles one method, the constructor, which
sets each field as a frozen dataclass's does and calls `__post_init__` where the class has one;
it is compiled once the class has made COMPILE_AFTER values, a generic one making those (most
classes make only a few values in a run). Every class shares the other five: equality, hash and
repr read the fields through one `operator.attrgetter` per class, and assignment and deletion
raise FrozenInstanceError.

They behave as the generated ones do: equal when of the same class with equal fields (compared
as a tuple, so a field that is the same NaN object is equal to itself), hashed as that tuple,
shown as `Name(field=value, ...)` without the fields declared `repr=False`. `dataclasses.fields`,
`replace`, `asdict`, pickling and copying work as on any dataclass; `replaced` is `replace`
without the constructor, for the values a hot path remakes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

__all__ = ["frozen", "replaced"]


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type[T]) -> type[T]:
    """`cls` as a frozen dataclass, compared, hashed and shown by its fields."""
    undocumented = cls.__doc__ is None
    if undocumented:  # else dataclass words one from object.__init__'s text: 9 ms, the first time
        cls.__doc__ = cls.__name__
    made = dataclass(init=False, repr=False, eq=False)(cls)
    every = fields(made)  # type: ignore[arg-type]  # made a dataclass just above
    if undocumented:
        made.__doc__ = f"{made.__name__}({', '.join(f.name for f in every if f.init)})"
    shared: dict[str, Any] = {
        "__init__": _deferred(made, every),
        "__setattr__": _refuse_assignment, "__delattr__": _refuse_deletion,
        "__frozen_values__": staticmethod(_getter(tuple(f.name for f in every if f.compare))),
        "__frozen_shown__": tuple(f.name for f in every if f.repr),
        "__eq__": _eq, "__hash__": _hash, "__repr__": _repr,
    }
    for name, value in shared.items():
        if name not in made.__dict__:  # what the class body defines is its own
            setattr(made, name, value)
    return made


def replaced(value: T, **changes: Any) -> T:
    """`dataclasses.replace(value, **changes)`, made without calling the constructor again where
    that makes the same value: a `@frozen` class with no `__post_init__`, whose `__dict__` holds
    its fields alone (assignment is refused). Its fields are copied and the changed ones set,
    a few microseconds where the constructor of a class of thirty fields takes ten; a name that
    is no field is refused as replace() refuses it. Any other class goes through replace()."""
    kind = type(value)
    if not hasattr(kind, "__frozen_values__") or hasattr(kind, "__post_init__"):
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    unknown = changes.keys() - value.__dict__.keys()
    if unknown:
        raise TypeError(f"{kind.__name__} has no field {', '.join(sorted(unknown))}")
    made: T = object.__new__(kind)
    made.__dict__.update(value.__dict__, **changes)
    return made


COMPILE_AFTER = 64  # values a class makes through the generic constructor, then it compiles one


def _deferred(cls: type, every: tuple[Field[Any], ...]) -> Callable[..., None]:
    """A stand-in `__init__`: the class's first values are made by a generic constructor, and
    the one compiled for the class is put in its place once it has made COMPILE_AFTER of them.
    Compiling costs 0.15 to 0.35 ms a class; a small check makes a few values each of some
    thirty classes, a suite of thousands of models many of a few."""
    names = tuple(f.name for f in every)
    defaults = {f.name: f.default for f in every if f.default is not MISSING}
    factories = {f.name: f.default_factory for f in every if f.default_factory is not MISSING}
    post = hasattr(cls, "__post_init__")
    made = 0

    def __init__(__self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        made += 1
        if made >= COMPILE_AFTER:
            compiled = _constructor(cls, every)
            type.__setattr__(cls, "__init__", compiled)
            compiled(__self, *args, **kwargs)
            return
        if len(args) > len(names):
            raise TypeError(f"{cls.__qualname__}.__init__() takes {len(names) + 1} positional "
                            f"arguments but {len(args) + 1} were given")
        given = dict(zip(names, args, strict=False))  # the first fields, by position
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for "
                                f"argument {name!r}")
            if name not in names:
                raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword "
                                f"argument {name!r}")
            given[name] = value
        for name in names:
            if name in given:
                value = given[name]
            elif name in defaults:
                value = defaults[name]
            elif name in factories:
                value = factories[name]()
            else:
                raise TypeError(f"{cls.__qualname__}.__init__() missing required argument: "
                                f"{name!r}")
            object.__setattr__(__self, name, value)
        if post:
            __self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _constructor(cls: type, every: tuple[Field[Any], ...]) -> Callable[..., None]:
    """`__init__(self, field, ..., field=default, ...)`, setting each field past the frozen
    `__setattr__`; a field with a factory gets a fresh value unless one is passed."""
    scope: dict[str, Any] = {"__set": object.__setattr__, "__missing": MISSING}
    parameters, lines = ["__self"], []
    for f in every:
        value = f.name
        if f.default is not MISSING:
            scope[f"__default_{f.name}"] = f.default
            parameters.append(f"{f.name}=__default_{f.name}")
        elif f.default_factory is not MISSING:
            scope[f"__factory_{f.name}"] = f.default_factory
            parameters.append(f"{f.name}=__missing")
            value = f"__factory_{f.name}() if {f.name} is __missing else {f.name}"
        else:
            parameters.append(f.name)
        lines.append(f"    __set(__self, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        lines.append("    __self.__post_init__()")
    source = f"def __init__({', '.join(parameters)}):\n" + ("\n".join(lines) or "    pass")
    exec(compile(source, f"<frozen {cls.__module__}.{cls.__qualname__}>", "exec"), scope)
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _refuse_assignment(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_deletion(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as a tuple, whatever their number (attrgetter of one name returns
    the bare value)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(self: Any, other: Any) -> object:
    if other.__class__ is self.__class__:
        return bool(self.__frozen_values__(self) == other.__frozen_values__(other))
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__frozen_values__(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__frozen_shown__)
    return f"{self.__class__.__qualname__}({shown})"
