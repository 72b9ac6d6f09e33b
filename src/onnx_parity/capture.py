"""What native code writes to the process's own file descriptors, collected instead of shown.

ONNX Runtime logs from C++ straight to fd 2, past Python's sys.stderr; the TorchScript exporter
prints its IR graph from C++ to fd 1. The only way to make those lines part of a result (a
session's facts, an export's log) and keep them off the console is to point the descriptors
elsewhere for a while.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

# Sinks not in use, kept for the next capture: making and deleting a temporary file cost a third
# of a capture, and a worker captures once per ONNX Runtime session (thousands in a suite of
# one-node models). A capture takes one (a nested or concurrent one makes its own) and puts it
# back emptied. A forked child drops the parent's: they share the open file's offset.
_IDLE: list[IO[bytes]] = []
os.register_at_fork(after_in_child=_IDLE.clear)


@contextlib.contextmanager
def native_output(fds: tuple[int, ...] = (2,)) -> Iterator[list[str]]:
    """Lines written to `fds` (2: stderr, 1: stdout) meanwhile, into the yielded list."""
    lines: list[str] = []
    saved: list[tuple[int, int]] = []
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        sink = _IDLE.pop()
    except IndexError:
        sink = tempfile.TemporaryFile()  # noqa: SIM115 - it outlives this call, kept in _IDLE
    try:
        try:
            for fd in fds:
                saved.append((fd, os.dup(fd)))
                os.dup2(sink.fileno(), fd)
        except OSError:  # no descriptor to borrow: what was borrowed goes back, nothing caught
            pass
        try:
            yield lines
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
            # The descriptors wrote at the file's offset: where nothing was written (most
            # sessions), there is nothing to read back or to empty.
            written = sink.tell()
            if written:
                sink.seek(0)
                lines.extend(sink.read().decode("utf-8", "replace").splitlines())
    except BaseException:
        sink.close()
        raise
    if written:
        sink.seek(0)
        sink.truncate()
    _IDLE.append(sink)
