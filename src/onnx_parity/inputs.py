"""Datasets → deterministic feeds: random arrays, recorded .npz files and ONNX test-data folders."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.spec import DatasetSpec, InputSpec, ModelSpec

DEFAULT_RANDOM_SAMPLES = 2
EXPORT_BATCH = 2  # 0 and 1 get specialised by torch.export, so dynamic dims are traced at 2


@dataclass(frozen=True)
class Sample:
    """One forward pass: inputs in the model's order, and recorded reference outputs if any."""

    inputs: Mapping[str, np.ndarray]
    reference_by_name: Mapping[str, np.ndarray] = field(default_factory=dict)
    reference_by_position: tuple[np.ndarray, ...] = ()


def numpy_dtype(name: str) -> np.dtype[np.generic]:
    if name == "bfloat16":
        import ml_dtypes  # ships with onnx; numpy has no bfloat16 of its own

        return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return]  # untyped package
    return np.dtype(name)


def batch_sizes(dataset: DatasetSpec) -> tuple[tuple[int, ...], str | None]:
    """The batch sizes a dataset yields, without loading the model; an error text if unreadable."""
    if dataset.kind == "random":
        return dataset.batch_sizes or (1,), None
    if dataset.batch_sizes:
        return dataset.batch_sizes, None
    try:
        if dataset.kind == "npz":
            with np.load(_path(dataset), allow_pickle=False) as data:
                if not data.files:
                    raise LoadError(f"{_path(dataset)} holds no arrays")
                return (_batch_of(data[data.files[0]].shape, data.files[0], _path(dataset)),), None
        # The batch is input_0's first dimension: read that, not every tensor of every set.
        firsts = [folder / "input_0.pb" for folder in _test_set_folders(dataset)]
        return tuple(sorted({_first_dim(path) for path in firsts})), None
    except (LoadError, OSError, ValueError) as exc:
        return (), f"dataset '{dataset.name}': {exc}"


def oversized(model: ModelSpec, dataset: DatasetSpec, batch: int | None, budget: int) -> str | None:
    """The arithmetic, when a random dataset's inputs for one case would exceed `budget` bytes."""
    if dataset.kind != "random" or batch is None or not model.inputs:
        return None
    samples = dataset.samples or DEFAULT_RANDOM_SAMPLES
    terms, total = [], 0
    for spec in model.inputs:
        try:
            shape = concrete_shape(spec, batch, dataset.dims)
        except LoadError:
            return None  # reported with its own message when the case runs
        size = numpy_dtype(spec.dtype).itemsize
        total += samples * math.prod(shape) * size
        terms.append(f"{spec.name}: {samples} × {list(shape)} × {size} B")
    if total <= budget:
        return None
    return (f"inputs would take {_bytes(total)} ({'; '.join(terms)}), over the budget of "
            f"{_bytes(budget)} per case; check the shapes, or raise --max-input-mb")


def _bytes(count: int) -> str:
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.1f} MiB"


def random_samples(
    dataset: DatasetSpec, batch: int, inputs: Sequence[InputSpec], dims: Mapping[str, int]
) -> tuple[Sample, ...]:
    """Seeded per (seed, input name, batch, sample): the same whatever else the spec holds."""
    count = dataset.samples or DEFAULT_RANDOM_SAMPLES
    return tuple(
        Sample(inputs={
            spec.name: random_array(spec, dataset, batch, index, dims) for spec in inputs
        })
        for index in range(count)
    )


def random_array(
    spec: InputSpec, dataset: DatasetSpec, batch: int, index: int, dims: Mapping[str, int]
) -> np.ndarray:
    shape = concrete_shape(spec, batch, dims)
    rng = np.random.default_rng([dataset.seed, zlib.crc32(spec.name.encode()), batch, index])
    dtype = numpy_dtype(spec.dtype)
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        int_low = int(spec.low if spec.low is not None else 0)
        int_high = int(spec.high if spec.high is not None else 2)
        return rng.integers(int_low, int_high, size=shape).astype(dtype)
    low = spec.low if spec.low is not None else dataset.low
    high = spec.high if spec.high is not None else dataset.high
    if dataset.distribution == "uniform" or spec.low is not None or spec.high is not None:
        values = rng.uniform(0.0 if low is None else low, 1.0 if high is None else high,
                             size=shape)
    else:
        values = rng.standard_normal(size=shape)
    return values.astype(dtype)


