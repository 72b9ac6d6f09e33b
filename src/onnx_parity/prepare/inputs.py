"""Datasets → deterministic feeds: random arrays, recorded .npz files and ONNX test-data folders.

Recorded data is fed exactly as recorded (every tensor type numpy and ml_dtypes hold, scalars
included), unless the spec asks for batch sizes: then an npz file's inputs are cut into batches
along their batch axis (spec.model.batch_axes: the dim named `batch`, else the first) and its
outputs along their first axis, and an ONNX test-data folder keeps the sets whose first input
has that batch. Inputs whose dims named `batch` disagree are refused, naming input and axis.
The files are read by recorded.py, within the case's input budget.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.errors import CompareError, LoadError
from onnx_parity.frozen import frozen
from onnx_parity.plan.cases import DEFAULT_INPUT_BUDGET
from onnx_parity.plan.shapes import concrete_shape, numpy_dtype
from onnx_parity.prepare.recorded import Allowance, read_npz, read_value
from onnx_parity.spec import DatasetSpec, InputSpec
from onnx_parity.spec.model import BATCH, DEFAULT_RANDOM_SAMPLES, batch_axes

EXPORT_BATCH = 2  # 0 and 1 get specialised by torch.export, so dynamic dims are traced at 2


Recorded = Any  # an array, or a list / dict / None for a sequence, map or optional output


@frozen
class Sample:
    """One forward pass: inputs in the model's order, and recorded reference outputs if any."""

    inputs: Mapping[str, np.ndarray]
    reference_by_name: Mapping[str, Recorded] = field(default_factory=dict)
    reference_by_position: tuple[Recorded, ...] = ()
    # What the data holds beside the inputs (an npz file's other arrays, output_K.pb files),
    # named in a note where the reference is PyTorch's run instead (recorded_notes).
    recorded: tuple[str, ...] = ()


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


def recorded_samples(
    dataset: DatasetSpec, batch: int | None, inputs: Sequence[InputSpec], outputs: Sequence[str],
    output_types: Sequence[str] = (), budget: int = DEFAULT_INPUT_BUDGET,
) -> tuple[Sample, ...]:
    """The recorded samples, as recorded (`batch` None) or of one batch size. `output_types`
    are the outputs' declared ONNX types (tensor(float), seq(tensor(float)), ...): test data
    stores sequences and maps as their own protos, which only the declared type tells apart.
    The files may declare at most `budget` bytes (--max-input-mb), checked before loading."""
    allowance = Allowance(budget)
    if dataset.kind == "npz":
        samples = _npz_samples(dataset, batch, inputs, outputs, allowance)
    else:
        samples = _test_data_samples(dataset, batch, inputs, output_types, allowance)
    samples = samples[: dataset.samples] if dataset.samples else samples
    for index, sample in enumerate(samples):
        _check_batches(sample, inputs, f"dataset '{dataset.name}', sample {index + 1}")
        _check_kinds(sample, inputs, f"dataset '{dataset.name}', sample {index + 1}")
    return samples


def recorded_dims(dataset: DatasetSpec, inputs: Sequence[InputSpec]) -> dict[str, int]:
    """The sizes of the named dimensions (but the batch) in a recorded dataset's first sample:
    what an export for that data is traced at (empty for random data). Data that does not load
    raises its LoadError here, before an export that could not be traced at its sizes."""
    if dataset.kind == "random":
        return {}
    samples = recorded_samples(dataset, None, inputs, ())
    dims: dict[str, int] = {}
    first = samples[0].inputs if samples else {}
    for spec in inputs:
        array = first.get(spec.name)
        shape = np.shape(array) if array is not None else ()
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str) and dim != BATCH and axis < len(shape):
                dims.setdefault(dim, int(shape[axis]))
    return dims


def _check_kinds(sample: Sample, inputs: Sequence[InputSpec], where: str) -> None:
    """Recorded floats for an input of integers (token ids, indices) are refused here, naming
    both types, not deep in forward() or ONNX Runtime."""
    for spec in inputs:
        array = sample.inputs.get(spec.name)
        if array is None or not isinstance(array, np.ndarray):
            continue
        wanted = np.dtype(numpy_dtype(spec.dtype))
        # integers and floats by their kind letters, as np.issubdtype tells them apart
        if wanted.kind in "iu" and array.dtype.kind == "f":
            raise LoadError(
                f"{where}: input '{spec.name}' holds {array.dtype} values, and the model's "
                f"input is {spec.dtype}: record it as {spec.dtype} (numpy: "
                f"array.astype(np.{spec.dtype})), or give inputs.{spec.name}.dtype the type "
                "it was recorded in")


