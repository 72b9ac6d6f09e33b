"""Repro bundles: a failed case's model, data and diverging subgraph, checkable on their own.

One folder per failed case under `--artifacts DIR`, named after the case id:

    parity.yaml       a spec that re-runs the check on this folder and DIR/models/, without
                      PyTorch: `onnx-parity run DIR/<case>/parity.yaml`
    expected/         test_data_set_N/input_K.pb and output_K.pb: the case's inputs and the
                      reference outputs (PyTorch's, or the recorded ones), ONNX test-data layout
    actual/           the same inputs and the target's outputs
    origin/           where the drift starts: model.onnx, the subgraph from the tensors the first
                      diverging node is computed from to its output (onnx.utils.Extractor), and
                      test_data_set_0 with those tensors and the reference's value of its output
    case.json         the case id, its outputs' verdicts and details["divergence"]

The model the case ran (exported, shipped or a variant) is not copied into the folder: every
case of a model refers to one copy, DIR/models/<model>.<file> (artifacts.shared_model), which
the spec names by a relative path; DIR as a whole moves and uploads as it is.

The spec checks the model on `expected/` and, when there is an origin, the subgraph on
`origin/`: both fail as the case did, and either can be handed to whoever owns the exporter or
the runtime.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.backends.kinds import target_kind
from onnx_parity.explain.artifacts import case_folder, shared_model
from onnx_parity.frozen import frozen
from onnx_parity.metrics.registry import gating

if TYPE_CHECKING:
    from onnx_parity.explain.evidence import Evidence
    from onnx_parity.explain.localize import Localization
    from onnx_parity.plan.cases import Case
    from onnx_parity.results import Tolerance

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]
SPEC_NAME = "parity.yaml"


@frozen
class Bundle:
    folder: Path
    command: str  # re-runs the check on the bundle alone


def write_bundle(root: Path, evidence: Evidence, finding: Localization | None = None) -> Bundle:
    """Write the bundle of one failed case; an existing bundle of the same case is replaced.

    A reduced-precision case's spec names the float32 model it was made from (kept under
    DIR/models/ as well) and, for static int8, holds the calibration inputs (`calibration/`):
    it makes the variant again and checks it as the case did.
    """
    case, model_path, float32 = evidence.case, evidence.model_path, evidence.float32_path
    inputs, calibration = evidence.inputs, evidence.calibration
    folder = case_folder(root, case.id)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    name = case.model.name
    checked = _relative(shared_model(root, name, model_path), folder)
    made_from = _relative(shared_model(root, name, float32), folder) if float32 else None
    if calibration:
        write_test_data(folder / "calibration", calibration, [[] for _ in calibration], [])
    write_test_data(folder / "expected", inputs, evidence.expected, evidence.names)
    write_test_data(folder / "actual", inputs, evidence.actual, evidence.names)
    origin = None
    if finding is not None and finding.divergence.verdict == "origin":
        origin = write_origin(folder / "origin", model_path, finding)
    (folder / SPEC_NAME).write_text(_spec_text(case, folder, checked, origin, made_from,
                                               bool(calibration)), encoding="utf-8")
    (folder / "case.json").write_text(json.dumps(_case_facts(case, checked, finding), indent=2,
                                                 default=str) + "\n", encoding="utf-8")
    return Bundle(folder, f"onnx-parity run {shlex.quote(str(folder / SPEC_NAME))}")


def write_test_data(folder: Path, inputs: Sequence[Mapping[str, Array]],
                    outputs: Sequence[Sequence[Array]], names: Sequence[str]) -> None:
    """ONNX test-data layout: test_data_set_N/input_K.pb and output_K.pb, TensorProtos."""
    from onnx import numpy_helper

    for index, (feeds, values) in enumerate(zip(inputs, outputs, strict=True)):
        target = folder / f"test_data_set_{index}"
        target.mkdir(parents=True, exist_ok=True)
        for k, (name, array) in enumerate(feeds.items()):
            (target / f"input_{k}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(array), name).SerializeToString())
        for k, array in enumerate(values):
            name = names[k] if k < len(names) else f"output_{k}"
            (target / f"output_{k}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(array), name).SerializeToString())


def _relative(path: Path, folder: Path) -> str:
    """`../models/mlp.mlp.opset17.dynamo.onnx`: how the bundle's spec names a shared model."""
    return Path(os.path.relpath(path, folder)).as_posix()


