"""Whether a shipped ONNX file still holds its module's weights: the graph's initializers against
the module's parameters and buffers, named where they differ, and proven the house's way, by a
second run with the module's values swapped into a copy of the file.

Matching: by name first (both exporters keep `encoder.0.weight`). An initializer the exporter
renamed (`onnx::MatMul_123`, `val_0`) or a file built by hand is matched by shape and values, a
2-D weight transposed too: to the one parameter left of its shape when there is one, else to the
parameter whose values are closest, when they are within CLOSE of each other. Then, for a file
whose renamed weights are all stale (another seed's), by position: where the tensors left of one
shape in the file are as many as the parameters left of that shape in the module, they are
paired in the order the exporter wrote them and the module holds them, a Linear's weight
transposed (a MatMul takes it [in, out]); only the second run can prove such a pairing, and a
wrong one never recovers the outputs. A square weight is compared in the orientation it is
stored in: as it is under its own name (the exporters store a named parameter as it is), else
transposed for a Linear's weight, else the closer way round. A convolution or a linear layer
followed by a batch norm is also expected in its folded form (the exporters fold the norm into
it in eval mode, keeping its name or not) when the file holds no running_var of that norm; the
closer form is the one compared. A floating initializer of more than one element that matches
nothing is counted as unmatched: while any is, or any tensor differs, stale weights are never
ruled out.

`rel.` is ‖onnx − module‖ / ‖module‖ over the whole tensor; a tensor differs above REL_DIFFERS.

Cost, only for failed float32 cases of models with both `onnx` and `torch`: the file is read once
with its weights (the weights are then in memory twice), each matched pair compared once, and only
when some differ, one copy of the file with the module's values in their place is written to a
temporary folder and the case's samples run once through it, in a session built as the case's own
was (backends/target.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.backends.kinds import make_target
from onnx_parity.errors import StageError
from onnx_parity.explain import causes
from onnx_parity.findings import CauseRecord
from onnx_parity.frozen import frozen
from onnx_parity.wording import fmt_measured

if TYPE_CHECKING:
    from onnx_parity.explain.evidence import Evidence

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

KIND = "stale-weights"
SETTING = "the module's weights"
REL_DIFFERS = 1e-6  # below: the same weights (a re-export writes them bit for bit)
CLOSE = 0.1  # a renamed initializer is matched by values only this close to its parameter
AMBIGUOUS = 16  # same-shaped tensors beyond this are not compared pairwise by value
SHOWN = 3  # tensors named in a message
_FLOATS = {1, 10, 11, 16}  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_EXTERNAL_BYTES = 1 << 30  # a copy above this keeps its weights in a side file


@frozen
class Expected:
    """What one initializer should hold: a parameter or buffer of the module, or that weight with
    the batch norm after it folded in (`folded` names the norm)."""

    parameter: str
    values: Array  # float64
    folded: str = ""
    linear: bool = False  # an nn.Linear's weight, [out, in]: a MatMul stores it transposed


@frozen
class Pair:
    """An initializer matched to what the module says it should hold, and how far apart."""

    initializer: str
    expected: Expected
    rel: float
    transposed: bool = False

    @property
    def differs(self) -> bool:
        return not self.rel <= REL_DIFFERS  # NaN differs too

    def text(self) -> str:
        """"encoder.0.weight (rel. 1.1e0)", "weight (ONNX 'w', rel. 5.0e-2)"."""
        renamed = self.initializer != self.expected.parameter
        notes = [f"ONNX '{self.initializer}'"] if renamed else []
        if self.expected.folded:
            notes.append(f"folded with {self.expected.folded}")
        notes.append(f"rel. {fmt_measured(self.rel)}")
        return f"{self.expected.parameter} ({', '.join(notes)})"


@frozen
class WeightCheck:
    pairs: tuple[Pair, ...]
    initializers: int  # floating initializers in the file
    unmatched: tuple[str, ...] = ()  # those of more than one element that match nothing

    @property
    def differ(self) -> tuple[Pair, ...]:
        return tuple(sorted((p for p in self.pairs if p.differs), key=lambda p: -p.rel))

    def tally(self) -> str:
        """"2 of the 17 tensors compared differ, 15 match; 3 could not be matched"."""
        differ = len(self.differ)
        said = (f"{differ} of the {len(self.pairs)} tensors compared differ, "
                f"{len(self.pairs) - differ} match")
        if self.unmatched:
            said += (f"; {len(self.unmatched)} could not be matched by name, shape or values"
                     f" ({_names(self.unmatched)})")
        return said

    def listing(self) -> str:
        differ = self.differ
        shown = ", ".join(p.text() for p in differ[:SHOWN])
        return shown + (f" and {len(differ) - SHOWN} more" if len(differ) > SHOWN else "")


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def expected_values(module: Any) -> dict[str, list[Expected]]:
    """Per parameter or buffer name (those left out of the state dict too, such as rotary
    frequencies), what an initializer made from it may hold."""
    import torch

    tensors = dict(module.state_dict())
    for name, buffer in module.named_buffers():
        tensors.setdefault(name, buffer)
    state = {name: _numpy(t) for name, t in tensors.items()
             if getattr(t, "is_floating_point", lambda: False)()}
    linear = {f"{name}.weight" for name, m in module.named_modules()
              if isinstance(m, torch.nn.Linear)}
    found = {name: [Expected(name, values, linear=name in linear)]
             for name, values in state.items()}
    for (name, _), (norm, layer) in itertools.pairwise(module.named_modules()):
        folded = _fold(state, name, norm, float(getattr(layer, "eps", 1e-5)))
        for key, values in folded.items():
            found.setdefault(key, []).append(Expected(key, values, norm))
    return found


def _numpy(tensor: Any) -> Array:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return np.asarray(tensor.numpy(), dtype=np.float64)


def _fold(state: Mapping[str, Array], layer: str, norm: str, eps: float) -> dict[str, Array]:
    """`layer`'s weight and bias with the batch norm `norm` after it folded in, as the
    exporters fold them: w·γ/√(σ²+ε) per output channel, (b − μ)·γ/√(σ²+ε) + β."""
    prefix = f"{layer}." if layer else ""
    weight = state.get(f"{prefix}weight")
    parts = [state.get(f"{norm}.{k}") for k in ("weight", "bias", "running_mean", "running_var")]
    if weight is None or weight.ndim < 2 or any(p is None for p in parts):
        return {}
    gamma, beta, mean, var = (p for p in parts if p is not None)
    if var.shape != (weight.shape[0],):
        return {}
    scale = gamma / np.sqrt(var + eps)
    bias = state.get(f"{prefix}bias", np.zeros_like(mean))
    return {f"{prefix}weight": weight * scale.reshape(-1, *[1] * (weight.ndim - 1)),
            f"{prefix}bias": (bias - mean) * scale + beta}


def initializer_values(model: Any) -> dict[str, Array]:
    """The file's floating initializers, in float64."""
    from onnx import numpy_helper

    return {init.name: np.asarray(numpy_helper.to_array(init)).astype(np.float64)
            for init in model.graph.initializer if init.data_type in _FLOATS}