def _check_batches(sample: Sample, inputs: Sequence[InputSpec], where: str) -> None:
    """Every dim named `batch` has one size in a sample: the mismatch named here, not deep in
    forward() or ONNX Runtime."""
    seen: tuple[str, int, int] | None = None
    for spec in inputs:
        array = sample.inputs.get(spec.name)
        if array is None:
            continue
        for axis, dim in enumerate(spec.shape):
            if dim != BATCH or axis >= np.ndim(array):
                continue
            size = int(np.shape(array)[axis])
            if seen is None:
                seen = (spec.name, axis, size)
            elif size != seen[2]:
                raise LoadError(
                    f"{where}: input '{spec.name}' has {size} on axis {axis}, its batch "
                    f"dimension, but input '{seen[0]}' has {seen[2]} on axis {seen[1]}; record "
                    "the inputs with one batch size, or, if that axis is not the batch, give "
                    f"it another name than batch in inputs.{spec.name}.shape")


def _batch_axis(spec: InputSpec) -> int:
    """The axis an input is cut along: its batch axis, else its first."""
    return next(iter(batch_axes(spec.shape)), 0)


def _npz_samples(
    dataset: DatasetSpec, batch: int | None, inputs: Sequence[InputSpec], outputs: Sequence[str],
    allowance: Allowance,
) -> tuple[Sample, ...]:
    path = _path(dataset)
    arrays = read_npz(path, allowance)
    missing = [spec.name for spec in inputs if spec.name not in arrays]
    if missing:
        raise LoadError(
            f"{path} has no array for input(s) {', '.join(missing)}; it holds "
            f"{', '.join(arrays) or 'nothing'}"
        )
    recorded = tuple(name for name in arrays if name not in {spec.name for spec in inputs})
    if batch is None:
        return (Sample(inputs={spec.name: arrays[spec.name] for spec in inputs},
                       reference_by_name={n: arrays[n] for n in outputs if n in arrays},
                       recorded=recorded),)
    axes = {spec.name: _batch_axis(spec) for spec in inputs}
    first = inputs[0].name
    total = _batch_of(arrays[first].shape, first, path, axes[first])
    used = set(outputs) | set(axes)
    for name, array in arrays.items():
        axis = axes.get(name, 0)
        if name in used and _batch_of(array.shape, name, path, axis) != total:
            raise LoadError(
                f"{path}: array '{name}' has {array.shape[axis]} rows on axis {axis}, its batch "
                f"axis, '{first}' has {total} on axis {axes[first]}"
            )
    if batch > total:
        raise LoadError(f"{path} holds {total} rows, fewer than batch size {batch}")
    return tuple(
        Sample(
            inputs={spec.name: _rows(arrays[spec.name], axes[spec.name], start, batch)
                    for spec in inputs},
            reference_by_name={
                name: arrays[name][start:start + batch] for name in outputs if name in arrays
            },
            recorded=recorded,
        )
        for start in range(0, total - batch + 1, batch)
    )


def _rows(array: np.ndarray, axis: int, start: int, count: int) -> np.ndarray:
    """`count` rows from `start` along `axis`."""
    cut: list[slice] = [slice(None)] * array.ndim
    cut[axis] = slice(start, start + count)
    return array[tuple(cut)]


def _test_data_samples(
    dataset: DatasetSpec, batch: int | None, inputs: Sequence[InputSpec],
    output_types: Sequence[str], allowance: Allowance,
) -> tuple[Sample, ...]:
    samples = []
    for folder in _test_set_folders(dataset):
        names = _names(folder)
        arrays_in = _read_set(folder, names, "input", (), allowance)
        if batch is not None and (not arrays_in or _batch_of(
                np.shape(arrays_in[0]), "input_0", folder,
                _batch_axis(inputs[0]) if inputs else 0) != batch):
            continue
        if not arrays_in and inputs:
            raise LoadError(f"{folder} has no input_0.pb; the model has inputs "
                            f"({', '.join(s.name for s in inputs)})")
        if len(arrays_in) > len(inputs):
            raise LoadError(
                f"{folder} has {len(arrays_in)} input_N.pb files, the model has {len(inputs)}"
                f" inputs ({', '.join(s.name for s in inputs)})"
            )
        outputs = tuple(_read_set(folder, names, "output", output_types, allowance))
        samples.append(Sample(
            # By position; trailing optional inputs may have no file.
            inputs={spec.name: array for spec, array in zip(inputs, arrays_in, strict=False)},
            reference_by_position=outputs,
            recorded=tuple(f"output_{k}.pb" for k in range(len(outputs))),
        ))
    return tuple(samples)


