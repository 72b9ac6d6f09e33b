"""Every sentence about an output: compare/ decides and records figures and a kind
(results.OutputComparison); everything said about an output is worded here from them, once: the
case message and so the console line and the annotation, the summary cell, the JUnit text, the
drift's path; and what a float16 case ran in float16 and where float16's range broke.
Numbers read as wording.py formats them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from onnx_parity.escape import one_line
from onnx_parity.findings import Float16Record, RangeRecord
from onnx_parity.results import Matching, OutputComparison, OutputKind
from onnx_parity.wording import (
    against,
    fmt_index,
    fmt_measured,
    fmt_metric,
    fmt_needed,
    fmt_pair,
    fmt_setting,
    fmt_shape,
    fmt_share,
    fmt_value,
    metric_words,
    tolerance_text,
)


def output_sentence(o: OutputComparison) -> str:
    """The one sentence on one output: "logits: 13 of 80 elements (16.25%) out of tolerance;
    max abs 3.0e-2; worst at [0, 1, 3]: expected 0.1646, got 0.1946; atol 1e-5 + rtol
    1e-3·|e|; needs atol ≥ 3.0e-2"."""
    said = _SAYS[o.verdict_kind](o)
    if o.matching is not None and o.verdict_kind != "unmatched":
        said = f"{said}; {_matched(o.matching)}"
    return f"{one_line(o.name)}: {said}"


def outputs_sentence(outputs: Sequence[OutputComparison]) -> str:
    """A case's message: its failing outputs' sentences, or a short all-clear."""
    failing = [output_sentence(o) for o in outputs if not o.passed]
    if failing:
        return "; ".join(failing)
    if not outputs:
        return "no outputs to compare"
    return f"all {len(outputs)} output{'s' if len(outputs) != 1 else ''} within tolerance"


def picked_sentence(outputs: Sequence[OutputComparison], op: str) -> str:
    """A case's message when localization found that `op` picked different elements among tied
    scores: the failing outputs' sentences without the atol they would need, since no atol
    fixes a selection ("…; atol 1e-4 + rtol 1e-3·|e|; picked differently among tied scores by
    TopK '/topk', which no atol fixes")."""
    instead = f"picked differently among tied scores by {op}, which no atol fixes"
    parts = []
    for o in outputs:
        if o.passed:
            continue
        said, needs = output_sentence(o), _needs(o)
        parts.append(said.replace(f"; {needs}", f"; {instead}", 1) if needs in said
                     else f"{said}; {instead}")
    return "; ".join(parts) or outputs_sentence(outputs)


def output_facts(o: OutputComparison) -> list[str]:
    """Every figure on one output, one a line, then its sentence: the long form (JUnit)."""
    lines = [
        f"output {one_line(o.name)}: {'passed' if o.passed else 'FAILED'} ({tolerance_text(o)})",
        f"  max abs {fmt_measured(o.max_abs)}, max rel {fmt_measured(o.max_rel)},"
        f" mean abs {fmt_measured(o.mean_abs)}",
        f"  mismatches {o.mismatches} of {o.elements} ({fmt_share(o.mismatches, o.elements)})",
    ]
    if o.metrics:
        gated = "; ".join(o.criteria)
        lines.append("  " + _metric_list(o, o.metrics) + (f" (gated by {gated})" if gated else ""))
    if o.worst_index is not None:
        lines.append(f"  worst element{_at(o)}{_values(o)}")
    lines.append(f"  {output_sentence(o)}")
    return lines


def error_phrase(o: OutputComparison) -> str:
    """How far off one compared tensor is, to follow "off by": "max abs 1.6e0 (atol 1e-4 +
    rtol 1e-3·|e|)", "shape (2,), expected (3,)", "NaN/Inf in 2 of 8 elements (...)"."""
    if o.expected_shape != o.actual_shape:
        return f"shape {fmt_shape(o.actual_shape)}, expected {fmt_shape(o.expected_shape)}"
    if o.required_atol is None:
        worst = ""
        if o.worst_expected is not None and o.worst_actual is not None:
            worst = " (expected {}, got {})".format(*fmt_pair(o.worst_expected, o.worst_actual))
        return f"NaN/Inf in {o.mismatches} of {o.elements} elements{worst}"
    return f"max abs {fmt_measured(o.max_abs)} ({tolerance_text(o)})"


def error_brief(o: OutputComparison) -> str:
    """The shortest word on how far off a tensor is: "max abs 1.6e0", "NaN/Inf"."""
    if o.expected_shape != o.actual_shape:
        return "a different shape"
    return f"max abs {fmt_measured(o.max_abs)}" if o.required_atol is not None else "NaN/Inf"