def compare_weights(initializers: Mapping[str, Array],
                    expected: Mapping[str, Sequence[Expected]]) -> WeightCheck:
    """Each initializer matched to what the module says it should hold (module docstring)."""
    # A norm that is in the file was not folded: its layer is expected as it is.
    kept = {name: [e for e in options if not e.folded
                   or f"{e.folded}.running_var" not in initializers]
            for name, options in expected.items()}
    pairs: dict[str, Pair] = {}
    for name, values in initializers.items():
        options = [e for e in kept.get(name, []) if e.values.shape == values.shape]
        if options:
            pairs[name] = min((_pair(name, values, e) for e in options), key=lambda p: p.rel)
    for how in (_by_shape, _by_order):
        taken = {p.expected.parameter for p in pairs.values()}
        left = {n: v for n, v in initializers.items() if n not in pairs and v.size > 1}
        free = [e for name, options in kept.items() if name not in taken for e in options]
        pairs.update(how(left, free))
    unmatched = tuple(n for n, v in initializers.items() if n not in pairs and v.size > 1)
    return WeightCheck(tuple(pairs.values()), len(initializers), unmatched)


def _by_order(left: Mapping[str, Array], free: Sequence[Expected]) -> dict[str, Pair]:
    """Renamed initializers that neither shape nor values told apart (a whole file of stale
    weights): where the file has as many left of a shape as the module, paired in order, a
    Linear's weight expected transposed."""
    def stored(e: Expected) -> tuple[int, ...]:
        shape = e.values.shape
        return tuple(shape[::-1]) if e.linear and len(shape) == 2 else tuple(shape)

    wanted: dict[tuple[int, ...], list[Expected]] = {}
    for e in free:
        if not e.folded:
            wanted.setdefault(stored(e), []).append(e)
    held: dict[tuple[int, ...], list[str]] = {}
    for name, values in left.items():
        held.setdefault(tuple(values.shape), []).append(name)
    found: dict[str, Pair] = {}
    for shape, names in held.items():
        options = wanted.get(shape, [])
        if len(options) != len(names):
            continue
        for name, e in zip(names, options, strict=True):
            found[name] = _pair(name, left[name], e, turned=e.linear and len(shape) == 2)
    return found