def concrete_shape(spec: InputSpec, batch: int, dims: Mapping[str, int]) -> tuple[int, ...]:
    """A named dim at axis 0 is the batch; any other named dim takes its size from `dims`."""
    shape: list[int] = []
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int):
            shape.append(dim)
        elif axis == 0:
            shape.append(batch)
        elif dim in dims:
            shape.append(dims[dim])
        else:
            raise LoadError(
                f"input '{spec.name}' has the named dimension '{dim}' at axis {axis}; random data"
                f" needs its size: set `dims: {{{dim}: N}}` on the dataset"
            )
    return tuple(shape)


def recorded_samples(
    dataset: DatasetSpec, batch: int, inputs: Sequence[InputSpec], outputs: Sequence[str]
) -> tuple[Sample, ...]:
    if dataset.kind == "npz":
        samples = _npz_samples(dataset, batch, inputs, outputs)
    else:
        samples = _test_data_samples(dataset, batch, inputs)
    return samples[: dataset.samples] if dataset.samples else samples


def _npz_samples(
    dataset: DatasetSpec, batch: int, inputs: Sequence[InputSpec], outputs: Sequence[str]
) -> tuple[Sample, ...]:
    path = _path(dataset)
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    missing = [spec.name for spec in inputs if spec.name not in arrays]
    if missing:
        raise LoadError(
            f"{path} has no array for input(s) {', '.join(missing)}; it holds "
            f"{', '.join(arrays) or 'nothing'}"
        )
    total = _batch_of(arrays[inputs[0].name].shape, inputs[0].name, path)
    used = set(outputs) | {s.name for s in inputs}
    for name, array in arrays.items():
        if name in used and _batch_of(array.shape, name, path) != total:
            raise LoadError(
                f"{path}: array '{name}' has {array.shape[0]} rows on its first (batch) axis,"
                f" '{inputs[0].name}' has {total}"
            )
    if batch > total:
        raise LoadError(f"{path} holds {total} rows, fewer than batch size {batch}")
    return tuple(
        Sample(
            inputs={spec.name: arrays[spec.name][start:start + batch] for spec in inputs},
            reference_by_name={
                name: arrays[name][start:start + batch] for name in outputs if name in arrays
            },
        )
        for start in range(0, total - batch + 1, batch)
    )


def _test_data_samples(
    dataset: DatasetSpec, batch: int, inputs: Sequence[InputSpec]
) -> tuple[Sample, ...]:
    samples = []
    for folder, (arrays_in, arrays_out) in _test_sets(dataset):
        if _batch_of(arrays_in[0].shape, "input_0", folder) != batch:
            continue
        if len(arrays_in) != len(inputs):
            raise LoadError(
                f"{folder} has {len(arrays_in)} input_N.pb files, the model has {len(inputs)}"
                f" inputs ({', '.join(s.name for s in inputs)})"
            )
        samples.append(Sample(
            inputs={spec.name: array for spec, array in zip(inputs, arrays_in, strict=True)},
            reference_by_position=tuple(arrays_out),
        ))
    return tuple(samples)


TestSet = tuple[Path, tuple[list[np.ndarray], list[np.ndarray]]]


def _test_sets(dataset: DatasetSpec) -> list[TestSet]:
    return [(f, (_read_tensors(f, "input"), _read_tensors(f, "output")))
            for f in _test_set_folders(dataset)]


def _test_set_folders(dataset: DatasetSpec) -> list[Path]:
    """The data sets under the folder: itself if it holds input_0.pb, else its test_data_set_*."""
    root = _path(dataset)
    folders = [root] if (root / "input_0.pb").exists() else sorted(
        p for p in root.glob("test_data_set_*") if p.is_dir()
    )
    if not folders:
        raise LoadError(f"{root} holds neither input_0.pb nor test_data_set_* folders")
    return folders


def _read_tensors(folder: Path, prefix: str) -> list[np.ndarray]:
    from onnx import numpy_helper

    arrays = []
    index = 0
    while (path := folder / f"{prefix}_{index}.pb").exists():
        arrays.append(numpy_helper.to_array(_read_tensor(path)))
        index += 1
    return arrays


def _read_tensor(path: Path) -> Any:
    import onnx

    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(path.read_bytes())
    except Exception as exc:  # protobuf raises its own DecodeError type
        raise LoadError(f"{path} is not a serialized TensorProto: {exc}") from exc
    return tensor


def _first_dim(path: Path) -> int:
    return _batch_of(tuple(_read_tensor(path).dims), "input_0", path.parent)


def _batch_of(shape: Sequence[int], name: str, where: Path) -> int:
    if not shape:
        raise LoadError(f"{where}: array '{name}' is a scalar; its first axis must be the batch")
    return int(shape[0])


def _path(dataset: DatasetSpec) -> Path:
    if dataset.path is None:
        raise LoadError(f"dataset '{dataset.name}' has no path")
    return dataset.path
