"""Reading recorded data files as untrusted input: an .npz archive member by member, and an ONNX
.pb proto with its external data resolved beside it. Sizes are checked against the case's input
budget (`--max-input-mb`) from what the files declare, before anything is loaded; every file
that cannot be read is a LoadError that names it and says what is wrong; pickled objects are
never loaded; arrays come back in the machine's byte order.
"""

from __future__ import annotations

import functools
import math
import os
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.errors import LoadError

_NPY = ".npy"
_STRING, _EXTERNAL = 8, 1  # onnx.TensorProto.STRING and .EXTERNAL, without importing onnx here


class Allowance:
    """What is left of the bytes a case's recorded data may take: each file's declared sizes
    are spent here before it is read, and past the budget the file is refused."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.left = budget

    def check(self, where: str | Path, what: str | Callable[[], str], size: int,
              verb: str = "takes") -> None:
        """Refuse `size` bytes past what is left, spending nothing. `what` may be given as a
        function: it is worded only for a refusal (a node test reads a few small files a case)."""
        if size > self.left:
            left = "" if self.left == self.budget else f" ({_size(self.left)} of them left)"
            said = what if isinstance(what, str) else what()
            raise LoadError(f"{where}: {said} {verb} {_size(size)}, more than the "
                            f"{_size(self.budget)} a case's recorded data may take{left} "
                            "(--max-input-mb)")

    def spend(self, where: str | Path, what: str | Callable[[], str], size: int) -> None:
        self.check(where, what, size)
        self.left -= size


def _size(size: int) -> str:
    return f"{size / (1 << 20):,.1f} MiB" if size >= 1 << 20 else f"{size:,} bytes"


def read_npz(path: Path, allowance: Allowance) -> dict[str, np.ndarray]:
    """Every array of an .npz file by name: a zip of .npy files, each member's declared sizes
    (in the zip's directory and in its .npy header) spent before it is decompressed."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise LoadError(f"{path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: a member's name is not UTF-8, though the zip says it is "
                        f"(byte 0x{exc.object[exc.start]:02x})") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
        raise LoadError(f"{path} is not an npz file (a zip of .npy arrays), or it is "
                        f"truncated: {exc}") from None
    with archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        for info in members:
            if not info.filename.endswith(_NPY):
                raise LoadError(f"{path}: member {info.filename!r} is not a .npy array; an npz "
                                "holds one .npy file per array")
        # What the zip says its members expand to, before any is decompressed (a zip bomb).
        allowance.check(str(path), "its members", sum(i.file_size for i in members),
                        verb="expand to")
        return {info.filename[: -len(_NPY)]: _member(archive, info, path, allowance)
                for info in members}


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path,
            allowance: Allowance) -> np.ndarray:
    where = f"{path}: member {info.filename!r}"
    try:
        with archive.open(info) as stream:
            shape, dtype = _header(stream, where)
            # Checked before numpy allocates what the header says, which the zip need not hold.
            allowance.spend(str(path), f"member {info.filename!r} ({dtype} {list(shape)})",
                            math.prod(shape) * dtype.itemsize)
        with archive.open(info) as stream:
            array = np.lib.format.read_array(stream, allow_pickle=False)
    except LoadError:
        raise
    except MemoryError:
        raise LoadError(f"{where} does not fit in memory") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError,
            NotImplementedError) as exc:
        # A damaged or truncated member, an encrypted one, an unknown compression.
        raise LoadError(f"{where} cannot be read (damaged or truncated?): {exc}") from None
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _header(stream: Any, where: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The shape and dtype a .npy header declares; refuses pickled objects."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(stream)
    except ValueError as exc:
        raise LoadError(f"{where} is not a .npy array: {exc}") from None
    if dtype.hasobject:
        raise LoadError(f"{where} holds Python objects (dtype {dtype}), which only unpickling "
                        "could load and onnx-parity never unpickles; save it with a numeric "
                        "dtype")
    return tuple(int(n) for n in shape), dtype


def read_value(path: Path, onnx_type: str, allowance: Allowance | None = None) -> Any:
    """A TensorProto as an array; a SequenceProto, MapProto or OptionalProto as a list, dict
    or None-or-value, as `onnx_type` (tensor(float), seq(...), map(...), optional(...)) says.
    External data resolves beside `path`; the file's size, each tensor's and its external
    data's are spent from `allowance` before they are read."""
    proto_type, convert = _reading(onnx_type.split("(", 1)[0])
    allowance = allowance or Allowance(1 << 62)
    try:  # one open: its size from the open file, checked before it is read
        with open(path, "rb") as handle:
            allowance.check(path, "the file", os.fstat(handle.fileno()).st_size)
            data = handle.read()
    except OSError as exc:
        raise LoadError(f"{path} cannot be read: {exc.strerror or exc}") from None
    proto = proto_type()
    try:
        proto.ParseFromString(data)
        for tensor in _tensors(proto):
            _spend_tensor(tensor, path, allowance)
        return convert(proto)
    except LoadError:
        raise
    except Exception as exc:  # protobuf's DecodeError, or onnx refusing what it parsed
        raise LoadError(f"{path} is not a serialized {proto_type.__name__} ({onnx_type}): "
                        f"{exc}") from exc


@functools.cache
def _reading(kind: str) -> tuple[Any, Callable[[Any], Any]]:
    """The proto a test data file of a declared type's kind holds, and what makes it a value
    (a node test reads a few small files a case: this is worked out once)."""
    import onnx
    from onnx import numpy_helper

    return {
        "seq": (onnx.SequenceProto, numpy_helper.to_list),
        "map": (onnx.MapProto, numpy_helper.to_dict),
        "optional": (onnx.OptionalProto, numpy_helper.to_optional),
    }.get(kind, (onnx.TensorProto, numpy_helper.to_array))


def _tensors(proto: Any) -> list[Any]:
    """Every TensorProto inside a proto of test data, however it nests."""
    import onnx

    if isinstance(proto, onnx.TensorProto):
        return [proto]
    if isinstance(proto, onnx.MapProto):
        return _tensors(proto.values)
    if isinstance(proto, onnx.OptionalProto):
        held = [getattr(proto, f) for f in ("tensor_value", "sequence_value", "map_value",
                                            "optional_value") if proto.HasField(f)]
        return [t for p in held for t in _tensors(p)]
    return [t for group in (proto.tensor_values, proto.sequence_values, proto.map_values,
                            proto.optional_values) for p in group for t in _tensors(p)]


def _spend_tensor(tensor: Any, path: Path, allowance: Allowance) -> None:
    """A tensor's declared size, and its external data loaded from beside `path` (not from the
    current directory, where onnx would look by default)."""
    name = f"tensor {tensor.name!r}" if tensor.name else "its tensor"
    if tensor.data_type == _STRING:
        declared = sum(len(text) for text in tensor.string_data)
    else:
        declared = math.prod(max(d, 0) for d in tensor.dims) * _itemsize(tensor.data_type)

    def what() -> str:
        return f"{name} {list(tensor.dims)}"

    allowance.check(path, what, declared)
    if tensor.data_location == _EXTERNAL:  # external_data_helper.uses_external_data
        _load_external(tensor, name, path, allowance)
    allowance.spend(path, what, declared)


@functools.cache
def _itemsize(data_type: int) -> int:
    from onnx import helper

    return int(np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize)


def _load_external(tensor: Any, name: str, path: Path, allowance: Allowance) -> None:
    """A tensor's external data, from beside `path`, its length checked before it is read."""
    from onnx import external_data_helper

    info = external_data_helper.ExternalDataInfo(tensor)
    folder = path.parent.resolve()
    data = (folder / info.location).resolve()
    if not data.is_relative_to(folder):
        raise LoadError(f"{path}: the external data of {name}, {info.location!r}, is not in "
                        f"the folder of the file that names it, {path.parent}")
    try:
        length = info.length if info.length is not None else (
            data.stat().st_size - (info.offset or 0))
    except OSError as exc:
        raise LoadError(f"{path}: the external data of {name}, {info.location!r} beside it, "
                        f"cannot be read: {exc.strerror or exc}") from None
    allowance.check(str(path), f"the external data of {name} ({info.location})", length)
    external_data_helper.load_external_data_for_tensor(tensor, str(path.parent))
