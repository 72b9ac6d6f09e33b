"""A float16 case's own checks, which fail it whatever its comparison says: how much of the graph
really ran in float16 on the case's target, from ONNX Runtime's profile of the session, and
float16's range checked on the float32 model's own tensors, which needs no GPU.

ONNX Runtime's CPU provider has float16 kernels for few ops. For every other float16 node it
inserts casts and runs the node in float32 (its InsertCastTransformer), and the profile shows
those kernels' float32 types. So on the CPU a float16 variant shows neither float16 overflow
nor float16 rounding: an RMSNorm whose x² exceeds 65504 passes there with cosine 0.9999999.

The range check stands in for real float16 arithmetic. The float32 model runs once on the
case's samples with the largest |x| of every float tensor computed inside the graph (Abs,
ReduceMax: only scalars come back, so the tensors are never all in memory at once). Each tensor
that is float16 in the variant (matched through the node that makes it: the float16 converter
keeps node and tensor names, and renames only the graph's outputs) and whose float32 values
leave float16's range (compare/float16.py) is a candidate. A candidate fails the case only
when a second run proves it matters: the float32 model with the candidates up to it stored in
float16 (a Cast to float16 and back, so overflow becomes inf and underflow 0, as float16
storage makes them) must move the outputs beyond the case's tolerance, judged against the
float32 model's own outputs. The first such candidate in graph order, found by bisection over
the candidates, is named. An attention mask of -3.4e38 that becomes -inf leaves the range and
changes nothing, so it is a note, not a failure.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.backends import OrtTarget, create_session
from onnx_parity.compare.float16 import leaves_float16, reference_overflows
from onnx_parity.compare.outputs import compare_case, verdict
from onnx_parity.compare.sentences import (
    float16_ran,
    outputs_sentence,
    range_failure,
    range_harmless,
    range_holds,
    range_unchecked,
    reference_overflowed,
)
from onnx_parity.findings import Float16Record, RangeRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU
from onnx_parity.results import OutputComparison
from onnx_parity.run.keys import Float16NodesKey, Float16RangeKey, Float32RangesKey
from onnx_parity.spec import PREDEFINED_TARGETS

if TYPE_CHECKING:
    from onnx_parity.explain.localize.graph import GraphNode
    from onnx_parity.plan.cases import Case
    from onnx_parity.run.prepared import PreparedCase
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]
SampleInputs = Sequence[Mapping[str, Array]]  # each sample's inputs, by name
_FLOAT, _FLOAT16 = 1, 10  # onnx.TensorProto.FLOAT and FLOAT16, without importing onnx
SHOWN = 5  # candidates kept in the record


def ran_in_float16(target: OrtTarget, path: Path, spec: TargetSpec, feeds: Mapping[str, Array],
                   threads: int | None = None) -> tuple[Float16Record, str]:
    """The compute nodes of the case's session and those that gave float16 tensors, from the
    profile of its first run (a target that is not profiled gets a profiled twin session for
    one run), and the note that says it."""
    try:
        placement = target.placement(feeds)
        if placement is None:
            placement = OrtTarget(path, spec, threads, profile=True).placement(feeds)
    except Exception as exc:  # the case's own run says what is wrong with the session
        logger.debug("profiling %s for float16 failed: %s", path, exc)
        placement = None
    if placement is None:
        record = Float16Record()
        return record, float16_ran(spec.name, record, cpu_only=False)
    record = Float16Record(nodes=sum(placement.arithmetic.values()),
                           float16_nodes=sum(placement.float16.values()))
    in_float32 = {provider for provider, count in placement.arithmetic.items()
                  if count > placement.float16.get(provider, 0)}
    return record, float16_ran(spec.name, record, cpu_only=in_float32 == {CPU})


# -- the float32 model's ranges ---------------------------------------------------------------


@frozen
class Float32Run:
    """The float32 model on a dataset's samples: the largest |x| of each float tensor (graph
    inputs included) over every sample, and its outputs `names`, per sample."""

    max_abs: Mapping[str, float]
    outputs: tuple[tuple[Any, ...], ...]


def float32_run(float32: Path, feeds: SampleInputs, names: Sequence[str],
                threads: int | None = None) -> Float32Run:
    """One run per sample of the float32 model with each float tensor's largest |x| computed
    in the graph (Abs, then ReduceMax over every axis: one scalar per tensor comes back)."""
    import onnx
    from onnx import helper

    from onnx_parity.explain.localize.graph import elem_types, read_graph  # only a float16 variant

    model = onnx.load(str(float32), load_external_data=False)
    graph = read_graph(model)
    types = elem_types(model)
    types.update({v.name: v.type.tensor_type.elem_type for v in model.graph.output})
    tensors = [t for node in graph.nodes for t in node.outputs
               if t in graph.dynamic and types.get(t) == _FLOAT]
    reduced = []
    for index, tensor in enumerate(tensors):
        absolute, largest = f"onnx_parity.abs.{index}", f"onnx_parity.max_abs.{index}"
        model.graph.node.extend([helper.make_node("Abs", [tensor], [absolute]),
                                 helper.make_node("ReduceMax", [absolute], [largest],
                                                  keepdims=0)])
        model.graph.output.append(helper.make_tensor_value_info(largest, _FLOAT, []))
        reduced.append(largest)
    session = _cpu_session(model.SerializeToString(), float32, threads)
    max_abs: dict[str, float] = {}
    outputs = []
    for sample in feeds:
        values = session.run([*names, *reduced], dict(sample))
        outputs.append(tuple(values[:len(names)]))
        found = {t: float(v) for t, v in zip(tensors, values[len(names):], strict=True)}
        found.update({name: _largest(array) for name, array in sample.items()
                      if np.asarray(array).dtype == np.float32})
        for tensor, value in found.items():
            max_abs[tensor] = float(np.fmax(max_abs.get(tensor, value), value))
    return Float32Run(max_abs, tuple(outputs))


def _largest(array: Array) -> float:
    values = np.abs(np.asarray(array, dtype=np.float64))
    return float(values.max()) if values.size else 0.0


def _cpu_session(model: bytes, source: Path, threads: int | None) -> Any:
    """A session on the CPU, from the one builder: float16's range is the function's, not a
    target's, so every target of the case shares these runs."""
    session, _ = create_session(model, PREDEFINED_TARGETS["cpu"], threads=threads or None,
                                external_data=source.resolve().parent)
    return session