def _by_shape(left: Mapping[str, Array], free: Sequence[Expected]) -> dict[str, Pair]:
    """Renamed initializers: the one parameter of their shape, else the closest, when close."""
    def fits(values: Array, e: Expected) -> bool:
        shape = e.values.shape
        return shape == values.shape or (values.ndim == 2 and shape == values.shape[::-1])

    candidates = {name: [e for e in free if fits(values, e)] for name, values in left.items()}
    users: dict[str, set[str]] = {}
    for name, options in candidates.items():
        for e in options:
            users.setdefault(e.parameter, set()).add(name)
    found: dict[str, Pair] = {}
    for name, options in candidates.items():
        parameters = {e.parameter for e in options}
        if not parameters or len(parameters) > AMBIGUOUS:
            continue
        best = min((_pair(name, left[name], e) for e in options), key=lambda p: p.rel)
        alone = len(parameters) == 1 and users[best.expected.parameter] == {name}
        if alone or (best.rel <= CLOSE and _closest(best, left, candidates, users)):
            found[name] = best
    return found


def _closest(pair: Pair, left: Mapping[str, Array], candidates: Mapping[str, list[Expected]],
             users: Mapping[str, set[str]]) -> bool:
    """Whether no other initializer of the parameter's shape is closer to it."""
    rivals = users[pair.expected.parameter] - {pair.initializer}
    if len(rivals) > AMBIGUOUS:
        return False
    return all(_pair(r, left[r], pair.expected).rel >= pair.rel for r in rivals
               if any(e is pair.expected for e in candidates[r]))


def _pair(name: str, values: Array, expected: Expected,
          turned: bool | None = None) -> Pair:
    """The initializer against the tensor it should hold; a square weight in the orientation
    it is stored in (`turned`, else known from its name and layer, else the closer)."""
    want = expected.values
    transposed = values.shape != want.shape
    if values.ndim == 2 and values.shape[0] == values.shape[1]:  # square: which way round?
        if turned is None and name == expected.parameter:
            turned = False  # the exporters store a named parameter as it is
        if turned is None and expected.linear:
            turned = True  # a renamed Linear weight: a MatMul's [in, out]
        if turned is None:
            straight, other = _rel(values, want), _rel(values.T, want)
            return Pair(name, expected, min(straight, other), other < straight)
        return Pair(name, expected, _rel(values.T if turned else values, want), turned)
    return Pair(name, expected, _rel(values.T if transposed else values, want), transposed)


def _rel(values: Array, want: Array) -> float:
    scale = float(np.linalg.norm(want))
    gap = float(np.linalg.norm(values - want))
    return gap / scale if scale else (0.0 if gap == 0 else float("inf"))


