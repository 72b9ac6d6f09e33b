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
import stat
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

    def holds(self, resolved: Path) -> bool:
        """Whether `resolved` (symlinks resolved) may be used: it is the root or lies in it."""
        if self.root is None:
            return True
        # A prefix of its parts says it at once; `.parents` builds a Path for each folder.
        root = self.root.parts
        if root and resolved.parts[: len(root)] == root:
            return True
        return resolved == self.root or self.root in resolved.parents

    def problem(self, what: str, resolved: Path) -> str | None:
        """Why `resolved` (symlinks resolved) may not be used, or None."""
        if self.holds(resolved):
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


class RealPaths:
    """`Path.resolve()` for the many files of one spec, each folder resolved once.

    A spec of a thousand models names two thousand files in a thousand folders; resolving each
    path from the root costs an lstat per component. The real path of `folder/name` is the
    real path of `folder` joined with `name` whenever `name` is no symlink, and that takes one
    lstat. Anything else (a symlink, `..`, a loop, an error) is resolved from the root, as
    before. Kept per reading of a spec: a folder that changes between two runs is read afresh.
    """

    def __init__(self) -> None:
        self._real: dict[str, str] = {}  # what resolve() gives
        self._folders: dict[str, str] = {}  # what realpath gives, where the two may differ
        self._modes: dict[str, int] = {}  # what the lstat found where it found no symlink

    def resolve(self, folder: Path, raw: str) -> Path:
        """`(folder / raw).resolve()`, read from the text: a Path costs more to build than
        the lstat, and realpath reads `a/./b` and `a//b` as the Path would."""
        try:
            real = self._joined(os.path.join(folder, raw))
        except (OSError, ValueError, RecursionError):
            real = None
        return Path(real) if real is not None else (folder / raw).resolve()

    def mode(self, resolved: Path) -> int | None:
        """The st_mode of a path this resolved (its stat: it is no symlink), or None."""
        return self._modes.get(str(resolved))

    def _joined(self, path: str) -> str | None:
        """os.path.realpath(path) where it is its folder's joined with its name, else None."""
        known = self._real.get(path)
        if known is not None:
            return known
        folder, name = os.path.split(path)
        if name in ("", ".", ".."):
            return None
        real = self._real.get(folder) or self._folders.get(folder)
        if real is None:
            real = self._joined(folder)
        if real is None:  # realpath's answer, not resolve()'s: it leaves a loop in place
            real = self._folders[folder] = os.path.realpath(folder)
        joined = os.path.join(real, name)
        try:
            mode = os.lstat(joined).st_mode
        except (FileNotFoundError, NotADirectoryError):
            pass  # realpath keeps a name that is not there as it is written
        except OSError:  # a symlink loop above it: resolve() says so
            return None
        else:
            if stat.S_ISLNK(mode):
                return None
            self._modes[joined] = mode
        self._real[path] = joined
        return joined


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
