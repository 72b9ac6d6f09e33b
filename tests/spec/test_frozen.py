"""`@frozen` behaves as `@dataclass(frozen=True)` does: equality, hash, repr, immutability."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, field
from typing import Any, Generic, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx_parity.frozen import frozen, replaced

T = TypeVar("T")


@frozen
class Three:
    a: Any
    b: Any = None
    c: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class ThreeDataclass:
    a: Any
    b: Any = None
    c: tuple[Any, ...] = ()


@frozen
class One:
    a: Any


@dataclasses.dataclass(frozen=True)
class OneDataclass:
    a: Any


@frozen
class Empty(Generic[T]):
    """A key of no field, as run/keys.py's base is."""


@frozen
class Child(Empty[int]):
    name: str
    secret: Mapping[str, str] = field(default_factory=dict, repr=False)


VALUES = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True, width=32),
                   st.text(max_size=3), st.tuples(st.integers(0, 2), st.floats(allow_nan=True)))
NAN = math.nan


@given(VALUES, VALUES, VALUES, VALUES, VALUES, VALUES)
def test_equality_and_hash_are_the_dataclass_ones(a: Any, b: Any, c: Any, x: Any, y: Any,
                                                  z: Any) -> None:
    ours, theirs = (Three(a, b, (c,)), Three(x, y, (z,))), \
        (ThreeDataclass(a, b, (c,)), ThreeDataclass(x, y, (z,)))
    assert (ours[0] == ours[1]) == (theirs[0] == theirs[1])
    assert (ours[0] != ours[1]) == (theirs[0] != theirs[1])
    assert (One(a) == One(x)) == (OneDataclass(a) == OneDataclass(x))
    assert repr(ours[0]) == repr(theirs[0]).replace("ThreeDataclass", "Three")
    assert hash(ours[0]) == hash(theirs[0])
    if ours[0] == ours[1]:
        assert hash(ours[0]) == hash(ours[1])


def test_the_same_nan_object_is_equal_to_itself_as_in_a_tuple() -> None:
    assert One(NAN) == One(NAN)  # (nan,) == (nan,): the same object
    assert One(float("nan")) != One(float("nan"))
    assert OneDataclass(NAN) == OneDataclass(NAN)


def test_other_classes_are_never_equal() -> None:
    assert Three(1) != ThreeDataclass(1)
    assert Three(1) != (1, None, ())
    assert Empty() == Empty()
    assert Child("x") != Empty()
    assert Child("x") == Child("x")
    assert {One("x"): 1}[One("x")] == 1 and hash(Empty()) == hash(Empty())
    with pytest.raises(TypeError, match="unhashable"):  # as the dataclass's own: a dict field
        hash(Child("x"))


def test_repr_leaves_out_what_the_field_hides() -> None:
    assert repr(Child("x", {"GITHUB_TOKEN": "ghp_secret"})) == "Child(name='x')"
    assert repr(Empty()) == "Empty()"
    assert repr(One("a")) == "One(a='a')"


def test_fields_cannot_be_assigned_or_deleted() -> None:
    value = Three(1, 2)
    with pytest.raises(FrozenInstanceError):
        value.a = 3  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del value.b
    with pytest.raises(FrozenInstanceError):
        value.other = 1  # type: ignore[attr-defined]
    assert value == Three(1, 2)


def test_it_is_a_dataclass_as_the_stages_use_one() -> None:
    value = Child("x", {"k": "v"})
    assert dataclasses.is_dataclass(value)
    assert [f.name for f in dataclasses.fields(value)] == ["name", "secret"]
    assert dataclasses.replace(value, name="y") == Child("y", {"k": "v"})
    assert dataclasses.asdict(value) == {"name": "x", "secret": {"k": "v"}}
    assert pickle.loads(pickle.dumps(value)) == value
    assert Three.__match_args__ == ("a", "b", "c")


@frozen
class Checked:
    text: str
    shown: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", self.text.upper())


def test_replaced_is_replace_without_the_constructor_where_that_is_the_same() -> None:
    value = Child("x", {"k": "v"})
    made = replaced(value, name="y")
    assert made == dataclasses.replace(value, name="y") and made.secret is value.secret
    assert repr(made) == "Child(name='y')" and value.name == "x"
    with pytest.raises(TypeError, match="no field colour"):
        replaced(value, colour="red")
    # __post_init__ derives a field: replace() runs it, and so does replaced()
    assert replaced(Checked("a"), text="b") == Checked("b") == dataclasses.replace(
        Checked("a"), text="b")
    assert replaced(ThreeDataclass(1), b=2) == ThreeDataclass(1, 2)  # not @frozen: replace()


def test_the_generic_constructor_and_the_compiled_one_take_what_the_dataclass_one_takes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx_parity.frozen as frozen_module

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}), ((1, [3]), {}), ((), {"a": 1}), ((1,), {"b": [4]}), ((), {}), ((1, [], 3), {}),
        ((1,), {"c": 3}), ((1,), {"a": 2}), ((), {"b": []})]

    def made_by(kind: Any) -> list[Any]:
        outcomes: list[Any] = []
        for args, kwargs in calls:
            try:
                value = kind(*args, **kwargs)
            except TypeError:
                outcomes.append(TypeError)
            else:
                outcomes.append((value.a, value.b, value.shown))
        return outcomes

    def late(decorate: Any = frozen) -> Any:
        @decorate
        class Late:
            a: int
            b: list[int] = field(default_factory=list)
            shown: str = ""

            def __post_init__(self) -> None:
                object.__setattr__(self, "shown", f"{self.a}:{self.b}")

        return Late

    expected = made_by(late(dataclasses.dataclass(frozen=True)))
    generic = late()
    stand_in = generic.__init__
    assert made_by(generic) == expected and generic.__init__ is stand_in  # generic throughout
    monkeypatch.setattr(frozen_module, "COMPILE_AFTER", 2)
    compiled = late()
    assert made_by(compiled) == expected and compiled.__init__ is not stand_in
    assert compiled(1).b is not compiled(1).b  # a fresh value from the factory, each time

    class Plain(late()):  # type: ignore[misc]  # not @frozen: made with its base's constructor
        pass

    assert made_by(Plain) == expected
    assert Three.__doc__ == "Three(a, b, c)"
    assert Empty.__doc__ == "A key of no field, as run/keys.py's base is."
