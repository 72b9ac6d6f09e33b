"""What the tests share beside fixtures: where the repository's files are, and small helpers
that build test models or read reports. tests/ is on the path (pyproject.toml), so every test
folder imports it as `helpers`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"  # the models tests copy next to their specs
DATA = TESTS / "data"  # recorded machine facts
EXAMPLES = ROOT / "examples"


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {case["id"]: case for case in report["cases"]}


def tiny_and_flipped(folder: Path) -> None:
    """tiny.onnx, the exact export of fixtures' make_tiny_output (outputs near 1e-5), and
    flipped.onnx, the same with its head's weights scaled by -50: a fault any tolerance of that
    size lets through."""
    import importlib.util

    import onnx
    import torch
    from onnx import numpy_helper

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    found = importlib.util.spec_from_file_location("fixture_models", FIXTURES / "models.py")
    assert found is not None and found.loader is not None
    models = importlib.util.module_from_spec(found)
    found.loader.exec_module(models)
    export_model(models.make_tiny_output(), [torch.randn(2, 4)], [InputSpec("x", ("batch", 4))],
                 ["y"], 17, "torchscript", folder / "tiny.onnx")
    model = onnx.load(str(folder / "tiny.onnx"))
    head = next(i for i in model.graph.initializer if i.name == "2.weight")
    head.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(head) * -50.0, head.name))
    onnx.save(model, str(folder / "flipped.onnx"))