# -- which tensors are float16 in the variant ---------------------------------------------------


def float16_tensors(float32: Path, variant: Path) -> dict[str, GraphNode | None]:
    """The float32 graph's tensors that are float16 in the variant, in the float32 graph's
    order, each with the node that makes it (None: a graph input the variant casts)."""
    import onnx

    from onnx_parity.explain.localize.graph import elem_types, read_graph  # only a float16 variant

    model32 = onnx.load(str(float32), load_external_data=False)
    model16 = onnx.load(str(variant), load_external_data=False)
    graph32, graph16 = read_graph(model32), read_graph(model16)
    types16 = elem_types(model16)
    found: dict[str, GraphNode | None] = {}
    for node in graph16.nodes:  # keep_io_types: each float input is cast to float16 first
        if (node.op_type == "Cast" and len(node.inputs) == 1 and node.inputs[0] in graph32.inputs
                and types16.get(node.outputs[0]) == _FLOAT16):
            found[node.inputs[0]] = None
    twins = {node.name: node for node in graph16.nodes if node.name}
    for node in graph32.nodes:
        twin = twins.get(node.name) if node.name else None
        if twin is not None and twin.op_type == node.op_type \
                and len(twin.outputs) == len(node.outputs):
            pairs = list(zip(node.outputs, twin.outputs, strict=True))
        else:  # no name to go by: the converter keeps tensor names
            pairs = [(tensor, tensor) for tensor in node.outputs]
        for tensor32, tensor16 in pairs:
            if tensor32 in graph32.dynamic and types16.get(tensor16) == _FLOAT16:
                found[tensor32] = node
    return found


# -- the check --------------------------------------------------------------------------------


@frozen
class RangeCheck:
    """The range check's record and note, and where a candidate broke the outputs, their
    sentences."""

    record: Float16Record
    note: str = ""
    proof: str = ""
    comparisons: tuple[OutputComparison, ...] = ()


@frozen
class VariantRun:
    """An fp16 variant beside its float32 model, on a case's feeds, for the range check."""

    case: Case
    float32: Path
    variant: Path
    feeds: SampleInputs
    names: Sequence[str]
    threads: int | None = None


def check_variant(run: VariantRun, ranges: Callable[[], Float32Run]) -> RangeCheck:
    """check_range on the float32 model's `ranges` (made once per model, dataset and batch by
    the caller), with its note; a check that cannot run says why and fails nothing."""
    try:
        checked = check_range(run, ranges())
    except Exception as exc:  # the check's own trouble: said in the note
        logger.debug("%s: the float16 range check failed", run.case.id, exc_info=True)
        return RangeCheck(Float16Record(), range_unchecked(f"{type(exc).__name__}: {exc}"))
    found = checked.record
    if found.failing is not None:
        return checked
    note = range_harmless(found) if found.leaving else range_holds()
    return dataclasses.replace(checked, note=note)


