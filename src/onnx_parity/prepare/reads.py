"""What a model's own code reads while its factory builds it and its first forward() runs
(`--cache`): the files it opens, the modules it imports, and what it does that no key can vouch
for (a network connection, a child process), recorded by one audit hook inside a window.

An audit hook cannot be removed, so the hook is installed once, at the first window, and does
nothing outside one. `import` events come only for a module's first import in the process; an
`import` statement of a module already loaded (by an earlier model in the same worker) raises no
event, so inside a window `builtins.__import__` is wrapped as well and names every module an
`import` statement asks for. Reads by native code (a C extension's fopen, safetensors' reader)
raise no event and are not seen; the parameters and buffers they fill are in the key anyway.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

# Events after which a key cannot vouch for what the code read: what came over the network or
# from a child process is not a file the key can hash.
_UNSURE = {
    "socket.connect": "opened a network connection",
    "socket.sendto": "sent over the network",
    "subprocess.Popen": "started a process",
    "os.system": "ran a shell command",
    "os.exec": "ran a program",
    "os.posix_spawn": "started a process",
    "os.spawn": "started a process",
}

_lock = threading.Lock()
_windows: list[Recording] = []  # the windows open now; the hook does nothing when empty
_hooked = False
_plain_import: Any = None  # builtins.__import__ as it was before the first window opened


@dataclass
class Recording:
    """One model's reads, gathered over every window it is entered for (the factory's call,
    then the first forward()), in order: the files opened to read (absolute paths), the modules
    imported (each with the file of the code whose `import` statement named it; None for a
    first import seen by its event alone), and what no key can vouch for."""

    files: dict[str, str | None] = field(default_factory=dict)
    modules: dict[str, str | None] = field(default_factory=dict)  # name: the importer's file
    unsure: dict[str, str | None] = field(default_factory=dict)

    def __enter__(self) -> Recording:
        global _hooked, _plain_import
        with _lock:
            if not _hooked:
                sys.addaudithook(_hook)
                _hooked = True
            if not _windows:
                _plain_import = builtins.__import__
                builtins.__import__ = _recording_import
            _windows.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        with _lock:
            _windows.remove(self)
            if not _windows:
                builtins.__import__ = _plain_import


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _windows:  # outside a window: the hook's whole cost is this test
        return
    try:
        _record(event, args)
    except Exception:  # never the model's failure: the key is not used instead
        _note("unsure", "did something the cache could not record")


def _record(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, _, flags = args
        if isinstance(path, int) or (isinstance(flags, int) and _written(flags)):
            return  # an open file descriptor, or a file written, not read
        name = os.path.abspath(os.fsdecode(path))
        if _opened_by(_SHOWS_SOURCE) or (name.endswith(".py") and _opened_by(_IMPORTS)):
            return
        _note("files", name)
    elif event == "import":
        _note("modules", args[0])
    elif event == "ctypes.dlopen" and isinstance(args[0], str | bytes):
        name = os.fsdecode(args[0])
        if os.sep in name:  # a library by its path; a bare name is the system's
            _note("files", os.path.abspath(name))
    elif event in _UNSURE:
        _note("unsure", _UNSURE[event])


# Code that opens files for no export's sake. linecache and tokenize open source files to show
# them (a traceback's or a warning's lines): a lazy import that warns once in a process would
# otherwise put the files of every frame on the stack into the first model's key, and the next
# run's key would differ. The import system opens a module's source to compile it: the module
# is in the key by its name and its file's hash (cachekey.py), and which of its files the import
# reads depends on whether Python had written its bytecode yet (a first run reads the source and
# writes __pycache__, the next reads the bytecode only), so the next run's key would differ too;
# only its `.py` reads are left out (a data file read through a loader, pkgutil's get_data,
# stays a read).
_SHOWS_SOURCE = frozenset({"linecache.py", "tokenize.py"})
_IMPORTS = frozenset({"<frozen importlib._bootstrap_external>"})


def _opened_by(files: frozenset[str]) -> bool:
    """Whether the file now being opened is opened by code in one of `files` (the frames above
    the hook: _record, _hook, then the caller of open())."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if os.path.basename(frame.f_code.co_filename) in files:
            return True
        frame = frame.f_back
    return False


def _written(flags: int) -> bool:
    """Opened to write only, emptied (O_TRUNC), or made new (O_EXCL, a temporary file): what it
    holds afterwards is the code's output, not its input."""
    return (flags & os.O_ACCMODE == os.O_WRONLY or bool(flags & os.O_TRUNC)
            or flags & (os.O_CREAT | os.O_EXCL) == os.O_CREAT | os.O_EXCL)


def _note(kind: str, value: str, by: str | None = None) -> None:
    for window in list(_windows):
        found: dict[str, str | None] = getattr(window, kind)
        if found.get(value) is None:
            found[value] = by


def _recording_import(name: str, globals: Any = None, locals: Any = None,
                      fromlist: Any = (), level: int = 0) -> Any:
    """builtins.__import__, naming each module asked for (and each submodule a `from` names)
    in the windows open now."""
    module = _plain_import(name, globals, locals, fromlist, level)
    if _windows:
        by = (globals or {}).get("__file__")
        by = by if isinstance(by, str) else None
        absolute = name
        if level:
            package = (globals or {}).get("__package__") or ""
            try:
                absolute = importlib.util.resolve_name("." * level + name, package)
            except (ImportError, ValueError):
                absolute = name
        _note("modules", absolute, by)
        for item in fromlist or ():
            if isinstance(item, str) and f"{absolute}.{item}" in sys.modules:
                _note("modules", f"{absolute}.{item}", by)
    return module
