"""Which cases a selection takes: globs on the id with brackets matched literally, target names,
and the message for a target the spec lacks."""

from __future__ import annotations

import pytest

from helpers import ROOT
from onnx_parity.plan.cases import plan
from onnx_parity.plan.select import EVERYTHING, Selection
from onnx_parity.spec import load_spec


@pytest.mark.parametrize(("globs", "case_id", "taken"), [
    ((), "mlp[opset17-cpu-wide-b8]", True),
    (("mlp[opset17-*",), "mlp[opset17-cpu-wide-b8]", True),
    (("mlp[opset17-*",), "mlp[opset18-cpu-wide-b8]", False),
    (("mlp[opset1?-cpu-wide-b8]",), "mlp[opset17-cpu-wide-b8]", True),
    # `[` is the bracket of a case id, never a glob's character class.
    (("mlp[o]*",), "mlpo", False),
    (("cnn*", "mlp*"), "mlp[opset17-cpu-wide-b8]", True),
    (("cnn*",), "mlp[opset17-cpu-wide-b8]", False),
])
def test_globs_match_the_case_id(globs: tuple[str, ...], case_id: str, taken: bool) -> None:
    assert Selection(globs).matches(case_id, "cpu") is taken


def test_targets_narrow_and_combine_with_globs() -> None:
    selection = Selection(("mlp*",), ("cuda",))
    assert selection.matches("mlp[opset17-cuda-wide-b8]", "cuda")
    assert not selection.matches("mlp[opset17-cpu-wide-b8]", "cpu")
    assert not selection.matches("cnn[opset17-cuda-wide-b8]", "cuda")
    assert EVERYTHING.matches("anything", "anywhere")


def test_an_unknown_target_is_named_with_the_ones_the_spec_has() -> None:
    assert Selection(targets=("cpu",)).problem(("cpu", "cuda")) is None
    assert EVERYTHING.problem(()) is None
    problem = Selection(targets=("cpu", "tpu", "np\nu")).problem(("cpu", "cuda"))
    assert problem == "--targets: no target named tpu, np\\nu; the spec has cpu, cuda"


def test_describe_says_what_narrowed_the_run() -> None:
    assert EVERYTHING.describe() == ""
    assert Selection(("a*", "b*")).describe() == " matching a*, b*"
    assert Selection(("a*",), ("cpu",)).describe() == " matching a* on cpu"
    assert Selection(targets=("cpu", "cuda")).describe() == " on cpu, cuda"


def test_the_plan_keeps_what_the_selection_matches() -> None:
    spec = load_spec(ROOT / "examples" / "parity.yaml")
    every = plan(spec)
    target = every[0].target.name
    chosen = plan(spec, Selection((every[0].id,), (target,)))
    assert [case.id for case in chosen] == [every[0].id]
    assert plan(spec, Selection(targets=(target,))) == tuple(
        case for case in every if case.target.name == target)
