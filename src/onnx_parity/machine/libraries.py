"""Where the dynamic loader would find each CUDA, cuDNN and TensorRT library ONNX Runtime needs:
pip's nvidia and tensorrt_libs wheels, LD_LIBRARY_PATH, ld.so.cache, the system folders, in the
loader's order, with each library's version and the other majors lying around. Reading only,
never loading.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from onnx_parity.findings import LibraryFacts
from onnx_parity.literals import CUDA
from onnx_parity.machine.compat import LibraryNeed

# Folders the dynamic loader searches after LD_LIBRARY_PATH and its cache.
SYSTEM_FOLDERS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


def package_file(package: str, relative: str) -> Path | None:
    """A file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / relative
        if path.is_file():
            return path
    return None


def default_pip_roots() -> list[Path]:
    """Folders holding pip's `nvidia/` (or TensorRT's `tensorrt_libs/`) packages: onnxruntime's
    own first (where its `preload_dlls()` looks), then every other folder on sys.path that has
    one (torch's)."""
    roots: list[Path] = []
    ort = package_file("onnxruntime", "__init__.py")
    if ort is not None:
        roots.append(ort.parent.parent)
    roots += [Path(p) for p in sys.path
              if p and any((Path(p) / name).is_dir() for name in ("nvidia", "tensorrt_libs"))]
    return list(dict.fromkeys(r.resolve() for r in roots))


def read_ld_cache() -> dict[str, str]:
    """soname -> path from `ldconfig -p`, 64-bit entries only; empty if ldconfig is missing."""
    command = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if command is None:
        return {}
    try:
        text = subprocess.run([command, "-p"], capture_output=True, text=True, timeout=10,
                              check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    cache: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"\s+(\S+) \(([^)]*)\) => (\S+)", line)
        if match and "64" in match.group(2):
            cache.setdefault(match.group(1), match.group(3))
    return cache


def describe_search(roots: Sequence[Path], env: Mapping[str, str], cache: Mapping[str, str],
                    system_folders: Sequence[str]) -> tuple[str, ...]:
    steps = [f"pip wheels: {root}/nvidia" for root in roots]
    steps += [f"LD_LIBRARY_PATH: {p}" for p in _ld_path(env)]
    steps.append(f"ld.so.cache: {len(cache)} libraries")
    return (*steps, *(f"system folder: {p}" for p in system_folders))


def find_libraries(needs: Iterable[LibraryNeed], roots: Sequence[Path], env: Mapping[str, str],
                   cache: Mapping[str, str],
                   system_folders: Sequence[str] = SYSTEM_FOLDERS) -> tuple[LibraryFacts, ...]:
    """Each library as the loader would find it once onnxruntime's `preload_dlls()` (or torch)
    has loaded pip's wheels: pip folders, LD_LIBRARY_PATH, ld.so.cache, then system folders."""
    return tuple(_find(need, roots, env, cache, system_folders) for need in needs)


def _find(need: LibraryNeed, roots: Sequence[Path], env: Mapping[str, str],
          cache: Mapping[str, str], system_folders: Sequence[str]) -> LibraryFacts:
    pip = [(f"pip {need.pip}", root / need.folder) for root in roots]
    ld = [("LD_LIBRARY_PATH", Path(p)) for p in _ld_path(env)]
    system = [("system folder", Path(p)) for p in system_folders]
    cached = [("ld.so.cache", Path(cache[need.soname]))] if need.soname in cache else []
    candidates = [(label, folder / need.soname) for label, folder in pip + ld]
    candidates += [(label, path) for label, path in cached]
    candidates += [(label, folder / need.soname) for label, folder in system]
    found = next(((label, path) for label, path in candidates if path.exists()), None)

    stem = need.soname.split(".so.")[0] + ".so."  # "libcudnn.so."
    wanted = need.soname[len(stem):].split(".")[0]
    seen = [folder / name for _, folder in pip + ld + system for name in _listing(folder)
            if name.startswith(stem)]
    seen += [Path(path) for name, path in cache.items() if name.startswith(stem)]
    others = sorted({str(p) for p in seen if p.name[len(stem):].split(".")[0] not in (wanted, "")})
    facts = LibraryFacts(need.name, need.soname, need.pip, need.required, others=tuple(others),
                         provider=need.provider if need.provider != CUDA else None,
                         pin=need.pin or None)
    if found is None:
        return facts
    label, path = found
    version = _file_version(path, stem)
    if version is None and label.startswith("pip "):
        version = _pip_version(need.pip, path.parents[len(Path(need.folder).parts)])
    return replace(facts, path=str(path), version=version, origin=label)


def _ld_path(env: Mapping[str, str]) -> list[str]:
    return [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]


def _listing(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _file_version(path: Path, stem: str) -> str | None:
    """The full version a soname link points to: libcudnn.so.9 -> libcudnn.so.9.13.0 -> 9.13.0."""
    try:
        name = path.resolve().name
    except OSError:
        return None
    rest = name[len(stem):] if name.startswith(stem) else ""
    return rest if rest.count(".") >= 1 and re.fullmatch(r"[\d.]+", rest) else None


def _pip_version(package: str, root: Path) -> str | None:
    for dist in importlib.metadata.distributions(name=package, path=[str(root)]):
        return dist.version
    return None