def parting_words(what: str, expected: Any, actual: Any) -> tuple[str, str]:
    """What two structures hold where they part (compare/structured.py), as "expected …, got
    …" quotes them: `what` is "node" (a map, a sequence, a tensor, None), "keys", "length" or
    "shape"."""
    if what == "keys":
        return "the keys " + ", ".join(map(repr, expected)), ", ".join(map(repr, actual))
    if what == "length":
        return f"{expected} elements", str(actual)
    if what == "shape":
        return f"shape {fmt_shape(expected)}", fmt_shape(actual)
    return _NODES[expected], _NODES[actual]


_NODES = {"map": "a map", "sequence": "a sequence", "tensor": "a tensor", "None": "nothing (None)"}


def _count(o: OutputComparison) -> str:
    return f"{o.mismatches} of {o.elements} elements ({fmt_share(o.mismatches, o.elements)})"


def _at(o: OutputComparison) -> str:
    """Where the worst element sits: " at [0, 4]", or " at sample 1 [0, 4]" over samples."""
    if o.worst_index is None:
        return ""
    sample, rest = o.worst_index[0], tuple(o.worst_index[1:])
    position = fmt_index(rest) if rest else ""
    if o.samples > 1 or sample > 0:
        return f" at sample {sample}" + (f" {position}" if position else "")
    return f" at {position}" if position else ""


def _worst(word: str, o: OutputComparison) -> list[str]:
    """"worst at [0, 4]: expected 1, got 1.5", where a worst element was recorded."""
    return [f"{word}{_at(o)}{_values(o)}"] if o.worst_index is not None else []


def _values(o: OutputComparison) -> str:
    if o.quoted is not None:
        expected, actual = o.quoted
    elif o.worst_expected is not None or o.worst_actual is not None:
        expected, actual = fmt_pair(o.worst_expected, o.worst_actual)
    else:
        return ""
    return f": expected {expected}, got {actual}"


def _needs(o: OutputComparison) -> str:
    if o.required_atol is None:
        return "no atol can pass (NaN/Inf placement differs)"
    if math.isinf(o.required_atol):
        return "no finite atol can pass"
    return f"needs atol ≥ {fmt_needed(o.required_atol)}"


def _metric_list(o: OutputComparison, names: Iterable[str]) -> str:
    return ", ".join(f"{metric_words(n)} {fmt_metric(n, o.metrics[n])}" for n in names
                     if n in o.metrics)


def _gated(o: OutputComparison, failing_only: bool) -> str:
    """The metric criteria with their values: "cosine 0.9812 < 0.99; SQNR 31.2 dB ≥ 20 dB",
    then in brackets the metrics that did not gate (or, failing_only, were not shown)."""
    if not o.thresholds:  # recorded before thresholds were: the values and the criteria
        return _metric_list(o, o.metrics) + (f" ({'; '.join(o.criteria)})" if o.criteria else "")
    shown = [n for n in o.thresholds if n in o.failed or not (failing_only and o.failed)]
    text = "; ".join(
        f"{metric_words(n)} {fmt_metric(n, o.metrics.get(n, math.nan))}"
        f" {against(n, o.thresholds[n], n in o.failed)}" for n in shown)
    rest = _metric_list(o, [n for n, v in o.metrics.items()
                            if n not in shown and not math.isnan(v)])
    return text + (f" ({rest})" if rest else "")


def _leaf(o: OutputComparison) -> str:
    """Sequence / map outputs: the worst element by its path."""
    if not o.where or o.worst_index is None:
        return ""
    sample = f" of sample {o.worst_index[0]}" if o.samples > 1 else ""
    return f"; worst element at {o.name}{o.where}{sample}"


def _in_sample(o: OutputComparison) -> str:
    return f" in sample {o.sample}" if o.sample is not None else ""


def _passed(o: OutputComparison) -> str:
    parts = [] if o.metric_only else [_within(o)]
    if o.thresholds or o.metric_only:
        parts.append(_gated(o, failing_only=False))
    return "; ".join(parts)


def _within(o: OutputComparison) -> str:
    if o.elements == 0:
        return "empty output, nothing to compare"
    if o.expected_dtype in ("bool", "string"):
        return f"all {o.elements} elements equal"
    if o.finite == 0:
        return f"all {o.elements} elements NaN/Inf in the same places"
    return f"max abs {fmt_measured(o.max_abs)} within {tolerance_text(o)}"


def _elements(o: OutputComparison) -> str:
    parts = [f"{_count(o)} out of tolerance", f"max abs {fmt_measured(o.max_abs)}",
             *_worst("worst", o), tolerance_text(o), _needs(o)]
    if o.failed:
        parts.append(_gated(o, failing_only=True))
    return "; ".join(parts) + _leaf(o)


