"""Where the drift starts: a case's intermediate tensors against a reference, in graph order.

One extra run per localized case: every intermediate tensor of the ONNX graph is marked as a
graph output and the target runs once more, on the sample where the worst output was worst.
The reference for those tensors depends on what differs:

- PyTorch against ONNX (an exporter bug, or a shipped file that no longer matches its source):
  the module's activations from one forward pass with forward hooks, matched to ONNX tensors
  through the scope each exporter leaves on its nodes (the dynamo exporter's
  `pkg.torch.onnx.name_scopes` metadata, the TorchScript exporter's `/encoder/layers.1/attn/MatMul`
  node names), and through shape and values where the graph carries no scopes at all.
- One ONNX Runtime target against another (CUDA against CPU): when the same graph on the CPU
  provider agrees with the case's reference, its tensors are the reference (a second run).

The verdict is the first compared tensor, in topological order, that is out of tolerance while
the compared tensors it is computed from are within it: the node that makes it, its op type and
the PyTorch module behind it. When that first difference is no bigger than the reference dtype's
own rounding, no node stands out (the error grows gradually) and the verdict says so instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.kinds import REFERENCE, runs_as_reference
from onnx_parity.compare.detections import aligned
from onnx_parity.explain.localize.graph import (
    Array,
    GraphInfo,
    GraphNode,
    MarkedModel,
    mark_intermediates,
    read_graph,
    run_marked,
    runtime_name,
    torchscript_module,
)
from onnx_parity.explain.localize.tensors import ROUNDING_ULPS, TensorCheck, check_tensor, excess
from onnx_parity.explain.localize.torchref import TorchReference, torch_reference
from onnx_parity.explain.localize.verdict import (
    PATH_LIMIT,
    Divergence,
    Verdict,
    find_origin,
    module_text,
    unlocalized,
)
from onnx_parity.frozen import frozen
from onnx_parity.results import OutputComparison, Tolerance

if TYPE_CHECKING:
    from onnx_parity.explain.evidence import Evidence
    from onnx_parity.spec import TargetSpec

__all__ = [
    "PATH_LIMIT",
    "REFERENCE_PROVIDER",
    "ROUNDING_ULPS",
    "Divergence",
    "GraphInfo",
    "GraphNode",
    "Localization",
    "MarkedModel",
    "TensorCheck",
    "TorchReference",
    "Verdict",
    "check_tensor",
    "excess",
    "find_origin",
    "localize_case",
    "mark_intermediates",
    "module_text",
    "read_graph",
    "run_marked",
    "torch_reference",
    "torchscript_module",
    "unlocalized",
    "worst_sample",
]


REFERENCE_PROVIDER = REFERENCE.providers[0]


@frozen
class Localization:
    """A localization's verdict and the tensors behind it (for the repro bundle)."""

    divergence: Divergence
    graph: GraphInfo | None = None
    actual: Mapping[str, Array] = field(default_factory=dict)
    reference: Mapping[str, Array] = field(default_factory=dict)


def worst_sample(comparisons: Sequence[OutputComparison]) -> int:
    """The sample holding the worst element of the worst failing output (0 if none says)."""
    failing = [c for c in comparisons if not c.passed] or list(comparisons)
    if not failing:
        return 0

    def severity(c: OutputComparison) -> tuple[int, float]:
        return (1, 0.0) if c.required_atol is None else (0, c.max_abs)

    worst = max(failing, key=severity)
    return worst.worst_index[0] if worst.worst_index else 0


