"""A peer's suite at scale: the ONNX backend node tests, as one onnx-parity spec and as a bare loop.

The installed `onnx` package holds the 1,884 one-node test cases (onnx.backend.test.case.node)
but not their files; `generate` writes them as `onnx.backend.test.cmd_tools generate-data`
writes model cases (model.onnx and test_data_set_N/input_K.pb, output_K.pb), plus a spec with
one onnx-test-data dataset per model. Nothing is downloaded.

    python benchmarks/nodesuite.py generate DIR      # DIR/parity.yaml and DIR/<case>/...
    python benchmarks/nodesuite.py bare DIR          # the bare loop, as a user would write it
    python benchmarks/nodesuite.py polygraphy DIR    # DIR/inputs.json, outputs.json for
                                                     # `polygraphy run --load-inputs ...`
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ATOL, RTOL = 1e-4, 1e-3  # onnx-parity's defaults, so both sides judge alike


def generate(folder: Path, limit: int | None = None) -> Path:
    """Write the node cases under `folder` and a spec that checks each against its data."""
    from onnx import numpy_helper
    from onnx.backend.test.case import node

    with warnings.catch_warnings():  # the generators' own overflow warnings
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for case in cases[:limit]:
        model = case.model
        where = folder / case.name
        where.mkdir(exist_ok=True)
        (where / "model.onnx").write_bytes(model.SerializeToString())
        for index, (inputs, outputs) in enumerate(case.data_sets or ()):
            data = where / f"test_data_set_{index}"
            data.mkdir(exist_ok=True)
            for prefix, values, declared in (("input", inputs, model.graph.input),
                                             ("output", outputs, model.graph.output)):
                for k, value in enumerate(values):
                    proto = _proto(numpy_helper, value, declared[k])
                    (data / f"{prefix}_{k}.pb").write_bytes(proto.SerializeToString())
        names.append(case.name)
    lines = ["version: 1", "datasets:"]
    lines += [f"  {n}: {{kind: onnx-test-data, path: {n}}}" for n in names]
    lines.append("models:")
    lines += [f"  - {{name: {n}, onnx: {n}/model.onnx, datasets: [{n}]}}" for n in names]
    spec = folder / "parity.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def _proto(helper: Any, value: Any, declared: Any) -> Any:
    """The value as the proto its declared type calls for, as cmd_tools writes it."""
    kind = declared.type.WhichOneof("value")
    if kind == "map_type":
        return helper.from_dict(value, declared.name)
    if kind == "sequence_type":
        return helper.from_list(value, declared.name)
    if kind == "optional_type":
        return helper.from_optional(value, declared.name)
    if hasattr(value, "SerializeToString"):
        return value
    return helper.from_array(np.asarray(value), declared.name)


def bare(folder: Path, models: Sequence[Path] | None = None,
         threads: int | None = None) -> dict[str, Any]:
    """What a hand-written check does: a session per model, every data set run and compared
    with np.allclose. Models ONNX Runtime cannot load or run are counted, not compared.
    `models`: those model files only (all of the folder's); `threads`: ONNX Runtime's compute
    threads per session (its default)."""
    started = time.perf_counter()
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    outcomes: dict[str, str] = {}
    for model_path in sorted(folder.glob("*/model.onnx")) if models is None else models:
        name = model_path.parent.name
        try:
            session = ort.InferenceSession(str(model_path), options,
                                           providers=["CPUExecutionProvider"])
        except Exception:
            outcomes[name] = "not_loaded"
            continue
        inputs = [i.name for i in session.get_inputs()]
        ok = True
        try:
            for data in sorted(model_path.parent.glob("test_data_set_*")):
                feeds = {name: _read(onnx, numpy_helper, data / f"input_{k}.pb")
                         for k, name in enumerate(inputs) if (data / f"input_{k}.pb").exists()}
                actual = session.run(None, feeds)
                for k, got in enumerate(actual):
                    expected = _read(onnx, numpy_helper, data / f"output_{k}.pb")
                    ok = ok and _close(expected, got)
        except Exception:
            outcomes[name] = "not_run"
            continue
        outcomes[name] = "passed" if ok else "failed"
    return {"seconds": time.perf_counter() - started, "outcomes": outcomes}


def _read(onnx: Any, helper: Any, path: Path) -> Any:
    """A TensorProto, or a sequence, map or optional as cmd_tools wrote it."""
    data = path.read_bytes()
    for proto_type, convert in ((onnx.TensorProto, helper.to_array),
                                (onnx.SequenceProto, helper.to_list),
                                (onnx.MapProto, helper.to_dict),
                                (onnx.OptionalProto, helper.to_optional)):
        proto = proto_type()
        try:
            proto.ParseFromString(data)
        except Exception:
            continue
        if proto.ListFields():
            return convert(proto)
    return helper.to_array(onnx.TensorProto())


def _close(expected: Any, actual: Any) -> bool:
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            _close(e, a) for e, a in zip(expected, actual, strict=True))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and expected.keys() == actual.keys() and all(
            _close(expected[k], actual[k]) for k in expected)
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return False
    if expected.dtype.kind in "OUSb" or actual.dtype.kind in "OUSb":
        return bool(np.array_equal(expected, actual))
    return bool(np.allclose(actual.astype(np.float64) if actual.dtype.kind == "V" else actual,
                            expected.astype(np.float64) if expected.dtype.kind == "V"
                            else expected, rtol=RTOL, atol=ATOL, equal_nan=True))


def polygraphy_data(folder: Path) -> None:
    """A model folder's test data sets as Polygraphy's --load-inputs / --load-outputs files."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult
    from polygraphy.json import save_json

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    feeds, results = [], []
    for data in sorted(folder.glob("test_data_set_*")):
        feeds.append({n: _read(onnx, numpy_helper, data / f"input_{k}.pb")
                      for k, n in enumerate(inputs)})
        results.append(IterationResult(
            outputs={n: _read(onnx, numpy_helper, data / f"output_{k}.pb")
                     for k, n in enumerate(outputs)}, runner_name="recorded"))
    save_json(feeds, str(folder / "inputs.json"))
    RunResults([("recorded", results)]).save(str(folder / "outputs.json"))


if __name__ == "__main__":
    command, target = sys.argv[1], Path(sys.argv[2])
    if command == "generate":
        print(generate(target, int(sys.argv[3]) if len(sys.argv) > 3 else None))
    elif command == "polygraphy":
        polygraphy_data(target)
    else:
        print(json.dumps(bare(target)))
