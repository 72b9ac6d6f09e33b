"""Where a spec may lead: every path in it inside the repository the spec belongs to, once
symlinks are resolved, unless the run is given `--allow-outside-repo`; and a `torch:` module
reference to code of that repository or of an installed package, never to the standard library.

The repository is the workspace (GITHUB_WORKSPACE) when the spec lies in it, else the nearest
folder above the spec that holds `.git` (a checkout) or `.onnx-parity-root` (a repro bundles'
folder), else the spec's own folder. A spec outside the workspace (one a workflow wrote to a
temporary folder) is so confined to its own repository or folder, never to the workspace it is
not part of.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from onnx_parity.frozen import frozen

ALLOW_FLAG = "--allow-outside-repo"
ROOT_MARKER = ".onnx-parity-root"  # a folder holding it is a root, as a checkout's is

# Provider options and session config entries whose value is a path (or, ending in `paths`,
# paths separated by `;`, as TensorRT's plugin libraries are): named so by ONNX Runtime's
# providers (trt_engine_cache_path, trt_extra_plugin_lib_paths, cache_dir, ep.context_file_path).
_PATH_KEY = re.compile(r"(?:^|[._])(?:\w+_)?(?:path|paths|dir|directory|folder|file)$", re.I)


def is_path_key(key: str) -> bool:
    """Whether a provider option or config entry named `key` takes a path."""
    return bool(_PATH_KEY.search(key))


@frozen
class Confinement:
    """The folder a spec's paths must resolve into (None: anywhere, as asked), and how it reads
    in a message."""

    root: Path | None
    named: str = "the repository"

    def problem(self, what: str, resolved: Path) -> str | None:
        """Why `resolved` (symlinks resolved) may not be used, or None."""
        if self.root is None or resolved == self.root or self.root in resolved.parents:
            return None
        return (f"{what} {resolved} is outside {self.named} ({self.root}); a spec's paths stay "
                f"inside it, unless the run is given {ALLOW_FLAG}")


def confinement(spec: Path, env: Mapping[str, str] = os.environ,
                allow_outside: bool = False) -> Confinement:
    """The confinement of the spec at `spec` (as given: a symlinked spec belongs where its
    link is)."""
    if allow_outside:
        return Confinement(None)
    place = Path(os.path.abspath(spec))
    workspace = env.get("GITHUB_WORKSPACE")
    if workspace:
        folder = Path(os.path.abspath(workspace))
        real, home = _real(folder), _real(place.parent)
        if folder in place.parents or real == home or real in home.parents:
            return Confinement(real, "the workspace")
    for folder in place.parents:
        if (folder / ".git").exists() or (folder / ROOT_MARKER).is_file():
            return Confinement(_real(folder))
    return Confinement(_real(place.parent), "the spec's folder")


def _real(path: Path) -> Path:
    """`path` with its symlinks resolved (as far as they can be: a loop stays as it is)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def module_problem(module: str, search: list[str], confined: Confinement) -> str | None:
    """Why a `torch:` reference's module may not be imported, or None: the standard library
    or a builtin (`os:system` would run a shell), or code that is neither in the repository
    nor an installed package. A module not found is no problem here; its import fails when
    the model loads. Only the top-level package is looked up: importing it would run it."""
    top = module.split(".", 1)[0]
    if top in sys.builtin_module_names:
        return f"'{top}' is a module built into Python, not a model of the repository"
    if top in getattr(sys, "stdlib_module_names", ()):
        return f"'{top}' is Python's standard library, not a model of the repository"
    from importlib.machinery import PathFinder

    try:
        found = PathFinder.find_spec(top, search)
    except (ImportError, ValueError, OSError):
        return None
    if found is None:
        return None
    places = [found.origin] if found.origin else list(found.submodule_search_locations or ())
    for place in places:
        resolved = _real(Path(place))
        if _installed(resolved) or confined.problem("", resolved) is None:
            continue
        return (f"'{top}' is {resolved}, outside {confined.named} ({confined.root}) and not an "
                f"installed package; write the factory in a file of the repository, or give "
                f"the run {ALLOW_FLAG}")
    return None


def _installed(path: Path) -> bool:
    """Whether `path` lies in a folder Python installs packages into."""
    import site
    import sysconfig

    folders = {*site.getsitepackages(), site.getusersitepackages(),
               *(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))}
    return any(_real(Path(folder)) in (path, *path.parents) for folder in folders if folder)
