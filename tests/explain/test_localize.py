"""Where the drift starts: faults planted at known places in real exports, found by name.

Each planted model is a shipped ONNX artifact checked against the PyTorch module it came from;
the verdict must name the planted node and the module behind it, for both exporters.
"""

from __future__ import annotations

import math
import shutil
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import FIXTURES, by_id
from onnx_parity.explain.evidence import Evidence
from onnx_parity.explain.followups import follow_ups, localize_and_bundle
from onnx_parity.explain.localize import (
    find_origin,
    read_graph,
    torchscript_module,
)
from onnx_parity.results import Tolerance

sys.path.insert(0, str(FIXTURES))
import faulty_models as fm

TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
EXPORTERS = ("torchscript", "dynamo")


# -- reading exporters' traces ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "module"), [
    ("/encoder/layers.0/mlp/mlp.0/Gemm", "encoder.layers.0.mlp.0"),
    ("/features/features.0/Conv", "features.0"),
    ("/encoder/layers.1/attn/MatMul", "encoder.layers.1.attn"),
    ("/head/Gemm", "head"),
    ("/Mul", ""),
])
def test_torchscript_node_names_give_module_paths(name: str, module: str) -> None:
    assert torchscript_module(name.split("/")[1:-1]) == module


def _node(op: str, inputs: list[str], outputs: list[str], name: str,
          meta: dict[str, str] | None = None) -> Any:
    node = helper.make_node(op, inputs, outputs, name=name)
    for key, value in (meta or {}).items():
        entry = node.metadata_props.add()
        entry.key, entry.value = key, value
    return node


def _chain_model(out_of_order: bool = False) -> onnx.ModelProto:
    """x → Relu (a) → Neg (b) → Abs (y), with dynamo-style scopes on the middle node."""
    nodes = [
        _node("Relu", ["x"], ["a"], "relu"),
        _node("Neg", ["a"], ["b"], "neg", {
            "pkg.torch.onnx.name_scopes": "['', 'block', 'block.act', 'neg']",
            "pkg.torch.onnx.class_hierarchy": "['Net', 'torch.nn.modules.Act', 'aten.neg.default']",
        }),
        _node("Abs", ["b"], ["y"], "/head/Abs"),
    ]
    if out_of_order:
        nodes = [nodes[2], nodes[0], nodes[1]]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_graph_is_read_in_topological_order_with_each_exporters_scope() -> None:
    graph = read_graph(_chain_model(out_of_order=True))
    assert [n.name for n in graph.nodes] == ["relu", "neg", "/head/Abs"]
    assert [n.module for n in graph.nodes] == [None, "block.act", "head"]
    assert graph.nodes[1].module_type == "Act" and graph.nodes[1].torch_op == "aten.neg.default"
    assert graph.dynamic == {"x", "a", "b", "y"}


def test_first_node_out_of_tolerance_with_inputs_within_is_the_origin() -> None:
    graph = read_graph(_chain_model())
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    good = {"a": np.maximum(x, 0), "b": -np.maximum(x, 0), "y": np.maximum(x, 0)}
    bad = {**good, "b": good["b"] + 0.5, "y": good["y"] - 0.5}
    found = find_origin(graph, bad, good, lambda _: TOLERANCE, reference_name="PyTorch")
    assert found.verdict == "origin"
    details = found.as_record()
    assert (details.node, details.op_type, details.module) == ("neg", "Neg", "block.act")
    assert details.max_abs == pytest.approx(0.5)
    assert [(e.node, e.within) for e in details.path] == [
        ("relu", True), ("neg", False), ("/head/Abs", False)]
    assert "Neg 'neg' in module block.act (Act)" in details.summary


