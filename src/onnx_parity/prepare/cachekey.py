"""The export cache's keys: a hash of everything that can change an export (the module's values,
the user's source files, the files its factory and first forward() read and the packages its
code imported (reads.py), the spec's settings for it, the versions of the tools), and of a
reduced-precision variant (its float32 file, the precision, the calibration data).

A key that misses when nothing changed costs one export; a key that hits when something changed
would be a stale verdict. So where a doubt is possible the key takes more in, not less: every
user file a model's classes and imports reach, every value of every parameter and buffer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

import onnx_parity
from onnx_parity.literals import Exporter, Precision
from onnx_parity.prepare.export import EXTERNAL_DATA_BYTES

if TYPE_CHECKING:
    from onnx_parity.prepare.reads import Recording

# Bumped when what an entry holds, or how a key is made, changes.
KEY_FORMAT = 2

_TOOLS = ("torch", "onnx", "onnxscript", "onnxruntime", "onnx-parity")
_KEYED = frozenset(tool.replace("-", "_") for tool in _TOOLS)  # as imported; versions() has them
_MACHINE = ("/proc/", "/sys/", "/dev/")  # the machine's state, not the model's


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


class Unvouched(Exception):
    """What a model's code read that no key can vouch for (a network connection, a file that
    cannot be read again); its export is made every run, not taken from the cache."""


def model_key(module: Any, reads: Recording, settings: Mapping[str, Any], root: Path) -> str:
    """The part of an export's key that is the same at every opset: the module's values and
    classes, the user's files (the modules its code reached, the files its factory and first
    forward() read, `reads`), the installed packages the user's code imported, the spec's
    `settings` for the model and the tools' versions. User files are named relative to the
    spec's folder `root`, so that another checkout of the same repository, in another folder,
    finds the same keys. Unvouched when the code did what no key can cover."""
    if reads.unsure:
        raise Unvouched(f"its factory or first forward() {' and '.join(reads.unsure)}")
    digest = hashlib.sha256()
    _feed(digest, {"format": KEY_FORMAT, "versions": versions(), "settings": settings})
    digest.update(module_digest(module, root).encode())
    files, packages = sources(module, imported(reads), root)
    _feed(digest, files)
    _feed(digest, read_files(reads.files, root))
    _feed(digest, distributions(packages))
    return digest.hexdigest()


def imported(reads: Recording) -> list[str]:
    """The modules the window saw imported that can change an export: the user's own, and
    what the user's code imported by name (torch's own lazy imports are torch's version)."""
    return [name for name, by in reads.modules.items()
            if _user_file(sys.modules.get(name)) is not None
            or (by is not None and not _installed(by))]


def read_files(files: Iterable[str], root: Path) -> list[tuple[str, str]]:
    """(name, hash) of each file the code opened to read, outside the installed packages
    (their versions are in the key) and the machine's own /proc, /sys and /dev; a file that
    was asked for and is not there is keyed as absent, so that adding it misses."""
    found: dict[str, str] = {}
    for where in files:
        if where.endswith(".pyc") or where.startswith(_MACHINE) or _installed(where):
            continue
        path = Path(where)
        try:
            kind = path.stat().st_mode
        except FileNotFoundError:
            found[_named(path, root)] = "absent"
            continue
        except OSError as exc:
            raise Unvouched(f"it read {where}, which cannot be read again ({exc})") from exc
        if stat.S_ISDIR(kind):
            continue
        if not stat.S_ISREG(kind):
            raise Unvouched(f"it read {where}, which is not a plain file")
        found[_named(path, root)] = _file_hash(path)
    return sorted(found.items())


def _named(path: Path, root: Path) -> str:
    resolved, home = path.resolve(), root.resolve()
    return os.path.relpath(resolved, home) if resolved.is_relative_to(home) else str(resolved)


def distributions(packages: Iterable[str]) -> list[tuple[str, str]]:
    """The installed distributions behind top-level packages, with their versions; the
    standard library and the tools whose versions the key holds anyway left out."""
    import importlib.metadata

    found = []
    for top in sorted(set(packages) - set(sys.stdlib_module_names) - _KEYED):
        names = _packages().get(top)
        if not names:  # no distribution: a module beside the code, outside the repository
            where = getattr(sys.modules.get(top), "__file__", None)
            found.append((top, _file_hash(Path(where)) if isinstance(where, str) else "none"))
            continue
        for name in sorted(set(names)):
            try:
                found.append((top, f"{name}=={importlib.metadata.version(name)}"))
            except importlib.metadata.PackageNotFoundError:
                found.append((top, f"{name} absent"))
    return found


@functools.cache
def _packages() -> Mapping[str, list[str]]:
    """Which distributions hold each top-level package, read once per process."""
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def export_key(model: str, opset: int, exporter: Exporter, dims: Mapping[str, int]) -> str:
    """The key of one export: the model's part, at `opset`, with `exporter`, traced with
    example inputs of the dataset's named sizes `dims`."""
    return _hash({"model": model, "opset": opset, "exporter": exporter, "dims": dict(dims)})


def cacheable(module: Any) -> bool:
    """Whether an export of `module` is one file, as an entry holds it: its weights do not go to
    a side file (prepare/export.py)."""
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


def sources(module: Any, names: Iterable[str], root: Path
            ) -> tuple[list[tuple[str, str]], set[str]]:
    """(path, hash) of every user file that can change the export: the files of the module's
    own classes and of the modules `names`, and each user module those reach through their
    globals (`import layers`, `from blocks import Block`); and the top-level installed
    packages all those reach. A user file is any Python file outside the standard library, the
    installed packages and onnx-parity."""
    start = [type(sub).__module__ for sub in module.modules()]
    start += list(names)
    seen: set[str] = set()
    files: dict[str, str] = {}
    packages: set[str] = set()
    pending = list(dict.fromkeys(start))
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        found = sys.modules.get(name)
        path = _user_file(found)
        if path is None:
            if found is not None:
                packages.add(name.partition(".")[0])
            continue
        assert found is not None
        files[_home(name, root)] = _file_hash(path)
        pending.extend(_reached(found))
    return sorted(files.items()), packages


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

    folders = [sysconfig.get_paths()[n] for n in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders.append(str(Path(onnx_parity.__file__).parent))
    found = {os.path.join(f, "") for f in folders}
    found |= {os.path.join(str(Path(f).resolve()), "") for f in folders}
    return tuple(sorted(found))


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:  # a file that cannot be read cannot be vouched for
        raise Unvouched(f"it read {path}, which cannot be read again ({exc})") from exc
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    digest.update(json.dumps(value, sort_keys=True, default=repr).encode())
    digest.update(b"\0")


def _hash(value: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()