@frozen
class Origin:
    """The subgraph written under origin/, and which of its tensors are which."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def write_origin(folder: Path, model_path: Path, finding: Localization) -> Origin:
    """The diverging node with the nodes back to its compared inputs, and their values."""
    import onnx
    from onnx import numpy_helper

    divergence, graph = finding.divergence, finding.graph
    assert divergence.origin is not None and graph is not None
    output = divergence.origin.tensor
    # Inputs that have a batch axis first: an onnx-test-data dataset takes its batch from input 0.
    inputs = tuple(sorted(divergence.frontier, key=lambda t: np.ndim(finding.actual[t]) == 0))
    model = onnx.load(str(model_path))
    _sort_nodes(model, graph)
    _declare(model, {t: finding.actual[t] for t in (*inputs, output)})
    sub = onnx.utils.Extractor(model).extract_model(list(inputs), [output])
    reference = np.asarray(finding.reference[output])
    produced = np.asarray(finding.actual[output])
    if reference.dtype != produced.dtype and reference.dtype.kind == produced.dtype.kind == "f":
        _cast_output(sub, output, reference.dtype)  # fp16 graph, float32 reference: compare wide
    onnx.checker.check_model(sub)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save_model(sub, str(folder / "model.onnx"))
    data = folder / "test_data_set_0"
    data.mkdir(exist_ok=True)
    for k, name in enumerate(inputs):
        (data / f"input_{k}.pb").write_bytes(
            numpy_helper.from_array(np.asarray(finding.actual[name]), name).SerializeToString())
    (data / "output_0.pb").write_bytes(
        numpy_helper.from_array(reference, output).SerializeToString())
    return Origin(inputs, (output,))


def _sort_nodes(model: Any, graph: Any) -> None:
    """Put the nodes in topological order: Extractor keeps file order, which need not be one."""
    by_name: dict[tuple[str, ...], list[Any]] = {}
    for node in model.graph.node:
        by_name.setdefault(tuple(o for o in node.output if o), []).append(node)
    ordered = [by_name[n.outputs].pop(0) for n in graph.nodes if by_name.get(n.outputs)]
    if len(ordered) == len(model.graph.node):
        del model.graph.node[:]
        model.graph.node.extend(ordered)


def _declare(model: Any, values: Mapping[str, Array]) -> None:
    """A value_info for each cut tensor that shape inference leaves undeclared."""
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        model.graph.value_info.extend(
            v for v in inferred.graph.value_info
            if v.name not in {w.name for w in model.graph.value_info})
    except Exception as exc:  # onnx raises several types; the observed values will do
        logger.debug("shape inference failed: %s", exc)
    declared = {v.name for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    for name, array in values.items():
        if name not in declared:
            array = np.asarray(array)
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            model.graph.value_info.append(helper.make_tensor_value_info(name, elem, array.shape))


def _cast_output(model: Any, name: str, dtype: np.dtype[Any]) -> None:
    from onnx import helper

    narrow = f"{name}__narrow"
    for node in model.graph.node:
        node.output[:] = [narrow if o == name else o for o in node.output]
        node.input[:] = [narrow if i == name else i for i in node.input]
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    model.graph.node.append(helper.make_node("Cast", [narrow], [name], to=elem,
                                             name=f"{name}/cast_to_reference_type"))
    for output in model.graph.output:
        if output.name == name:
            output.type.tensor_type.elem_type = elem


def _spec_text(case: Case, folder: Path, checked: str, origin: Origin | None,
               made_from: str | None = None, calibrated: bool = False) -> str:
    import yaml

    model = case.model
    target = case.target
    # The tolerances this case was judged with, resolved for its target: the bundle's spec has
    # that one target, and no defaults or other layers to resolve them from.
    whole = case.tolerance_for()
    tolerance = _tolerance_entry(whole)
    named = {name: case.tolerance_for(name) for name in model.tolerances.output_names()}
    if named:
        tolerance["outputs"] = {name: _tolerance_entry(t) for name, t in named.items()}
    target_entry = target_kind(target).bundle_entry()
    datasets: dict[str, Any] = {"expected": {"kind": "onnx-test-data", "path": "expected"}}
    models: list[dict[str, Any]] = [{
        "name": model.name, "onnx": checked, "targets": [target.name],
        "datasets": ["expected"], "tolerance": tolerance,
    }]
    if made_from is not None:  # the variant is made again from the float32 model, as judged
        entry = models[0]
        entry.update(onnx=made_from, precisions=[case.precision],
                     tolerance={"precisions": {case.precision: tolerance}})
        if calibrated:
            datasets["calibration"] = {"kind": "onnx-test-data", "path": "calibration"}
            entry["calibration"] = "calibration"
    if origin is not None:
        datasets["origin"] = {"kind": "onnx-test-data", "path": "origin"}
        models.append({
            "name": f"{model.name}.origin", "onnx": "origin/model.onnx", "targets": [target.name],
            "datasets": ["origin"], "tolerance": _tolerance_entry(whole),
        })
    document = {"version": 1, "targets": {target.name: target_entry}, "datasets": datasets,
                "models": models}
    header = (f"# onnx-parity repro bundle for {case.id}\n"
              "# Re-runs the check on this folder and ../models/, PyTorch's outputs recorded in"
              " expected/:\n"
              f"#   onnx-parity run {shlex.quote(str(folder / SPEC_NAME))}\n")
    return header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True,
                                   default_flow_style=None, width=100)


def _tolerance_entry(tolerance: Tolerance) -> dict[str, Any]:
    """A resolved tolerance as a spec writes it: atol and rtol where they check elements, and
    the metrics that gate (a reduced precision's bundle is judged as its case was)."""
    entry: dict[str, Any] = {}
    if tolerance.elementwise:
        entry.update(atol=tolerance.atol, rtol=tolerance.rtol)
    entry.update({metric.key: metric.written(setting)
                  for metric, setting in gating(tolerance.metrics)})
    return entry


def _case_facts(case: Case, checked: str, finding: Localization | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "id": case.id, "model": case.model.name, "onnx": checked, "target": case.target.name,
        "dataset": case.dataset.name, "batch_size": case.batch_size, "opset": case.opset,
        "exporter": case.exporter, "precision": case.precision,
    }
    if finding is not None:
        facts["divergence"] = dataclasses.asdict(finding.divergence.as_record())
    return facts