def _test_set_folders(dataset: DatasetSpec) -> list[Path]:
    """The data sets under the folder: itself if it holds input_0.pb, else its test_data_set_*
    folders, in order; from one scan of the folder (a glob's machinery, or a stat a name,
    costs a node test more than reading its files)."""
    root = _path(dataset)
    try:
        with os.scandir(root) as entries:
            found = list(entries)
    except OSError:
        found = []
    if any(e.name == "input_0.pb" and _there(e) for e in found):
        return [root]
    folders = sorted(Path(e.path) for e in found
                     if e.name.startswith("test_data_set_") and e.is_dir())
    if not folders:
        raise LoadError(f"{root} holds neither input_0.pb nor test_data_set_* folders")
    return folders


def _names(folder: Path) -> set[str]:
    """What a data set's folder holds, by name, from one scan: its input_K.pb and output_K.pb
    are looked up here, not probed a stat each (the last probe of every set finds nothing)."""
    try:
        with os.scandir(folder) as entries:
            return {e.name for e in entries if _there(e)}
    except OSError:
        return set()


def _there(entry: os.DirEntry[str]) -> bool:
    """Whether a folder's entry leads somewhere, as os.path.exists says: a symlink that leads
    nowhere is as good as no file (the scan knows the rest without a stat)."""
    return not entry.is_symlink() or os.path.exists(entry.path)


def _read_set(folder: Path, names: set[str], prefix: str, types: Sequence[str],
              allowance: Allowance) -> list[Recorded]:
    """input_K.pb or output_K.pb in order, while `names` (the folder's) holds them; each read
    as its declared type says (a tensor when the type is not known)."""
    values = []
    index = 0
    while (name := f"{prefix}_{index}.pb") in names:
        values.append(read_value(folder / name, types[index] if index < len(types)
                                 else "tensor", allowance))
        index += 1
    return values


def _batch_of(shape: Sequence[int], name: str, where: Path, axis: int = 0) -> int:
    if not shape:
        raise LoadError(f"{where}: array '{name}' is a scalar; its first axis must be the batch")
    if len(shape) <= axis:
        raise LoadError(f"{where}: array '{name}' has rank {len(shape)}; its axis {axis} must "
                        "be the batch")
    return int(shape[axis])


def _path(dataset: DatasetSpec) -> Path:
    if dataset.path is None:
        raise LoadError(f"dataset '{dataset.name}' has no path")
    return dataset.path


def recorded_notes(dataset: DatasetSpec, samples: Sequence[Sample]) -> list[str]:
    """For a model with `torch:`, whose reference is its PyTorch module's run: the note that
    names the outputs its recorded data also holds, which are not compared, rather than drop
    them in silence ([] when it holds none)."""
    recorded = list(dict.fromkeys(name for sample in samples for name in sample.recorded))
    if not recorded:
        return []
    shown = ", ".join(recorded[:5]) + (f" and {len(recorded) - 5} more" if len(recorded) > 5
                                       else "")
    return [f"dataset '{dataset.name}' also holds recorded outputs ({shown}); they are not "
            "compared: with `torch:` the reference is the PyTorch module's own run (give the "
            "model as its ONNX file, without `torch:`, to compare with the recording)"]


def recorded_reference(dataset: DatasetSpec, sample: Any, names: Sequence[str],
                        ignored: Sequence[str] = ()) -> list[Any]:
    """The recorded output of each name, by name (npz) or by position (output_K.pb); an
    output left out of the comparison may be missing (None). Naming exactly what is missing."""
    if sample.reference_by_name or not sample.reference_by_position:
        found = dict(sample.reference_by_name)
        missing = [n for n in names if n not in found and n not in ignored]
        if not missing:
            return [found.get(n) for n in names]
        holds = ", ".join(found) or "no array named after an output"
        raise CompareError(
            f"dataset '{dataset.name}' has no reference for {', '.join(missing)} (it holds "
            f"{holds}); record it, or leave it out with ignore_outputs: [{', '.join(missing)}]")
    recorded = list(sample.reference_by_position)
    if len(recorded) == len(names):
        return recorded
    if len(recorded) < len(names) and all(n in ignored for n in names[len(recorded):]):
        return recorded + [None] * (len(names) - len(recorded))  # the trailing ones left out
    missing = [f"output_{k}.pb ({name})" for k, name in enumerate(names) if k >= len(recorded)]
    extra = len(recorded) - len(names)
    raise CompareError(
        f"dataset '{dataset.name}' holds {len(recorded)} output_N.pb files for the model's"
        f" {len(names)} outputs ({', '.join(names)})"
        + (f": {', '.join(missing)} missing" if missing else f": {extra} more than it has"))
