"""Tests for explain/followups.py: one rule decides which cases get a cause re-run, a
localization and a repro bundle, read off the case's final status."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import tiny_and_flipped
from onnx_parity.explain.followups import FollowUps, follow_ups


@pytest.mark.parametrize(("status", "localize", "artifacts", "wanted"), [
    ("failed", "failed", True, FollowUps(cause=True, localize=True, bundle=True)),
    ("failed", "never", True, FollowUps(cause=True, bundle=True)),
    ("failed", "always", False, FollowUps(cause=True, localize=True)),
    ("passed", "always", True, FollowUps(localize=True)),
    # Passed the comparison (a case the regression check fails too): nothing is out of
    # tolerance to localize, and a bundle's check would pass.
    ("passed", "failed", True, FollowUps()),
    # A case in error failed nothing: no bundle, whatever --localize says.
    ("error", "failed", True, FollowUps()),
    ("error", "always", True, FollowUps(localize=True)),
    ("error", "never", True, FollowUps()),
])
def test_one_rule_reads_the_final_status(status: Any, localize: Any, artifacts: bool,
                                         wanted: FollowUps) -> None:
    assert follow_ups(status, localize, artifacts) == wanted
    # --causes never leaves out the second runs and nothing else
    assert follow_ups(status, localize, artifacts, "never") == FollowUps(
        localize=wanted.localize, bundle=wanted.bundle)


def test_an_error_case_gets_the_same_bundles_whatever_localize_says(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """A powerless output makes its case an error; with --artifacts it used to get a bundle
    under `--localize always` and none under the default. Now neither, and the failed case
    beside it gets one under both."""
    tiny_and_flipped(tmp_path)
    spec = write_spec("""
        version: 1
        models:
          - {name: powerless, onnx: flipped.onnx, torch: models.py:make_tiny_output}
          - {name: flipped, onnx: flipped.onnx, torch: models.py:make_tiny_output,
             tolerance: {atol: 0.0, rtol: 1.0e-3}}
    """)
    bundles = {}
    for localize in ("failed", "always"):
        artifacts = tmp_path / f"artifacts-{localize}"
        code, _, _, report = run_cli(spec, "--artifacts", str(artifacts),
                                     "--localize", localize)
        assert code == 1
        status = {case["model"]: case["status"] for case in report["cases"]}
        assert status == {"powerless": "error", "flipped": "failed"}
        bundles[localize] = sorted(p.name for p in artifacts.iterdir()
                                   if p.is_dir() and p.name != "models")  # models: kept copies
        cases = {case["model"]: case for case in report["cases"]}
        assert "bundle" not in cases["powerless"]["details"]
        assert Path(cases["flipped"]["details"]["bundle"]["path"]).is_dir()
    assert bundles["failed"] == bundles["always"] == ["flipped__onnx-cpu-random-b1"]
