"""The export cache's keys: a hash of everything that can change an export (the module's values,
the user's source files its import brought in, the spec's settings for it, the versions of the
tools), and of a reduced-precision variant (its float32 file, the precision, the calibration data).

A key that misses when nothing changed costs one export; a key that hits when something changed
would be a stale verdict. So where a doubt is possible the key takes more in, not less: every
user file a model's classes and imports reach, every value of every parameter and buffer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from onnx_parity.results import Exporter, Precision

# Bumped when what an entry holds, or how a key is made, changes.
KEY_FORMAT = 1

_TOOLS = ("torch", "onnx", "onnxscript", "onnxruntime", "onnx-parity")


def versions() -> dict[str, str]:
    """The versions of every tool an export or a variant depends on (and Python's)."""
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str]:
    """versions(), read once per process: the metadata is scanned from disk."""
    import importlib.metadata

    found = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in _TOOLS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    try:  # torch's own string carries its build (+cpu, +cu130), which the metadata may not
        import torch

        found["torch"] = str(torch.__version__)
    except ImportError:
        pass
    try:  # the GPU build of onnxruntime has its own distribution name
        import onnxruntime

        found["onnxruntime"] = str(onnxruntime.__version__)
    except ImportError:
        pass
    return found


@dataclass
class ImportWatch:
    """The modules that a block of code imported (or imported again): what is in sys.modules
    after it and was not, as the same object, before."""

    before: dict[str, ModuleType] = field(default_factory=dict)
    brought: list[ModuleType] = field(default_factory=list)

    def __enter__(self) -> ImportWatch:
        self.before = dict(sys.modules)
        return self

    def __exit__(self, *_: object) -> None:
        self.brought = [module for name, module in list(sys.modules.items())
                        if self.before.get(name) is not module]
        self.before = {}


def model_key(module: Any, brought: Iterable[ModuleType], settings: Mapping[str, Any],
              root: Path) -> str:
    """The part of an export's key that is the same at every opset: the module's values and
    classes, the user's files, the spec's `settings` for the model and the tools' versions.
    User files are named relative to the spec's folder `root`, so that another checkout of the
    same repository, in another folder, finds the same keys."""
    digest = hashlib.sha256()
    _feed(digest, {"format": KEY_FORMAT, "versions": versions(), "settings": settings})
    digest.update(module_digest(module, root).encode())
    _feed(digest, sources(module, brought, root))
    return digest.hexdigest()


def export_key(model: str, opset: int, exporter: Exporter, dims: Mapping[str, int]) -> str:
    """The key of one export: the model's part, at `opset`, with `exporter`, traced with
    example inputs of the dataset's named sizes `dims`."""
    return _hash({"model": model, "opset": opset, "exporter": exporter, "dims": dict(dims)})


def cacheable(module: Any) -> bool:
    """Whether an export of `module` is one file, as an entry holds it: its weights do not go to
    a side file (prepare/export.py)."""
    from onnx_parity.prepare.export import EXTERNAL_DATA_BYTES

    size = sum(p.numel() * p.element_size() for p in module.parameters())
    return bool(size <= EXTERNAL_DATA_BYTES)


def variant_key(source: Path, precision: Precision,
                calibration: Sequence[Mapping[str, Any]]) -> str:
    """The key of a reduced-precision variant: its float32 file's bytes (exported or shipped),
    the precision, the calibration data and the tools' versions (the converters are
    onnxruntime's and onnx's)."""
    digest = hashlib.sha256()
    _feed(digest, {"format": KEY_FORMAT, "versions": versions(), "precision": precision})
    with source.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    for feeds in calibration:
        for name in sorted(feeds):
            array = np.ascontiguousarray(feeds[name])
            _feed(digest, [name, str(array.dtype), list(array.shape)])
            digest.update(array.tobytes())
    return digest.hexdigest()


def module_digest(module: Any, root: Path) -> str:
    """Every parameter and buffer (name, dtype, shape, bytes), and each submodule's class and
    plain attributes (a LayerNorm's eps, a Dropout's p): what the factory left, as it left it."""
    import torch

    digest = hashlib.sha256()
    for name, sub in module.named_modules(remove_duplicate=False):
        kind = type(sub)
        plain = {key: repr(value) for key, value in sorted(vars(sub).items()) if _plain(value)}
        _feed(digest, [name, f"{_home(kind.__module__, root)}:{kind.__qualname__}", plain])
    tensors = [*module.named_parameters(remove_duplicate=False),
               *module.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        value = tensor.detach().cpu().contiguous().reshape(-1)
        _feed(digest, [name, str(value.dtype), list(tensor.shape)])
        if value.numel():
            digest.update(value.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _plain(value: Any) -> bool:
    """A value whose repr is itself (no object's address in it, which differs on every run)."""
    if isinstance(value, tuple | list):
        return all(_plain(item) for item in value)
    return isinstance(value, bool | int | float | str | type(None))


def sources(module: Any, brought: Iterable[ModuleType], root: Path) -> list[tuple[str, str]]:
    """(path, hash) of every user file that can change the export: the files of the module's
    own classes and of what the factory's import brought in, and each user module those reach
    through their globals (`import layers`, `from blocks import Block`). A user file is any
    Python file outside the standard library, the installed packages and onnx-parity."""
    start = [type(sub).__module__ for sub in module.modules()]
    start += [each.__name__ for each in brought]
    seen: set[str] = set()
    files: dict[str, str] = {}
    pending = list(dict.fromkeys(start))
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        found = sys.modules.get(name)
        path = _user_file(found)
        if found is None or path is None:
            continue
        files[_home(name, root)] = _file_hash(path)
        pending.extend(_reached(found))
    return sorted(files.items())


def _home(name: str, root: Path) -> str:
    """Where a module comes from, the same in every process: a user file by its path relative to
    `root` (the name a factory's file is imported under differs from one process to the next),
    anything else by its name."""
    path = _user_file(sys.modules.get(name))
    return name if path is None else os.path.relpath(path, root.resolve())


def _reached(module: ModuleType) -> Iterator[str]:
    """The modules a module's globals name: modules, and the home of classes and functions."""
    for value in list(vars(module).values()):
        if isinstance(value, ModuleType):
            yield value.__name__
        else:
            home = getattr(value, "__module__", None)
            if isinstance(home, str):
                yield home


def _user_file(module: ModuleType | None) -> Path | None:
    """The file of a user module; None for the standard library, installed packages and
    onnx-parity (by their paths as given first: a factory's import brings in hundreds)."""
    where = getattr(module, "__file__", None)
    if not isinstance(where, str) or not where.endswith(".py") or _installed(where):
        return None
    path = Path(where).resolve()
    return None if _installed(str(path)) else path


def _installed(where: str) -> bool:
    return ("site-packages" in where or "dist-packages" in where
            or where.startswith(_installed_roots()))


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """The folders of the standard library, the installed packages and onnx-parity, as given
    and resolved, each ending in a separator."""
    import sysconfig

    import onnx_parity

    folders = [sysconfig.get_paths()[n] for n in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders.append(str(Path(onnx_parity.__file__).parent))
    found = {os.path.join(f, "") for f in folders}
    found |= {os.path.join(str(Path(f).resolve()), "") for f in folders}
    return tuple(sorted(found))


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:  # a file that cannot be read cannot be vouched for: no key repeats
        return f"unreadable {os.urandom(16).hex()}"


def _feed(digest: Any, value: Any) -> None:
    digest.update(json.dumps(value, sort_keys=True, default=repr).encode())
    digest.update(b"\0")


def _hash(value: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()