def test_pytorchs_matched_modules_name_the_origin_and_its_call() -> None:
    """A graph without scopes: the module comes from the value match, with its class and, for
    a module called more than once, which call."""
    from onnx_parity.explain.localize.torchref import TorchReference

    graph = read_graph(helper.make_model(helper.make_graph(
        [_node("Relu", ["x"], ["a"], "relu"), _node("Neg", ["a"], ["y"], "neg")],
        "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    x = np.array([-1.0, 0.5, 1.0], np.float32)
    good = {"a": np.maximum(x, 0), "y": -np.maximum(x, 0)}
    bad = {**good, "y": good["y"] + 0.5}
    matched = TorchReference(good, {"a": "block", "y": "block.act"},
                             {"": "Net", "block": "Block", "block.act": "Act"},
                             {"y": (1, 3)})
    found = find_origin(graph, bad, good, lambda _: TOLERANCE, reference_name="PyTorch",
                        matched=matched)
    assert (found.module, found.module_type) == ("block.act", "Act, call 2 of 3")
    assert found.headline == "drift starts at Neg 'neg' in module block.act (Act, call 2 of 3)"
    passing = find_origin(graph, bad, good, lambda _: TOLERANCE, reference_name="PyTorch",
                          matched=matched, case_failed=False)
    assert passing.headline == f"with every intermediate tensor kept, {found.headline}"
    assert passing.summary == ("the outputs pass, but with every intermediate tensor kept: "
                               f"{found.summary}")


def test_nodes_with_no_reference_between_are_named_together() -> None:
    """A GELU lowered to several nodes: PyTorch has its output only, so the verdict names the
    module and every node of the lowering, not one of them."""
    gelu = {"pkg.torch.onnx.name_scopes": "['', 'act', 'gelu']",
            "pkg.torch.onnx.class_hierarchy": "['Net', 'torch.nn.GELU', 'aten.gelu.default']"}
    graph = read_graph(helper.make_model(helper.make_graph(
        [_node("Div", ["x", "c"], ["d"], "div", gelu), _node("Tanh", ["d"], ["e"], "tanh", gelu),
         _node("Mul", ["x", "e"], ["y"], "mul", gelu)],
        "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [helper.make_tensor("c", TensorProto.FLOAT, [], [1.4142135])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    found = find_origin(graph, {"y": np.array([1.0, 2.0, 3.0])}, {"y": np.array([1.0, 2.5, 3.0])},
                        lambda _: TOLERANCE, reference_name="PyTorch")
    details = found.as_record()
    assert (details.node, details.module) == ("mul", "act")
    assert details.segment == ("div", "tanh", "mul")
    assert "or the 2 nodes before it" in found.headline
    assert "(the lowering of aten.gelu.default: Div, Tanh, Mul)" in found.summary


def test_rounding_that_grows_is_no_single_origin() -> None:
    graph = read_graph(_chain_model())
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    good = {"a": np.maximum(x, 0), "b": -np.maximum(x, 0), "y": np.maximum(x, 0)}
    ulp = float(np.spacing(np.float32(1.0)))
    noisy = {**good, "b": good["b"] - 2 * ulp, "y": good["y"] + 50 * ulp}
    exact = Tolerance(atol=0.0, rtol=0.0)
    found = find_origin(graph, noisy, good, lambda _: exact, reference_name="PyTorch")
    assert found.verdict == "gradual"
    assert found.as_record().node is None
    assert found.summary.startswith("no single origin")
    assert [e.tensor for e in found.as_record().path] == ["a", "b", "y"]


def test_a_second_independent_fault_is_not_left_unsaid() -> None:
    graph = read_graph(helper.make_model(helper.make_graph(
        [_node("Relu", ["x"], ["a"], "left"), _node("Neg", ["x"], ["b"], "right"),
         _node("Add", ["a", "b"], ["y"], "join")],
        "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    x = np.array([-1.0, -0.5, 0.5, 1.0], np.float32)
    good = {"a": np.maximum(x, 0), "b": -x, "y": np.maximum(x, 0) - x}
    bad = {"a": good["a"] + 0.25, "b": good["b"] - 0.5, "y": good["y"] - 0.25}
    found = find_origin(graph, bad, good, lambda _: TOLERANCE, reference_name="the CPU provider")
    details = found.as_record()
    assert details.node == "left" and details.other_origins == 1
    assert "1 more tensor drifts while its inputs are within tolerance: 'b' of Neg 'right'" in (
        found.summary)


def test_agreeing_tensors_report_nothing_and_a_vanished_drift_says_so() -> None:
    graph = read_graph(_chain_model())
    values = {"a": np.ones((2, 3), np.float32), "b": -np.ones((2, 3), np.float32),
              "y": np.ones((2, 3), np.float32)}
    clean = find_origin(graph, values, values, lambda _: TOLERANCE, reference_name="PyTorch",
                        case_failed=False)
    assert clean.verdict == "none" and clean.as_record().node is None
    flipped = find_origin(graph, {**values, "b": -values["b"]}, values, lambda _: TOLERANCE,
                          reference_name="PyTorch", case_failed=False)  # |b|: y agrees
    assert (flipped.verdict, flipped.headline) == ("none", "no drift in the outputs")
    assert flipped.summary == ("the outputs are within tolerance of PyTorch, 1 of the 3 tensors"
                               " compared is not, first 'b' of Neg 'neg' (max abs 2.0e0): a"
                               " difference the outputs do not show")
    vanished = find_origin(graph, values, values, lambda _: TOLERANCE, reference_name="PyTorch")
    assert vanished.verdict == "vanished" and "fused kernel" in vanished.summary


def test_a_failing_localization_keeps_the_case_and_says_why(tmp_path: Path) -> None:
    from onnx_parity.plan.cases import Case
    from onnx_parity.results import OutputComparison
    from onnx_parity.spec import PREDEFINED_DATASETS, PREDEFINED_TARGETS, ModelSpec

    case = Case(id="m[onnx-cpu-random-b1]", model=ModelSpec(name="m", line=1), opset=None,
                exporter=None, target=PREDEFINED_TARGETS["cpu"],
                dataset=PREDEFINED_DATASETS["random"], batch_size=1)
    failing = OutputComparison(name="y", passed=False, atol=1e-4, rtol=1e-3, max_abs=1.0,
                               required_atol=1.0, worst_index=(0, 0))
    x = {"x": np.zeros((1, 3), np.float32)}
    evidence = Evidence(case, tmp_path / "gone.onnx", [x], ["y"], [[np.zeros(3)]],
                        [[np.ones(3)]], [failing])
    details = localize_and_bundle(follow_ups("failed", "failed", artifacts=True), evidence,
                                  failed=True, artifacts=tmp_path / "bundles")
    divergence = details.divergence
    assert divergence is not None and details.bundle is not None and details.bundle.error
    assert divergence.verdict == "unlocalized" and divergence.node is None
    assert "could not localize" in divergence.summary and "gone.onnx" in divergence.summary
    assert details.bundle.error.startswith("could not write the repro bundle")


# -- planted faults in real exports, through the command line -----------------------------------


def _export(exporter: str, folder: Path, overflow: bool = False) -> onnx.ModelProto:
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    path = folder / f"encoder-{exporter}{'-overflow' * overflow}.onnx"
    export_model(fm.make_encoder(overflow=overflow), [torch.randn(2, 6)],
                 [InputSpec("x", ("batch", 6))], ["y"], 18, exporter, path)
    return onnx.load(str(path))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """One shipped artifact per fault and exporter, next to a spec that checks each one against
    the module it came from; and where each fault was planted."""
    folder = tmp_path_factory.mktemp("planted")
    shutil.copy(FIXTURES / "faulty_models.py", folder / "faulty_models.py")
    where: dict[str, Any] = {}
    entries = []

    def ship(name: str, model: onnx.ModelProto, planted: Any, overflow: bool = False,
             tolerance: str = "") -> None:
        onnx.save(model, str(folder / f"{name}.onnx"))
        where[name] = planted
        args = "{overflow: true}" if overflow else "{}"
        entries.append(f"""
          - name: {name}
            onnx: {name}.onnx
            torch: faulty_models.py:make_encoder
            args: {args}
            {tolerance}""")

    for exporter in EXPORTERS:
        clean = _export(exporter, folder)
        short = exporter[:2]
        ship(f"{short}-clean", clean, None)
        model = onnx.ModelProto()
        model.CopyFrom(clean)
        ship(f"{short}-weight", model, fm.change_weight(model, "encoder.layers.2.mlp.2"))
        model = onnx.ModelProto()
        model.CopyFrom(clean)
        ship(f"{short}-swap", model, fm.swap_relu(model, 1))
        model = onnx.ModelProto()
        model.CopyFrom(clean)
        ship(f"{short}-epsilon", model, fm.change_epsilon(model, 2))
        variant = fm.to_float16(_export(exporter, folder, overflow=True))
        ship(f"{short}-fp16", variant, fm.overflow_node(variant), overflow=True,
             tolerance="tolerance: {atol: 1.0e-2, rtol: 1.0e-2}")
    model = onnx.ModelProto()
    model.CopyFrom(onnx.load(str(folder / "to-clean.onnx")))
    fault = fm.change_weight(model, "encoder.layers.2.mlp.2")
    renamed = fm.strip_names(model)
    ship("to-stripped", model, fm.Planted(renamed[fault.node], fault.module))

    spec = folder / "planted.yaml"
    spec.write_text(textwrap.dedent("""
        version: 1
        defaults:
          datasets: [signs]
        datasets:
          signs: {kind: random, seed: 3, samples: 3, batch_sizes: [4]}
        models:""") + textwrap.dedent("".join(entries)) + "\n")
    yield spec, where


def _run(run_cli: Callable[..., Any], spec: Path, *args: str) -> dict[str, dict[str, Any]]:
    _, out, err, report = run_cli(spec, "--jobs", "2", *args)
    assert report, out + err
    return by_id(report)


@pytest.mark.slow
def test_planted_faults_are_named_with_node_and_module(
        planted: tuple[Path, dict[str, Any]], run_cli: Callable[..., Any]) -> None:
    spec, where = planted
    cases = _run(run_cli, spec)
    for case_id, case in cases.items():
        name = case["model"]
        fault = where[name]
        if fault is None:
            assert case["status"] == "passed", case["message"]
            assert "divergence" not in case["details"]  # --localize failed: clean says nothing
            continue
        assert case["status"] == "failed", (case_id, case["message"])
        divergence = case["details"]["divergence"]
        assert divergence["verdict"] == "origin", (case_id, divergence["summary"])
        assert (divergence["node"], divergence["module"]) == (fault.node, fault.module), (
            case_id, divergence["summary"])
        assert fault.node in divergence["summary"] and fault.module in divergence["summary"]
        path = divergence["path"]
        first_off = next(e for e in path if not e["within"])
        assert first_off["node"] == fault.node
        assert all(e["within"] for e in path[: path.index(first_off)])
        assert divergence["reference"] == "PyTorch"
        assert "other_origins" not in divergence  # one planted fault, one origin
        if name.endswith("fp16"):  # float16's overflow: Inf where PyTorch is finite
            assert divergence["max_abs"] == "inf" and "NaN/Inf" in divergence["summary"]
        else:
            assert divergence["max_abs"] > 0


@pytest.mark.slow
def test_clean_models_report_nothing_even_when_always_localized(
        planted: tuple[Path, dict[str, Any]], run_cli: Callable[..., Any]) -> None:
    spec, _ = planted
    cases = _run(run_cli, spec, "--localize", "always", "--select", "*-clean*")
    assert len(cases) == len(EXPORTERS)
    for case in cases.values():
        divergence = case["details"]["divergence"]
        assert case["status"] == "passed"
        assert divergence["verdict"] == "none" and divergence["node"] is None
        assert divergence["compared"] > 10  # the modules' outputs were matched and compared
        assert divergence["path"] == []


@pytest.mark.slow
def test_localize_never_adds_nothing(planted: tuple[Path, dict[str, Any]],
                                     run_cli: Callable[..., Any]) -> None:
    spec, _ = planted
    cases = _run(run_cli, spec, "--localize", "never", "--select", "to-weight*")
    assert [c["status"] for c in cases.values()] == ["failed"]
    assert all("divergence" not in c["details"] for c in cases.values())


@pytest.mark.slow
def test_a_precision_variant_against_its_float32_graph_tensor_by_tensor(
        planted: tuple[Path, dict[str, Any]]) -> None:
    """The reference-target comparison: every tensor of the same graph, matched by name, the
    module read from the graph alone (no PyTorch)."""
    from onnx_parity.explain.localize import mark_intermediates, run_marked
    from onnx_parity.spec import PREDEFINED_TARGETS

    spec, where = planted
    variant = mark_intermediates(spec.parent / "to-fp16.onnx")
    original = mark_intermediates(spec.parent / "encoder-torchscript-overflow.onnx")
    feeds = {"x": np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)}
    cpu = PREDEFINED_TARGETS["cpu"]
    actual, _ = run_marked(variant, cpu, feeds)
    reference, _ = run_marked(original, cpu, feeds)
    loose = Tolerance(atol=1e-2, rtol=1e-2)
    found = find_origin(variant.graph, actual, reference, lambda _: loose,
                        reference_name="the float32 graph")
    details = found.as_record()
    assert (details.node, details.module) == (where["to-fp16"].node,
                                                    where["to-fp16"].module)
    assert details.compared > 20  # every shared tensor, not only modules' outputs


@pytest.mark.gpu
def test_a_cuda_target_is_compared_with_the_cpu_provider_tensor_by_tensor(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: linear
            torch: models.py:make_linear
            inputs:
              x: {shape: [batch, 4], dtype: float32}
            targets: [cuda]
        """)
    cases = _run(run_cli, spec, "--localize", "always")
    divergence = next(iter(cases.values()))["details"]["divergence"]
    assert divergence["reference"] == "the CPU provider", divergence["summary"]
    assert divergence["compared"] >= 2


def test_the_examples_faulty_cases_get_their_verdicts_in_every_report(
        run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from helpers import ROOT
    from onnx_parity.report import github
    from onnx_parity.report.jsonfile import read_json

    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    code, out, _, report = run_cli(ROOT / "examples" / "faulty.yaml",
                                   "--select", "sign-gate-traced*", "--select", "stale-mlp*",
                                   "--select", "golden-head*", "--junit", str(junit),
                                   "--summary", str(summary))
    assert code == 1
    cases = by_id(report)
    traced = cases["sign-gate-traced[opset18-cpu-signs-b1]"]["details"]["divergence"]
    assert traced["verdict"] == "origin" and traced["module"] == ""  # the top-level forward()
    assert traced["path"][0] == {"node": "/linear/Gemm", "op_type": "Gemm", "module": "linear",
                                 "tensor": "/linear/Gemm_output_0",
                                 "max_abs": traced["path"][0]["max_abs"], "within": True}
    stale = cases["stale-mlp[onnx-cpu-signs-b1]"]["details"]["divergence"]
    assert (stale["node"], stale["op_type"], stale["module"]) == ("/0/Gemm", "Gemm", "0")
    golden = cases["golden-head[onnx-cpu-drifted]"]["details"]["divergence"]
    assert golden["verdict"] == "no-reference" and golden["node"] is None
    assert "recorded" in golden["summary"]
    assert all(math.isfinite(c["details"]["divergence"]["seconds"]) for c in cases.values())

    # Every report names the node and the module; the summary shows the path.
    headline = "drift starts at Gemm '/0/Gemm' in module 0 (Linear)"
    assert f"↳ {headline}" in out
    failures = {case.get("name"): case.find("failure")
                for case in ET.parse(junit).getroot().iter("testcase")}
    stale_failure = failures["stale-mlp[onnx-cpu-signs-b1]"]
    assert stale_failure is not None and stale_failure.get("message", "").endswith(headline)
    assert "OFF        1.6e0  Gemm '/0/Gemm' in module 0" in (stale_failure.text or "")
    markdown = summary.read_text()
    assert f"📍 {headline}" in markdown
    assert "path: /0/Gemm 1.6e0 ✗ → /1/Mul\\_1 1.4e0 ✗ → /2/Gemm 7.9e-1 ✗" in markdown
    lines = github.annotations(read_json(tmp_path / "report.json"), "examples/faulty.yaml")
    stale_line = next(line for line in lines if "stale-mlp" in line)
    assert stale_line.endswith(headline)


# -- reused modules: one record per call -------------------------------------------------------


@pytest.fixture(scope="module")
def reused(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """ResNet-style blocks that call one ReLU twice and a block called twice, and a head tied
    to its embedding: each exported by both exporters, clean and with one planted fault."""
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    folder = tmp_path_factory.mktemp("reused")
    shutil.copy(FIXTURES / "faulty_models.py", folder / "faulty_models.py")
    where: dict[str, Any] = {}
    entries = []
    nets = {
        "net": ("make_reusing_net", torch.randn(2, 3, 8, 8), InputSpec("x", ("batch", 3, 8, 8)),
                "x: {shape: [batch, 3, 8, 8]}"),
        "lm": ("make_tied_lm", torch.randint(0, 20, (2, 5)),
               InputSpec("tokens", ("batch", 5), "int64", high=20),
               "tokens: {shape: [batch, 5], dtype: int64, low: 0, high: 20}"),
    }
    for exporter in EXPORTERS:
        for net, (factory, example, spec_input, inputs) in nets.items():
            path = folder / f"{net}-{exporter}.onnx"
            export_model(getattr(fm, factory)(), [example], [spec_input], ["y"], 18, exporter,
                         path)
            faults: dict[str, Any] = {"clean": None}
            if net == "net":  # the 5th Conv: layer1.1's conv2, its BatchNorm folded in or not
                faults["block"] = lambda model: fm.scale_nth(model, "Conv", 4, "layer1.1")
            else:
                faults["block"] = lambda model: fm.scale_nth(model, "MatMul", 0, "block.0")
                faults["head"] = lambda model: fm.scale_nth(model, "MatMul", 1, "head")
            for fault, plant in faults.items():
                model = onnx.load(str(path))
                name = f"{net}-{exporter[:2]}-{fault}"
                where[name] = plant(model) if plant else None
                onnx.save(model, str(folder / f"{name}.onnx"))
                entries.append(f"  - {{name: {name}, onnx: {name}.onnx, "
                               f"torch: faulty_models.py:{factory}, inputs: {{{inputs}}}}}\n")
    spec = folder / "reused.yaml"
    spec.write_text("version: 1\ndefaults: {datasets: [pair]}\n"
                    "datasets: {pair: {kind: random, seed: 5, samples: 2, batch_sizes: [2]}}\n"
                    "models:\n" + "".join(entries))
    return spec, where


@pytest.mark.slow
def test_reused_modules_are_localized_call_by_call(
        reused: tuple[Path, dict[str, Any]], run_cli: Callable[..., Any]) -> None:
    spec, where = reused
    for case in _run(run_cli, spec, "--localize", "always").values():
        fault = where[case["model"]]
        divergence = case["details"]["divergence"]
        if fault is None:  # clean: the calls of the reused ReLU are each their own reference
            assert case["status"] == "passed", case["message"]
            assert divergence["verdict"] == "none", divergence["summary"]
            continue
        assert case["status"] == "failed"
        assert divergence["verdict"] == "origin", (case["id"], divergence["summary"])
        # The planted node, or the node that ends its segment (a Linear's MatMul then Add, with
        # PyTorch's tensor only after the Add).
        named = [divergence["node"], *divergence.get("segment", [])]
        assert fault.node in named, (case["id"], divergence["summary"])
        assert divergence["module"].startswith(fault.module), (case["id"], divergence["summary"])
        assert "other_origins" not in divergence


def test_a_module_called_twice_is_split_into_its_calls() -> None:
    from onnx_parity.explain.localize.torchref import _call_scopes, _split

    assert _split([3, 9], 2) == [[3], [9]]  # one ReLU per call
    assert _split([1, 2, 3, 4, 5, 6], 2) == [[1, 2, 3], [4, 5, 6]]  # a block called twice
    assert _split([1, 2, 5, 6, 7], 2) == [[1, 2], [5, 6, 7]]  # uneven: the graph's runs
    assert _split([1, 2, 4, 6, 7], 2) is None  # neither: the calls cannot be told apart
    scopes = _call_scopes({"relu": {9, 3}, "stem": {1}, "odd": {1, 2, 4, 6, 7}},
                          {"relu": 2, "stem": 1, "odd": 2})
    assert scopes == {"relu#0": {3}, "relu#1": {9}, "stem#0": {1},
                      "odd#0": {1, 2, 4, 6, 7}, "odd#1": {1, 2, 4, 6, 7}}


# -- pairing PyTorch's tensors with the graph's: certain, or not at all --------------------------


def _qkv_block() -> Any:
    """GPT-2's attention in small: one Linear makes q, k and v, split apart in the module's own
    forward (the dynamo exporter leaves that Split without a scope, so its three outputs, of one
    shape, all enter module attn from outside), then a LayerNorm before it and a head after."""
    import torch
    from torch import nn

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(8, 24), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.c_attn(x).split(8, dim=2)
            return self.c_proj(torch.softmax(q @ k.transpose(1, 2), -1) @ v)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln, self.attn, self.head = nn.LayerNorm(8), Attn(), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(x + self.attn(self.ln(x)))

    torch.manual_seed(0)
    return Block().eval()


@pytest.fixture(scope="module")
def qkv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """The block, its dynamo export with every tensor kept, and one run of that on the CPU."""
    import torch

    from onnx_parity.explain.localize import mark_intermediates, run_marked
    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import PREDEFINED_TARGETS, InputSpec

    module, x = _qkv_block(), torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("qkv") / "qkv.onnx"
    export_model(module, [x], [InputSpec("x", (1, 5, 8))], ["y"], 18, "dynamo", path)
    marked = mark_intermediates(path)
    feeds = {"x": x.numpy()}
    actual, _ = run_marked(marked, PREDEFINED_TARGETS["cpu"], feeds)
    return module, marked.graph, {**feeds, **actual}


def _against(module: Any, graph: Any, actual: dict[str, np.ndarray]) -> Any:
    from onnx_parity.explain.localize import torch_reference

    found = torch_reference(module, {"x": actual["x"]}, graph, actual, TOLERANCE)
    return found, find_origin(graph, actual, found.values, lambda _: TOLERANCE,
                              reference_name="PyTorch", matched=found)


def test_a_split_is_never_paired_with_the_wrong_tensor(
        qkv: tuple[Any, Any, dict[str, np.ndarray]]) -> None:
    """Module attn's input (the LayerNorm's output) once went to one of the Split's outputs, of
    its shape, and a clean GPT-2 read as drifting at the Split. Every tensor paired with a
    clean module agrees; a planted fault after the Split is named there, not at the Split; one
    before it is named, and the input it leaves ambiguous is said to be left out, not guessed."""
    import copy

    import torch

    from onnx_parity.explain.localize import excess

    module, graph, actual = qkv
    split = next(n for n in graph.nodes if n.op_type == "Split")
    found, clean = _against(module, graph, actual)
    assert len(found.values) >= 6 and not set(split.outputs) & set(found.values)
    assert all(excess(v, actual[t], TOLERANCE) <= 1 for t, v in found.values.items())
    assert found.uncertain == () and clean.verdict == "vanished"  # all agree: nothing to name
    passing = find_origin(graph, actual, found.values, lambda _: TOLERANCE,
                          reference_name="PyTorch", matched=found, case_failed=False)
    assert passing.summary == f"all {passing.compared} tensors compared with PyTorch are within" \
        " tolerance"
    for planted, left_out in (("head", ""), ("ln", (
            "; the input of module attn left uncompared, not compared with a guess: several"
            " tensors of the graph have its shape and none agrees within tolerance"))):
        changed = copy.deepcopy(module)
        with torch.no_grad():
            getattr(changed, planted).weight.mul_(1.5)
        found, divergence = _against(changed, graph, actual)
        assert divergence.verdict == "origin", divergence.summary
        assert divergence.module == planted and divergence.origin is not None
        assert divergence.origin.tensor not in split.outputs
        assert divergence.summary.endswith(left_out or "within tolerance"), divergence.summary


def test_a_torchscript_submodule_is_localized_around(tmp_path: Path) -> None:
    """An eager module holding a scripted one (a .jit file loaded and wrapped): hooks go on the
    eager modules only, where `register_forward_pre_hook` used to fail on the ScriptModule, and
    the verdict says that nothing inside it was compared and what to do."""
    import torch
    from torch import nn

    from onnx_parity.explain.localize import mark_intermediates, run_marked, torch_reference
    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import PREDEFINED_TARGETS, InputSpec

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(4, 4)
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.inner(self.pre(x)))

    torch.manual_seed(0)
    module, x = Wrapped().eval(), torch.randn(3, 4)
    path = tmp_path / "wrapped.onnx"
    export_model(module, [x], [InputSpec("x", (3, 4))], ["y"], 17, "torchscript", path)
    marked = mark_intermediates(path)
    actual, _ = run_marked(marked, PREDEFINED_TARGETS["cpu"], {"x": x.numpy()})
    module.inner = torch.jit.script(module.inner)  # as wrapped after torch.jit.load
    with torch.no_grad():
        module.head.bias.add_(1.0)  # PyTorch off at the head: the export is the other side
    found = torch_reference(module, {"x": x.numpy()}, marked.graph, {"x": x.numpy(), **actual},
                            TOLERANCE)
    assert found.scripted == ("inner",)
    assert set(found.modules.values()) >= {"pre", "head"}
    assert not any(m.startswith("inner") for m in found.modules.values())
    divergence = find_origin(marked.graph, actual, found.values, lambda _: TOLERANCE,
                             reference_name="PyTorch", matched=found)
    assert divergence.verdict == "origin" and divergence.module == "head"
    assert divergence.summary.endswith(
        "; nothing inside inner was compared: a TorchScript submodule (torch.jit.ScriptModule)"
        " takes no forward hooks, only what enters and leaves it has a reference; give the eager"
        " module's factory to look inside it")


def test_a_torchscript_module_says_what_is_checked_and_what_to_do(tmp_path: Path) -> None:
    """A module that is TorchScript throughout (torch.jit.load of silero-vad's .jit): its
    outputs are compared, nothing inside it is, and the verdict says how to localize."""
    import torch

    from onnx_parity.explain.localize import localize_case
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import PREDEFINED_DATASETS, PREDEFINED_TARGETS, InputSpec, ModelSpec

    torch.manual_seed(0)
    eager, x = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()).eval(), torch.randn(1, 3)
    export_model(eager, [x], [InputSpec("x", (1, 3))], ["y"], 17, "torchscript",
                 tmp_path / "m.onnx")
    case = Case(id="m[onnx-cpu-random-b1]", model=ModelSpec(name="m", line=1), opset=None,
                exporter=None, target=PREDEFINED_TARGETS["cpu"],
                dataset=PREDEFINED_DATASETS["random"], batch_size=1)
    with torch.no_grad():
        wrong = [eager(x).numpy() + 0.5]
    evidence = Evidence(case, tmp_path / "m.onnx", [{"x": x.numpy()}], ["y"], [wrong], [wrong])
    found = localize_case(evidence, 0, torch.jit.script(eager), case_failed=True).divergence
    assert (found.verdict, found.reference) == ("no-reference", "PyTorch")
    assert found.headline == ("drift not localized: no intermediate reference: a TorchScript"
                              " module gives only its outputs")
    assert found.summary == (
        "no intermediate reference: the target runs on the CPU provider, the reference target"
        " itself, and the module is TorchScript (a torch.jit.ScriptModule), which takes no"
        " forward hooks: PyTorch gives only its outputs, so the outputs are compared and nothing"
        " inside them; to localize, give the model's torch: the eager module's factory (the"
        " nn.Module before torch.jit.script, or the source a .jit file was saved from); the"
        " drift lies between this graph and the module (the file or the module changed since"
        " the export?)")
