"""The export cache (`run --cache DIR`): one file per entry, each an export or a variant under its
key (cachekey.py), written whole or not at all, read only when it checks out, and the folder kept
under a size cap, least recently used out.

An entry is a header (a magic string, its JSON's length, the JSON: what the exporter printed, the
payload's size and SHA-256) and then the ONNX file's bytes. Several workers, and several shards
sharing the folder, may write at once: each writes a temporary file in the folder and renames it
over the entry (os.replace is atomic), so a reader sees a whole entry, an older whole entry, or
none. A reader that finds anything else (a truncated file, another format, bytes that do not hash
to what the header says) has a miss, never an error; the export is made again and replaces it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB: well inside what actions/cache keeps per repository
_MAGIC = b"onnxpc1\n"
_SUFFIX = ".entry"
_STALE_TEMP_SECONDS = 3600  # a writer's temporary file this old was left by a killed process


@dataclass(frozen=True)
class Entry:
    """What a hit gives back beside the model file it wrote: what the exporter printed when it
    made the file."""

    log: str


@dataclass(frozen=True)
class ExportCache:
    """The cache folder and its size cap, as the run was asked for it."""

    folder: Path
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("--cache-max-mb must be more than 0")

    def load(self, key: str, destination: Path) -> Entry | None:
        """The entry under `key`, its model written to `destination`; None on a miss, which a
        corrupt or unreadable entry is too."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        found = _parse(data)
        if found is None:
            logger.warning("export cache: the entry %s is damaged; it is made again", path.name)
            return None
        header, payload = found
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            _write_whole(destination, payload)
            os.utime(path)  # recently used: the last to go
        except OSError as exc:
            logger.warning("export cache: %s could not be used (%s)", path.name, exc)
            return None
        log = header.get("log")
        return Entry(log if isinstance(log, str) else "")

    def store(self, key: str, model: Path, log: str = "") -> bool:
        """Keep the model file at `model` under `key`; False when it could not be written (a
        full disk, a read-only folder), which only costs the next run an export."""
        try:
            payload = model.read_bytes()
            header = json.dumps({"key": key, "size": len(payload), "log": log,
                                 "sha256": hashlib.sha256(payload).hexdigest()}).encode()
            self.folder.mkdir(parents=True, exist_ok=True)
            _write_whole(self._path(key), _MAGIC + struct.pack("<Q", len(header)) + header
                         + payload)
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
                    stat = path.stat()
                    if path.name.endswith(_SUFFIX):
                        entries.append((stat.st_mtime, path.name, stat.st_size, path))
                    elif path.name.startswith(".tmp-") and now - stat.st_mtime > \
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


def _parse(data: bytes) -> tuple[dict[str, object], bytes] | None:
    """An entry's header and payload, or None for anything that is not a whole, intact entry."""
    start = len(_MAGIC) + 8
    if len(data) < start or not data.startswith(_MAGIC):
        return None
    (length,) = struct.unpack("<Q", data[len(_MAGIC):start])
    try:
        header = json.loads(data[start:start + length])
    except (ValueError, UnicodeDecodeError):
        return None
    payload = data[start + length:]
    if not isinstance(header, dict) or header.get("size") != len(payload) \
            or header.get("sha256") != hashlib.sha256(payload).hexdigest():
        return None
    return header, payload
