"""Stale artifacts told by their weights: a shipped ONNX file's initializers against its
module's parameters and buffers, named where they differ, and named the case's cause only when a
second run with the module's values swapped in proves it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from helpers import FIXTURES
from onnx_parity.explain.weights import compare_weights, expected_values, initializer_values

sys.path.insert(0, str(FIXTURES))
import faulty_models as fm

LINEAR = '''
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4))
'''

SCRIPTED = '''
from pathlib import Path

import torch


def load():
    return torch.jit.load(str(Path(__file__).with_name("encoder.jit")))
'''


def _ship_linear(path: Path, nudge: float) -> None:
    """The factory's Linear as a hand-built file: its weight transposed under another name ('w'),
    its bias ('b') moved by `nudge`."""
    import torch
    from onnx import TensorProto, helper, numpy_helper

    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    weight = layer.weight.detach().numpy().T.copy()
    bias = (layer.bias.detach().numpy() + np.float32(nudge)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])], "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


def _export_encoder(folder: Path) -> onnx.ModelProto:
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    path = folder / "encoder.onnx"
    export_model(fm.make_encoder(), [torch.randn(2, 6)], [InputSpec("x", ("batch", 6))], ["y"],
                 18, "torchscript", path)
    return onnx.load(str(path))


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


# -- matching initializers to the module's tensors ------------------------------------------------


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_folded_batch_norm_is_the_modules_weights_not_a_stale_file(
        tmp_path: Path, exporter: str) -> None:
    """Both exporters fold an eval-mode BatchNorm into the convolution before it, TorchScript
    under new names (`onnx::Conv_27`), dynamo under the convolution's own: the folded values are
    what the module says the file should hold."""
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    found = importlib.util.spec_from_file_location("fixture_models", FIXTURES / "models.py")
    assert found is not None and found.loader is not None
    models = importlib.util.module_from_spec(found)
    found.loader.exec_module(models)
    module = models.make_small_cnn()
    path = tmp_path / "cnn.onnx"
    export_model(module, [torch.randn(1, 3, 8, 8)], [InputSpec("image", ("batch", 3, 8, 8))],
                 ["y"], 18, exporter, path)
    check = compare_weights(initializer_values(onnx.load(str(path))), expected_values(module))
    assert check.differ == ()
    folded = [p for p in check.pairs if p.expected.folded]
    assert {p.expected.parameter for p in folded} >= {"features.0.weight"}
    assert all(p.expected.folded == "features.1" for p in folded)


def test_renamed_and_transposed_weights_are_matched_by_shape(tmp_path: Path) -> None:
    import torch

    _ship_linear(tmp_path / "lin.onnx", nudge=0.05)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 4))
    check = compare_weights(initializer_values(onnx.load(str(tmp_path / "lin.onnx"))),
                            expected_values(module))
    pairs = {p.initializer: p for p in check.pairs}
    assert (pairs["w"].expected.parameter, pairs["w"].transposed) == ("0.weight", True)
    assert not pairs["w"].differs
    (stale,) = check.differ
    assert stale.initializer == "b" and stale.expected.parameter == "0.bias"
    assert check.listing().startswith("0.bias (ONNX 'b', rel. ")


# -- the cause, proven by a second run, through the command line ----------------------------------


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Shipped files checked against the modules they came from, each with one fault: a nudged
    bias in a hand-built file, a scaled weight in an export (also against the module as
    TorchScript), an op swapped (no weight changed), and a weight barely moved beside a swapped
    op. Returns the spec and, per model, the tensor the cause must name."""
    import torch

    folder = tmp_path_factory.mktemp("shipped")
    shutil.copy(FIXTURES / "faulty_models.py", folder / "faulty_models.py")
    (folder / "lin.py").write_text(LINEAR)
    (folder / "scripted.py").write_text(SCRIPTED)
    _ship_linear(folder / "lin.onnx", nudge=0.05)
    clean = _export_encoder(folder)
    weight = _copy(clean)
    fm.change_weight(weight, "encoder.layers.2.mlp.2")
    onnx.save(weight, str(folder / "weight.onnx"))
    swap = _copy(clean)
    fm.swap_relu(swap, 1)
    onnx.save(swap, str(folder / "swap.onnx"))
    both = _copy(clean)
    fm.change_weight(both, "encoder.layers.0.attn", factor=1.0001)
    fm.swap_relu(both, 1)
    onnx.save(both, str(folder / "both.onnx"))
    traced = torch.jit.trace(fm.make_encoder(), torch.randn(2, 6))
    torch.jit.save(traced, str(folder / "encoder.jit"))
    spec = folder / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        defaults: {datasets: [few]}
        datasets: {few: {kind: random, seed: 3, samples: 2, batch_sizes: [4]}}
        models:
          - {name: bias, onnx: lin.onnx, torch: lin.py:make}
          - {name: weight, onnx: weight.onnx, torch: faulty_models.py:make_encoder}
          - {name: scripted, onnx: weight.onnx, torch: scripted.py:load}
          - {name: swap, onnx: swap.onnx, torch: faulty_models.py:make_encoder}
          - {name: both, onnx: both.onnx, torch: faulty_models.py:make_encoder}
        """))
    return spec, {"bias": "0.bias (ONNX 'b', rel. ", "weight": "encoder.layers.2.mlp.2.weight",
                  "scripted": "encoder.layers.2.mlp.2.weight",
                  "both": "encoder.layers.0.attn.weight"}


@pytest.fixture(scope="module")
def cases(shipped: tuple[Path, dict[str, str]],
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    import json

    from onnx_parity.cli.main import main

    spec, _ = shipped
    report = tmp_path_factory.mktemp("report") / "report.json"
    assert main(["run", str(spec), "--jobs", "2", "--json", str(report)]) == 1
    return {case["model"]: case for case in json.loads(report.read_text())["cases"]}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bias", "weight", "scripted"])
def test_a_stale_weight_is_the_proven_cause_and_named(
        model: str, shipped: tuple[Path, dict[str, str]], cases: dict[str, dict[str, Any]]
        ) -> None:
    case = cases[model]
    assert case["status"] == "failed", case["message"]
    cause = case["details"]["cause"]
    assert (cause["kind"], cause["proven"]) == ("stale-weights", True)
    assert cause["message"].startswith(
        "stale weights: the shipped ONNX holds weights that differ from the module's (1 of "
        f"the {2 if model == 'bias' else 24} tensors compared differ, "
        f"{1 if model == 'bias' else 23} match): " + shipped[1][model]), cause["message"]
    assert "with the module's values in their place it passes" in cause["message"]
    assert cause["after"]["passed"] is True and cause["before"]["max_abs"] > 1e-3
    assert cause["message"].count("rel. ") == 1  # one tensor differs, and only it is named


@pytest.mark.slow
def test_a_torchscript_module_says_why_the_drift_is_not_localized(
        cases: dict[str, dict[str, Any]]) -> None:
    divergence = cases["scripted"]["details"]["divergence"]
    assert divergence["verdict"] == "no-reference", divergence["summary"]
    assert divergence["headline"] == ("drift not localized: no intermediate reference: a"
                                      " TorchScript module gives only its outputs")
    assert "torch.jit.ScriptModule), which takes no forward hooks" in divergence["summary"]
    assert "register_forward" not in divergence["summary"]


@pytest.mark.slow
def test_another_fault_rules_stale_weights_out(cases: dict[str, dict[str, Any]]) -> None:
    swap = cases["swap"]
    assert swap["status"] == "failed" and "cause" not in swap["details"]
    # stale weights first, then the rest of the ladder (graph optimizations), all ruled out
    ruled_out, *rest = swap["details"]["causes_ruled_out"]
    assert [c["kind"] for c in rest] == ["graph"] and not rest[0]["proven"]
    assert (ruled_out["kind"], ruled_out["proven"]) == ("stale-weights", False)
    assert ruled_out["message"].startswith(
        "stale weights ruled out: the shipped ONNX holds the module's values (")
    assert swap["details"]["divergence"]["verdict"] == "origin"  # the swapped op is named
    # A weight that differs, but not enough to explain the failure: the second run says so.
    both = cases["both"]
    assert both["status"] == "failed" and "cause" not in both["details"]
    ruled_out, *rest = both["details"]["causes_ruled_out"]
    assert not ruled_out["proven"] and [c["kind"] for c in rest] == ["graph"]
    # never "ruled out" while a tensor differs
    assert ruled_out["message"].startswith(
        "stale weights not ruled out: the shipped ONNX holds weights that differ from the "
        "module's (1 of the 24 tensors compared differ, 23 match): encoder.layers.0.attn.weight"
        " (rel. ")
    assert ("with the matched ones swapped in the case still fails (max abs" in
            ruled_out["message"])
    assert ruled_out["message"].endswith(": something besides these weights differs too")


# -- a whole file of stale weights: the same architecture, another seed --------------------------


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Tiny Llama and GPT-2 decoders shipped as exports of the same configs built with another
    seed (adapter: causal-lm, TorchScript: Llama's Linear weights renamed `onnx::MatMul_N` and
    stored transposed, several of one shape; GPT-2's square Conv1D weights stored as they
    are), checked against the modules: one run."""
    import json

    import torch

    from fixtures import decoders
    from onnx_parity.cli.main import main
    from onnx_parity.prepare.export import export_model
    from onnx_parity.run.adapters.flat_cache import cache_layout, export_example, flat_cache_module

    folder = tmp_path_factory.mktemp("whole")
    shutil.copy(FIXTURES / "decoders.py", folder / "decoders.py")
    for name in ("llama", "gpt2"):
        torch.manual_seed(1)  # the module is built from seed 0
        lm = getattr(decoders, f"make_{name}")()
        layout = cache_layout(lm)
        export_model(flat_cache_module(lm, layout.layers), export_example(layout, 64, 2),
                     layout.inputs, layout.outputs, 18, "torchscript", folder / f"{name}.onnx")
    spec = folder / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        datasets: {prompts: {kind: random, samples: 1, batch_sizes: [1], dims: {seq: 4}}}
        models:
        """) + "".join(f"""\
          - name: {name}
            torch: decoders.py:make_{name}
            onnx: {name}.onnx
            adapter: causal-lm
            datasets: [prompts]
            rollout: {{steps: 2}}
            inputs: {{input_ids: {{shape: [batch, seq], dtype: int64, high: 64}}}}
