"""What every metric is: its tolerance key, how it is measured, how it reads and how far a value
is from its threshold (the `Metric` protocol), and the samples it is measured on.

A metric's module imports numpy inside its functions only: the spec and the words read the
registry in processes that never compare an array.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np

    Array = np.ndarray[Any, Any]
else:
    Array = Any


class Samples(NamedTuple):
    """One output's samples: the (reference, actual) arrays as given (their dtype is the
    output's), their float64 copies made once for every metric, and whether both sides hold
    finite values only: then no metric looks for a NaN or an infinity again (a small output's
    metrics are mostly such calls)."""

    given: Sequence[tuple[Array, Array]]
    pairs: list[tuple[Array, Array]]
    clean: bool


def samples(pairs: Sequence[tuple[Array, Array]]) -> Samples:
    import numpy as np

    wide = [(np.asarray(r, dtype=np.float64), np.asarray(a, dtype=np.float64)) for r, a in pairs]
    clean = all(np.isfinite(r).all() and np.isfinite(a).all() for r, a in wide)
    return Samples(pairs, wide, clean)


class Metric(Protocol):
    """One metric. `key` is its key in a spec's tolerance; the name it is recorded under in a
    report is `name(setting)` (topk's holds its k: "top5"). `better` says which way a value
    improves: "higher" passes at `value >= threshold`, "lower" at `value <= threshold`; a NaN
    fails either."""

    key: str
    better: Literal["higher", "lower"]
    # Measured on every floating output whether it gates or not (and so in every report), or
    # only where its key is set: a metric added later is, so that reports that do not use it
    # stay as they were.
    always: bool

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of its tolerance key."""
        ...

    def read(self, raw: Any) -> Any | None:
        """Its setting from the spec's value, already checked against `schema` (None: not
        given, or not whole)."""
        ...

    def written(self, setting: Any) -> Any:
        """The setting as a spec writes it (a repro bundle's spec)."""
        ...

    def name(self, setting: Any | None) -> str:
        """The name it is recorded under: the key, or for topk "top<k>" (k 1 without one)."""
        ...

    def owns(self, name: str) -> bool:
        """Whether a recorded name is this metric's."""
        ...

    def threshold(self, setting: Any) -> float:
        ...

    def measure(self, samples: Samples, setting: Any | None) -> float:
        ...

    def words(self, name: str) -> str:
        """How its name reads: "SQNR", "top-5 agreement"."""
        ...

    def value_text(self, value: float) -> str:
        """How a measured value reads: "31.2 dB"."""
        ...

    def threshold_text(self, threshold: float) -> str:
        """How a threshold reads, as the user wrote it: "20 dB"."""
        ...

    def units(self, value: float, threshold: float) -> float:
        """How far `value` is from a perfect match, in units of how far its threshold allows:
        1 at the threshold, above it fails (a finite value only)."""
        ...

    def unit(self, name: str, threshold: float) -> str:
        """What `units` counts, in words, for a chart's axis."""
        ...


class Settings(Mapping[str, Any]):
    """A tolerance's metric settings, tolerance key -> setting (a threshold; topk's TopK):
    hashed and compared by its items, so that the tolerance holding it stays a value."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items = dict(items or {})

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)


def holds(metric: Metric, value: float, threshold: float) -> bool:
    """Whether `value` meets `threshold` the way the metric improves, NaN failing."""
    if math.isnan(value):
        return False
    return value >= threshold if metric.better == "higher" else value <= threshold


class OneNumber:
    """What a metric whose setting is one number shares (all of them but top-k, whose setting
    is its k and agreement): the number is its threshold, written back as it was given, and the
    metric is recorded under its key. A metric overrides what differs."""

    key: str
    better: Literal["higher", "lower"] = "higher"
    always = True

    def read(self, raw: Any) -> Any | None:
        return number(raw)

    def written(self, setting: Any) -> Any:
        return setting

    def name(self, setting: Any | None) -> str:
        return self.key

    def owns(self, name: str) -> bool:
        return name == self.key

    def threshold(self, setting: Any) -> float:
        return float(setting)

    def words(self, name: str) -> str:
        return name

    def threshold_text(self, threshold: float) -> str:
        return f"{threshold:g}"


class Share(OneNumber):
    """What the metrics whose perfect value is 1 (cosine, top-k agreement) share: higher is
    better, and their distance from 1 against the threshold's is their units."""

    def value_text(self, value: float) -> str:
        return f"{value:.3g}"

    def units(self, value: float, threshold: float) -> float:
        allowed = 1.0 - threshold
        return (1.0 - value) / allowed if allowed > 0 else (math.inf if value < 1.0 else 0.0)

    def unit(self, name: str, threshold: float) -> str:
        words = self.words(name)
        return f"{words}: (1 - {words}) over (1 - {self.threshold_text(threshold)})"


def number(value: Any) -> float | None:
    """A finite number from a schema-checked value (YAML's int or float, never a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        found = float(value)
    except OverflowError:
        return None
    return found if math.isfinite(found) else None


def whole(value: Any) -> int | None:
    """An int, or a float that is one (JSON Schema's integer accepts 3.0)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None