def _exact(o: OutputComparison) -> str:
    noun = "booleans" if o.expected_dtype == "bool" else "strings"
    return "; ".join([f"{_count(o)} differ", *_worst("first", o),
                      f"{noun} must match exactly"]) + _leaf(o)


def _nonfinite(o: OutputComparison) -> str:
    placement = o.placement or o.mismatches
    finite = o.finite if o.finite is not None else o.elements - placement
    parts = [f"{_count(o)} out of tolerance",
             f"NaN/Inf placement differs in {placement} element{'s' * (placement != 1)}"
             + "".join(f", {first}" for first in _worst("first", o))]
    if finite:
        parts.append(f"max abs {fmt_measured(o.max_abs)} over finite elements")
    parts += [tolerance_text(o), _needs(o)]
    return "; ".join(parts) + _leaf(o)


def _powerless(o: OutputComparison) -> str:
    def largest(label: str, x: float | None) -> str:
        return f" ({label}{fmt_measured(x)})" if x is not None else ""

    # A scale-free metric is the fix that holds at any scale; atol: 0 is not offered, since
    # float rounding at 1e-14 can fail an export that is right.
    cosine = o.metrics.get("cosine")
    measured = (f" (cosine is {fmt_metric('cosine', cosine)} here)"
                if cosine is not None and not math.isnan(cosine) else "")
    return (f"no power: every element of the reference{largest('largest |e| ', o.scale)} and of"
            f" the output{largest('largest ', o.actual_scale)} lies within atol"
            f" {fmt_setting(o.atol)} of zero, so any output of that size would pass; judge it by"
            f" a scale-free metric, tolerance: {{cosine: 0.9999}}{measured}, or give the model"
            " weights that give outputs of a real scale")


def _blind(o: OutputComparison) -> str:
    if o.kind == "empty":
        return (f"no box in any of the {o.samples} samples, on either side: no box, score or "
                "label was compared; feed inputs the detector finds objects in (recorded images)")
    seen = ("is all zero for every sample" if o.kind == "zero"
            else f"is the same for all {o.samples} samples, whose inputs differ")
    return (f"the reference output {seen}: nothing before it is checked (a zero-initialised"
            " layer hides the whole model before it); give the model weights, or list the"
            " output under `constant_outputs` if it is constant by design")


def _shape(o: OutputComparison) -> str:
    return (f"shape differs{_in_sample(o)}: expected {fmt_shape(o.expected_shape)},"
            f" got {fmt_shape(o.actual_shape)}")


def _mixed(o: OutputComparison) -> str:
    first, other = o.quoted or (o.expected_dtype, "?")
    return (f"the reference's dtype changes between samples: {first} in sample 0, {other}"
            f"{_in_sample(o)}")


def _structure(o: OutputComparison) -> str:
    expected, actual = o.quoted or ("?", "?")
    return (f"structure differs{_in_sample(o)}: at {o.where or 'the top'}: expected {expected},"
            f" got {actual}")


def _matched(m: Matching) -> str:
    """"compared as a set: 12 boxes matched by label and IoU ≥ 0.9 (positions as in …)"."""
    whose = f"{m.reference}'" + ("" if m.reference.endswith("s") else "s")
    return (f"compared as a set: {m.matched} box{'es' * (m.matched != 1)} matched by label and "
            f"IoU ≥ {m.iou:g} (positions as in {whose} output)")


def _unmatched(o: OutputComparison) -> str:
    """"2 boxes only in ONNX Runtime, best score 0.41; compared as a set: …", and more."""
    m = o.matching or Matching(iou=0.0, matched=0)
    parts = []
    for count, best, side in ((m.only_actual, m.best_actual, "ONNX Runtime"),
                              (m.only_expected, m.best_expected, m.reference)):
        if count:
            score = f", best score {fmt_value(best, 2)}" if best is not None else ""
            parts.append(f"{count} box{'es' * (count != 1)} only in {side}{score}")
    parts.append(_matched(m))
    if o.mismatches:
        parts.append(f"matched boxes: {_elements(o)}")
    return "; ".join(parts)


_SAYS: dict[OutputKind, Callable[[OutputComparison], str]] = {
    "passed": _passed, "elements": _elements, "exact": _exact, "nonfinite": _nonfinite,
    "metric": lambda o: _gated(o, failing_only=True) + _leaf(o),
    "powerless": _powerless, "zero": _blind, "constant": _blind, "empty": _blind, "shape": _shape,
    "mixed": _mixed, "structure": _structure, "unmatched": _unmatched,
    "dtype": lambda o: (f"dtype differs{_in_sample(o)}: expected {o.expected_dtype},"
                        f" got {o.actual_dtype}"),
    "unsupported": lambda o: f"cannot compare {o.expected_dtype} outputs",
}


