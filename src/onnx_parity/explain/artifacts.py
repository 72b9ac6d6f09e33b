"""Where a run's artifacts go under `--artifacts DIR`, and every write there: one folder per
case that did not pass (its repro bundle, its export log), and `models/` for one copy of each
model file the run made or checked that a bundle or a kept variant needs. No other module
decides a path under DIR or writes there.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from onnx_parity.prepare.export import EXTERNAL_DATA_BYTES  # the protobuf limit's margin
from onnx_parity.spec.confine import ROOT_MARKER

logger = logging.getLogger(__name__)


def case_folder(root: Path, case_id: str) -> Path:
    """`mlp[opset17-cpu-wide-b8]` → ROOT/mlp__opset17-cpu-wide-b8: a name every shell and
    artifact uploader takes as it is."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", case_id.replace("[", "__").replace("]", ""))
    return root / safe.strip("_.")


# What this process has written under models/: (root, file) → the source's path, size and
# modification time, so the cases of one model share one copy and a new export replaces it.
_written: dict[tuple[Path, str], tuple[Path, int, int]] = {}


def keep_variant(root: Path, model: str, variant: Path) -> Path:
    """A copy of a reduced-precision variant the run made, as ROOT/models/<model>.<file>."""
    return shared_model(root, model, variant)


def shared_model(root: Path, model: str, source: Path) -> Path:
    """ROOT/models/<model>.<file>: one copy of a model file the run checked (exported, shipped
    or a variant), weights included, written once however many failed cases refer to it.
    The repro bundles point here instead of holding a copy each (a vision model is 100 MB;
    fourteen failed cases were 1.4 GB of the same bytes)."""
    import onnx

    kept = root / "models" / f"{model}.{source.name}"
    stat = source.stat()
    mark = (source.resolve(), stat.st_size, stat.st_mtime_ns)
    if _written.get((root, kept.name)) == mark and kept.is_file():
        return kept
    kept.parent.mkdir(parents=True, exist_ok=True)
    # The bundles' specs name ROOT/models/ from ROOT/<case>/: ROOT is their repository.
    (root / ROOT_MARKER).touch()
    loaded = onnx.load(str(source))
    big = loaded.ByteSize() > EXTERNAL_DATA_BYTES
    side = kept.with_name(f"{kept.name}.data")
    if side.exists():
        side.unlink()  # an earlier run's weights; save_model would append to them
    onnx.save_model(loaded, str(kept), save_as_external_data=big,
                    location=side.name if big else None)
    _written[(root, kept.name)] = mark
    return kept


def keep_export_log(root: Path, case_id: str, log: str) -> Path | None:
    """What the exporter printed, beside the case's bundle; None when it could not be written
    (the case's verdict does not depend on it)."""
    path = case_folder(root, case_id) / "export.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(log, encoding="utf-8")
    except OSError as exc:
        logger.debug("%s: export log not written: %s", case_id, exc)
        return None
    return path


def keep_profile(root: Path, case_id: str, written: Path) -> Path | None:
    """ONNX Runtime's profile of the case (--profile), moved beside its bundle; None when it
    could not be (the profile is then deleted: the summary lists its nodes all the same)."""
    import shutil

    path = case_folder(root, case_id) / "onnxruntime-profile.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(written), path)
    except OSError as exc:
        logger.debug("%s: profile not kept: %s", case_id, exc)
        written.unlink(missing_ok=True)
        return None
    return path
