"""The export cache (`run --cache DIR`): one file per entry, each an export or a variant under its
key (cachekey.py), written whole or not at all, read only when it checks out (a plain file, its
digest, the key it was stored under), and the folder kept under a size cap, least recently used
out.

An entry is a header (a magic string, its JSON's length, the JSON: the key it was stored under,
what the exporter printed, the payload's size), the ONNX file's bytes, and the SHA-256 of all
that before it. Several workers, and several shards sharing the folder, may write at once: each
writes a temporary file in the folder and renames it over the entry (os.replace is atomic), so a
reader sees a whole entry, an older whole entry, or none. The folder is not trusted: an entry is
used only when it is a plain file (a symbolic link is not followed), hashes to its digest, and
was stored under the key asked for (an entry copied or renamed over another's is not). Anything
else is rejected, never an error: the export is made again, replaces it, and the case says why.
The entry is read once into memory and what is checked is what is written out.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
import struct
import tempfile
import time
from pathlib import Path

from onnx_parity.frozen import frozen

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB: well inside what actions/cache keeps per repository
_MAGIC = b"onnxpc2\n"
_DIGEST = 32  # bytes of SHA-256 at the entry's end
_SUFFIX = ".entry"
_STALE_TEMP_SECONDS = 3600  # a writer's temporary file this old was left by a killed process


@frozen
class Entry:
    """What a hit gives back beside the model file it wrote: what the exporter printed when it
    made the file."""

    log: str


@frozen
class Rejected:
    """An entry found under the key and not used: why (the case notes it)."""

    reason: str


@frozen
class ExportCache:
    """The cache folder and its size cap, as the run was asked for it."""

    folder: Path
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("--cache-max-mb must be more than 0")

    def load(self, key: str, destination: Path) -> Entry | Rejected | None:
        """The entry under `key`, its model written to `destination`; None when there is none,
        Rejected when there is one that cannot be trusted to be `key`'s."""
        path = self._path(key)
        try:
            data = _read_plain(path)
        except FileNotFoundError:
            return None
        except _NotPlain as exc:
            return self._rejected(path, str(exc))
        except OSError as exc:
            return self._rejected(path, f"unreadable ({exc.strerror or exc})")
        found = _parse(data, key)
        if isinstance(found, str):
            return self._rejected(path, found)
        header, payload = found
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            _write_whole(destination, payload)
            os.utime(path, follow_symlinks=False)  # recently used: the last to go
        except OSError as exc:
            logger.warning("export cache: %s could not be used (%s)", path.name, exc)
            return None
        log = header.get("log")
        return Entry(log if isinstance(log, str) else "")

    @staticmethod
    def _rejected(path: Path, reason: str) -> Rejected:
        logger.warning("export cache: the entry %s is %s; it is made again", path.name, reason)
        return Rejected(reason)

    def store(self, key: str, model: Path, log: str = "") -> bool:
        """Keep the model file at `model` under `key`; False when it could not be written (a
        full disk, a read-only folder), which only costs the next run an export."""
        try:
            payload = model.read_bytes()
            header = json.dumps({"key": key, "size": len(payload), "log": log}).encode()
            self.folder.mkdir(parents=True, exist_ok=True)
            body = _MAGIC + struct.pack("<Q", len(header)) + header + payload
            _write_whole(self._path(key), body + hashlib.sha256(body).digest())
        except OSError as exc:
            logger.warning("export cache: could not keep %s (%s)", model.name, exc)
            return False
        self.trim()
        return True

    def trim(self) -> None:
        """Entries out, least recently used first, until the folder is under its cap; and the
        temporary files of writers that were killed."""
        entries = []
        now = time.time()
        with contextlib.suppress(OSError):
            for path in self.folder.iterdir():
                with contextlib.suppress(OSError):  # another process may remove it meanwhile
                    found = path.stat(follow_symlinks=False)
                    if path.name.endswith(_SUFFIX):
                        entries.append((found.st_mtime, path.name, found.st_size, path))
                    elif path.name.startswith(".tmp-") and now - found.st_mtime > \
                            _STALE_TEMP_SECONDS:
                        path.unlink()
        total = sum(size for _, _, size, _ in entries)
        for _, _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
            total -= size

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{_SUFFIX}"


def _write_whole(path: Path, data: bytes) -> None:
    """`data` at `path`, which is never seen half-written: a temporary file beside it, then
    renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class _NotPlain(OSError):
    """An entry's path that is not a plain file."""


def _read_plain(path: Path) -> bytes:
    """The bytes of the plain file at `path`; a symbolic link is not followed, nor is anything
    but a regular file read (a FIFO would block)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotPlain("a symbolic link") from exc
        raise
    with os.fdopen(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise _NotPlain("not a plain file")
        return file.read()


def _parse(data: bytes, key: str) -> tuple[dict[str, object], bytes] | str:
    """An entry's header and payload, or why it is not a whole, intact entry stored under
    `key`."""
    start = len(_MAGIC) + 8
    if not data.startswith(_MAGIC):
        return "cut short" if _MAGIC.startswith(data) else \
            "in another format (another version of onnx-parity's, or not an entry)"
    if len(data) < start:
        return "cut short"
    (length,) = struct.unpack("<Q", data[len(_MAGIC):start])
    try:
        header = json.loads(data[start:start + length])
    except (ValueError, UnicodeDecodeError):
        header = None
    size = header.get("size") if isinstance(header, dict) else None
    if len(data) < start + length + (size if isinstance(size, int) else 0) + _DIGEST:
        return "cut short"
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        return "changed since it was stored (its content does not match its digest)"
    payload = body[start + length:]
    if not isinstance(header, dict) or size != len(payload):
        return "malformed"
    if header.get("key") != key:
        return "another key's entry, copied or renamed over this one"
    return header, payload