# -- float16 (run/float16.py) ----------------------------------------------------------------

FLOAT16_LARGEST = "65504"


def float16_ran(target: str, record: Float16Record, cpu_only: bool) -> str:
    """How much of a float16 graph really ran in float16 on its target: "float16 on cpu: 3 of
    41 compute nodes ran in float16; ONNX Runtime's CPU provider ran the other 38 in float32
    (it inserts casts), so float16 overflow and rounding cannot show in them on this target".
    `cpu_only`: every node that did not run in float16 ran on the CPU provider."""
    if record.nodes is None or record.float16_nodes is None:
        return (f"float16 on {target}: which nodes ran in float16 is not known (ONNX Runtime's "
                "profile said nothing)")
    ran, total = record.float16_nodes, record.nodes
    text = f"float16 on {target}: {ran} of {total} compute nodes ran in float16"
    rest = total - ran
    if not rest:
        return text
    others = "them" if ran == 0 else f"the other {rest}"
    if not cpu_only:
        return f"{text}; {others} ran in float32"
    where = "on this target" if ran == 0 else "in them on this target"
    return (f"{text}; ONNX Runtime's CPU provider ran {others} in float32 (it inserts casts), "
            f"so float16 overflow and rounding cannot show {where}")


def range_place(found: RangeRecord) -> str:
    """"'/block/norm/Pow' in module block.norm", "input 'x'"."""
    if found.node is None:
        return f"input '{one_line(found.tensor)}'"
    if found.module is None:
        return f"'{one_line(found.node)}'"
    where = "the top-level module" if found.module == "" else f"module {one_line(found.module)}"
    return f"'{one_line(found.node)}' in {where}"


def range_figure(found: RangeRecord, where: str = "") -> str:
    """"'/block/norm/Pow' in module block.norm reaches 3.4e5 > 65504", or "... is at most
    1.2e-8, all of which flushes to 0 in float16"; `where` follows the figure."""
    if found.kind == "overflow":
        return (f"{range_place(found)} reaches {fmt_measured(found.max_abs)} > "
                f"{FLOAT16_LARGEST}{where}")
    return (f"{range_place(found)} is at most {fmt_measured(found.max_abs)}{where}, all of "
            "which flushes to 0 in float16")


def range_failure(found: RangeRecord, proof: str) -> str:
    """The case's message when float16's range breaks it: the finding, then what storing that
    tensor in float16 does to the float32 model's outputs (`proof`, their sentences): "float16
    overflow: '/block/norm/Pow' in module block.norm reaches 3.4e5 > 65504 in the float32 model
    on these samples; stored in float16, it moves the outputs beyond the tolerance (...)"."""
    where = " in the float32 model on these samples"
    return (f"float16 {found.kind}: {range_figure(found, where)}; stored in float16, it moves "
            f"the outputs beyond the tolerance ({proof})")


def compared_on(target: str, compared: str) -> str:
    """What the comparison said, after a float16 failure: "compared on cpu: all 1 output within
    tolerance"."""
    return f"compared on {target}: {compared}"


def range_harmless(record: Float16Record) -> str:
    """A note: tensors leave float16's range, and storing them in float16 changes nothing that
    the tolerance sees (an attention mask of -3.4e38 that becomes -inf, say)."""
    first = record.ranges[0] if record.ranges else None
    named = f" (the first: {range_figure(first)})" if first is not None else ""
    many = record.leaving != 1
    return (f"float16's range: {record.leaving} tensor{'s' * many} of the float16 graph "
            f"leave{'s' * (not many)} it in the float32 model on these samples{named}; stored "
            f"in float16, {'they keep' if many else 'it keeps'} the outputs within the tolerance")


def range_holds() -> str:
    return ("float16's range holds: no tensor of the float16 graph leaves it in the float32 "
            "model on these samples")


def range_unchecked(reason: str) -> str:
    return f"float16's range could not be checked: {reason}"


def reference_overflowed(name: str, kinds: str, count: int, elements: int,
                         dtype: str) -> str:
    """The PyTorch reference, run in float16, overflowed where ONNX Runtime did not."""
    return (f"the PyTorch reference overflowed: its output '{one_line(name)}' holds {kinds} in "
            f"{count} of {elements} elements where ONNX Runtime's is finite; PyTorch ran the "
            f"module in {dtype} (the dtype of its inputs), and {dtype} arithmetic overflowed in "
            "PyTorch, not in the export")