""" for name in ("llama", "gpt2")))
    report = folder / "report.json"
    assert main(["run", str(spec), "--json", str(report), "--localize", "never"]) == 1
    return {case["model"]: case for case in json.loads(report.read_text())["cases"]}


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_a_whole_file_of_stale_weights_is_matched_counted_and_proven(
        model: str, whole: dict[str, dict[str, Any]]) -> None:
    case = whole[model]
    assert case["status"] == "failed", case["message"]
    cause = case["details"]["cause"]
    assert (cause["kind"], cause["proven"]) == ("stale-weights", True), cause["message"]
    assert cause["message"].startswith(
        "stale weights: the shipped ONNX holds weights that differ from the module's ("), (
        cause["message"])
    assert "could not be matched" not in cause["message"]
    assert "with the module's values in their place it passes" in cause["message"]


def test_tensors_left_unmatched_never_rule_stale_weights_out() -> None:
    """Every renamed weight of a whole stale Llama is paired by position (Linear weights
    transposed) and differs; one that nothing can pair is counted, and named."""
    import torch

    from fixtures import decoders
    from onnx_parity.run.adapters.flat_cache import cache_layout, flat_cache_module

    torch.manual_seed(0)
    module = decoders.make_llama()
    layout = cache_layout(module)
    wrapped = flat_cache_module(module, layout.layers)
    state = {n: t.detach().numpy().astype(np.float64) for n, t in wrapped.state_dict().items()}
    stale = {("onnx::MatMul_" + n if n.endswith("proj.weight") else n):
             (v.T if n.endswith("proj.weight") else v) + 0.5 for n, v in state.items()}
    stale["onnx::Constant_9"] = np.ones((3, 5))  # nothing in the module is [3, 5]
    check = compare_weights(stale, expected_values(wrapped))
    assert check.unmatched == ("onnx::Constant_9",)
    assert len(check.differ) == len(check.pairs) == len(state)
    assert all(p.transposed for p in check.pairs if p.initializer.startswith("onnx::MatMul_"))
    assert all(p.initializer.removeprefix("onnx::MatMul_") == p.expected.parameter
               for p in check.pairs)
    assert check.tally().endswith("; 1 could not be matched by name, shape or values "
                                  "('onnx::Constant_9')")
