"""Where a run's artifacts go under `--artifacts DIR`, and every write there: one folder per
case that did not pass (its repro bundle, its export log), and `models/` for the variants the
run made. No other module decides a path under DIR or writes there.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)


def case_folder(root: Path, case_id: str) -> Path:
    """`mlp[opset17-cpu-wide-b8]` → ROOT/mlp__opset17-cpu-wide-b8: a name every shell and
    artifact uploader takes as it is."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", case_id.replace("[", "__").replace("]", ""))
    return root / safe.strip("_.")


def keep_variant(root: Path, model: str, variant: Path) -> Path:
    """A copy of a reduced-precision variant the run made, as ROOT/models/<model>.<file>."""
    kept = root / "models" / f"{model}.{variant.name}"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(variant, kept)
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