def localize_case(evidence: Evidence, sample: int, module: Any | None = None, *,
                  case_failed: bool, threads: int = 0) -> Localization:
    """Where the case's drift starts, on one of its samples: against the case's reference
    outputs for it (PyTorch or recorded), and PyTorch's activations where `module`, the
    PyTorch module, is given."""
    case, names, feeds = evidence.case, evidence.names, evidence.inputs[sample]
    expected: Sequence[Array] = evidence.expected[sample]
    marked = mark_intermediates(evidence.model_path)
    graph = marked.graph
    actual, ran = run_marked(marked, case.target, feeds, threads)
    actual = {**feeds, **actual}  # the graph inputs too: the bundle's subgraph may start there
    output_names = dict(zip(graph.outputs, names, strict=False))

    def tolerance_for(tensor: str) -> Tolerance:
        return case.tolerance_for(output_names.get(tensor))

    if case.model.detections is not None and len(expected) == len(graph.outputs):
        # Detections compared as sets: the reference in the actual's order, or a set listed
        # in another order would read as drift at the node that ordered it.
        expected = aligned(names, case.model.detections, expected,
                           [actual[t] for t in graph.outputs])
    recorded = dict(zip(graph.outputs, expected, strict=False))
    if case.model.reference is not None:  # ONNX against ONNX: the reference target's tensors
        return _against_target(case.model.reference, case.target, marked, feeds, actual,
                               tolerance_for, sample, case_failed, threads)
    sets = case.model.detections is not None  # a selection's advice then leaves sets out
    on_reference = runs_as_reference(ran)
    if not on_reference:
        values, _ = run_marked(marked, REFERENCE, feeds, threads)
        agrees = all(excess(recorded[o], values[o], tolerance_for(o)) <= 1 for o in recorded)
        if agrees:
            divergence = find_origin(graph, actual, values, tolerance_for, sample=sample,
                                     reference_name="the CPU provider", case_failed=case_failed,
                                     sets=sets)
            return Localization(divergence, graph, actual, values)
    scripted = module is not None and _scripted(module)
    if module is not None and not scripted:
        # An eager module holding TorchScript submodules is hooked around them (torchref.py).
        found = torch_reference(module, feeds, graph, actual, case.tolerance_for(),
                                case.model.forward_args, evidence.binding)
        reference = {**found.values, **recorded}
        divergence = find_origin(graph, actual, reference, tolerance_for, sample=sample,
                                 reference_name="PyTorch", case_failed=case_failed,
                                 matched=found, sets=sets)
        return Localization(divergence, graph, actual, reference)
    where = ("target runs on the CPU provider, the reference target itself" if on_reference
             else "graph disagrees with the recorded outputs on the CPU provider too")
    if scripted:
        where = where.replace("recorded outputs", "module's outputs")
        # A ScriptModule's calls are compiled: it takes no forward hooks, so PyTorch can give
        # its outputs and nothing in between.
        unreferenced = _unreferenced(
            f"the {where}, and the module is TorchScript (a torch.jit.ScriptModule), which"
            " takes no forward hooks: PyTorch gives only its outputs, so the outputs are"
            " compared and nothing inside them; to localize, give the model's torch: the"
            " eager module's factory (the nn.Module before torch.jit.script, or the source a"
            " .jit file was saved from)",
            "the module (the file or the module changed since the export?)",
            "a TorchScript module gives only its outputs", "PyTorch", case_failed, sample)
    else:
        unreferenced = _unreferenced(
            f"the {where}, and recorded data holds only the graph's outputs",
            "the recording (the model or the data changed since it was recorded)",
            "for a graph checked against recorded outputs", "recorded outputs", case_failed,
            sample)
    return Localization(unreferenced, graph, actual, recorded)


def _against_target(reference: TargetSpec, own: TargetSpec, marked: MarkedModel,
                    feeds: Mapping[str, Array], actual: Mapping[str, Array],
                    tolerance_for: Callable[[str], Tolerance], sample: int,
                    case_failed: bool, threads: int) -> Localization:
    """The first node whose output differs between the case's target and the reference
    target, both runtimes named: the runtime upgrade's `which node?`."""
    values, _ = run_marked(marked, reference, feeds, threads)
    values = {**feeds, **values}
    named = (f"target '{reference.name}' ({runtime_name(reference)}; this target: "
             f"{runtime_name(own)})")
    divergence = find_origin(marked.graph, actual, values, tolerance_for, sample=sample,
                             reference_name=named, case_failed=case_failed)
    return Localization(divergence, marked.graph, actual, values)


def _unreferenced(why: str, between: str, short: str, reference: str, case_failed: bool,
                  sample: int) -> Divergence:
    """No intermediate reference to compare with: the verdict says why, and, for a failed
    case, that the drift lies between this graph and what it was checked against."""
    summary = f"no intermediate reference: {why}"
    if case_failed:
        summary += f"; the drift lies between this graph and {between}"
    headline = (f"no intermediate reference {short}" if short.startswith("for ")
                else f"no intermediate reference: {short}")
    return Divergence("no-reference", summary,
                      f"drift not localized: {headline}" if case_failed else headline,
                      reference=reference, sample=sample)


def _scripted(module: Any) -> bool:
    """Whether `module` is TorchScript, which forward hooks cannot look into."""
    import torch

    return isinstance(module, torch.jit.ScriptModule)