def check_range(pair: VariantRun, run: Float32Run) -> RangeCheck:
    """The variant's float16 tensors whose float32 values leave float16's range, and the first
    of them (in graph order) whose float16 storage moves the outputs beyond the tolerance."""
    case, float32, variant, feeds, names = (pair.case, pair.float32, pair.variant, pair.feeds,
                                            pair.names)
    threads = pair.threads

    leaving = []
    for tensor, node in float16_tensors(float32, variant).items():
        max_abs = run.max_abs.get(tensor, float("nan"))
        kind = leaves_float16(max_abs)
        if kind is not None:
            leaving.append(RangeRecord(
                tensor=tensor, kind=kind, max_abs=max_abs,
                node=node.label if node else None, op_type=node.op_type if node else None,
                module=node.module if node else None))
    record = Float16Record(range_checked=True, leaving=len(leaving),
                           ranges=tuple(leaving[:SHOWN]))
    if not leaving:
        return RangeCheck(record)
    judged: dict[int, tuple[OutputComparison, ...]] = {}

    def fails(count: int) -> bool:
        stored = _stored_in_float16(float32, [r.tensor for r in leaving[:count]])
        session = _cpu_session(stored, float32, threads)
        outputs = [session.run(list(names), dict(sample)) for sample in feeds]
        judged[count] = compare_case(names, run.outputs, outputs, case.tolerance_for)
        return verdict(judged[count]) == "failed"

    first = first_failing(len(leaving), fails)
    if first is None:
        return RangeCheck(record)
    comparisons = judged[first + 1]
    return RangeCheck(dataclasses.replace(record, failing=leaving[first]),
                      proof=outputs_sentence(comparisons), comparisons=comparisons)


def first_failing(count: int, fails: Callable[[int], bool]) -> int | None:
    """The index of the first of `count` candidates whose storage, with those before it, fails:
    bisection over prefixes (storing none fails nothing), so about log2(count) runs; None when
    storing all of them passes."""
    if not fails(count):
        return None
    low, high = 1, count  # the prefix of `high` candidates fails; that of `low - 1` does not
    while low < high:
        middle = (low + high) // 2
        if fails(middle):
            high = middle
        else:
            low = middle + 1
    return high - 1


def _stored_in_float16(float32: Path, tensors: Sequence[str]) -> bytes:
    """The float32 model with each of `tensors` stored in float16: a Cast to float16 and back
    right after the node that makes it (or, for a graph input, before its first use)."""
    import onnx
    from onnx import helper

    model = onnx.load(str(float32), load_external_data=False)
    chosen = set(tensors)

    def casts(source: str, target: str) -> list[Any]:
        middle = f"{target}::float16"
        return [helper.make_node("Cast", [source], [middle], to=_FLOAT16),
                helper.make_node("Cast", [middle], [target], to=_FLOAT)]

    inputs = {i.name for i in model.graph.input} & chosen
    nodes = [cast for name in sorted(inputs) for cast in casts(name, f"{name}::stored")]
    for original in model.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        for index, name in enumerate(node.input):
            if name in inputs:
                node.input[index] = f"{name}::stored"
        nodes.append(node)
        for index, name in enumerate(node.output):
            if name in chosen and name not in inputs:
                node.output[index] = f"{name}::float32"
                nodes.extend(casts(f"{name}::float32", name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return bytes(model.SerializeToString())


def float16_failures(record: CaseRecord, prepared: PreparedCase,
                     names: Sequence[str], expected: Sequence[Sequence[Any]],
                     actual: Sequence[Sequence[Any]]) -> tuple[str, ...]:
    """A float16 graph's checks, in the case's notes and details: how much of it ran in float16
    on the target; for an fp16 variant, float16's range on the float32 model's tensors; for a
    module run in float16, a reference that overflowed where ONNX Runtime did not. Returns
    what fails the case whatever the comparison says (compare/chain.py)."""
    case, model, threads = prepared.case, prepared.task.model, prepared.task.threads
    path, target, samples = prepared.path, prepared.target, prepared.samples
    cast_to = prepared.loaded.cast_to if prepared.loaded is not None else None
    if not samples or (case.precision != "fp16" and cast_to != "float16" and not any(
            i.dtype == "float16" for i in model.inputs or target.input_specs())):
        return ()
    found, note = prepared.on_file.value(Float16NodesKey(path, case.target.name), lambda: (
        ran_in_float16(target, path, case.target, samples[0].inputs, threads)))
    record.note(note)
    failures = []
    if case.precision == "fp16" and prepared.float32 is not None:
        float32, feeds, data = prepared.float32, prepared.feeds, prepared.data
        shared = prepared.on_data.made
        record.enter("compare")
        checked = shared.value(  # targets with the same tolerances share the whole check
            Float16RangeKey(float32, path, data, tuple(map(case.tolerance_for, names))),
            lambda: check_variant(VariantRun(case, float32, path, feeds, names, threads),
                                  lambda: shared.value(Float32RangesKey(float32, data),
                                                       lambda: float32_run(float32, feeds,
                                                                           names, threads))))
        if checked.note:
            record.note(checked.note)
        found = dataclasses.replace(checked.record, nodes=found.nodes,
                                    float16_nodes=found.float16_nodes)
        if found.failing is not None:
            failures.append(range_failure(found.failing, checked.proof))
    if cast_to == "float16":
        overflows = reference_overflows(names, expected, actual)
        failures += [reference_overflowed(o.name, o.kinds, o.count, o.elements, cast_to)
                     for o in overflows]
        found = dataclasses.replace(found, reference_overflow=tuple(o.name for o in overflows))
    record.found(float16=found)
    return tuple(failures)