def swap_in(model: Any, check: WeightCheck) -> None:
    """The module's values in place of the differing initializers, in each one's own dtype."""
    from onnx import numpy_helper

    differ = {p.initializer: p for p in check.differ}
    for init in model.graph.initializer:
        pair = differ.get(init.name)
        if pair is None:
            continue
        dtype = numpy_helper.to_array(init).dtype
        values = pair.expected.values.T if pair.transposed else pair.expected.values
        init.CopyFrom(numpy_helper.from_array(np.asarray(values).astype(dtype), init.name))


def stale_weights(evidence: Evidence, module: Any, threads: int = 0) -> CauseRecord | None:
    """The shipped file's weights against the module's, proven by a second run with the
    module's in their place: the case's `cause` when it passes or its required atol falls
    tenfold, else ruled out. None where it does not apply (no shipped file, a variant). Never
    raises: a check that fails says why in its record."""
    case = evidence.case
    if case.model.onnx is None or case.precision != "fp32":
        return None
    try:
        return _stale_weights(evidence, module, threads)
    except Exception as exc:  # a cause is a courtesy; it must not cost the case its verdict
        logger.debug("stale weights: %s", traceback.format_exc())
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CauseRecord(KIND, proven=False, setting=SETTING,
                           message=f"stale weights not checked: {type(exc).__name__}: {first}")


def _stale_weights(evidence: Evidence, module: Any, threads: int) -> CauseRecord:
    import onnx

    model = onnx.load(str(evidence.model_path))
    check = compare_weights(initializer_values(model), expected_values(module))
    if not check.pairs:
        return CauseRecord(KIND, proven=False, setting=SETTING, message=(
            f"stale weights not checked: none of the shipped ONNX's {check.initializers}"
            " floating initializers matches a parameter or buffer of the module by name or"
            " shape"))
    folded = sum(1 for p in check.pairs if p.expected.folded)
    if not check.differ and not check.unmatched:
        return CauseRecord(KIND, proven=False, setting=SETTING, message=(
            f"stale weights ruled out: the shipped ONNX holds the module's values"
            f" ({len(check.pairs)} of its {check.initializers} floating initializers compared"
            + (f", {folded} with a batch norm folded in" if folded else "") + ")"))
    if not check.differ:
        return CauseRecord(KIND, proven=False, setting=SETTING, message=(
            f"stale weights not ruled out: the {len(check.pairs)} tensors matched hold the "
            f"module's values, but {len(check.unmatched)} of the shipped ONNX's floating "
            f"initializers could not be matched to a parameter or buffer by name, shape or "
            f"values ({_names(check.unmatched)})"))
    differ = (f"the shipped ONNX holds weights that differ from the module's ({check.tally()})"
              f": {check.listing()}")
    swap_in(model, check)
    try:
        after = _rerun(evidence, model, threads)
    except StageError as exc:
        return CauseRecord(KIND, proven=False, setting=SETTING,
                           message=f"stale weights not proven: {differ}, but the re-run with the"
                                   f" module's values failed: {exc}")
    second = causes.rerun(evidence.comparisons, after)
    record = second.record(KIND, SETTING)
    if not second.proven:
        why = (f"the {len(check.unmatched)} tensors not matched stayed as they are, or "
               "something besides the weights differs too" if check.unmatched
               else "something besides these weights differs too")
        return dataclasses.replace(record, message=(
            f"stale weights not ruled out: {differ}; with the matched ones swapped in the case "
            f"still fails ({second.still_fails()}): {why}"))
    return dataclasses.replace(record, message=(
        f"stale weights: {differ}; with the module's values in their place"
        f" {second.what_changed()}: export the file again from the module"))


def _rerun(evidence: Evidence, model: Any, threads: int) -> Sequence[Any]:
    """The case's samples through a copy of the file, compared as the case was."""
    import onnx

    case = evidence.case
    with tempfile.TemporaryDirectory(prefix="onnx-parity-weights-") as folder:
        path = Path(folder) / "swapped.onnx"
        big = model.ByteSize() > _EXTERNAL_BYTES
        onnx.save_model(model, str(path), save_as_external_data=big,
                        location="swapped.onnx.data" if big else None)
        target = make_target(path, case.target, threads or None)
        compared = evidence.compared(target)
        del target  # the session lets go of the copy before its folder goes
    return compared
