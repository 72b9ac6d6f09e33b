"""The dynamo exporter's program of a model: torch.export traced once, by the model's first
export, and converted again for each other opset; a failed torch.export fails every opset.

torch.onnx.export(dynamo=True) is torch.export (the costly part: a minute for a swin_t) and then
a conversion at the opset asked for; torch.export does not depend on the opset, and
torch.onnx.export converts an ExportedProgram it is given exactly as one it traced. So the first
export is the user's own call, with the exporter's own fallbacks (strict=False, then
strict=True), and the program it traced is kept for the next opsets. The TorchScript exporter
traces at each opset, as torch does.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_parity.errors import ExportError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.export import ExportedModel, export_model, in_torch_export
from onnx_parity.spec import InputSpec

logger = logging.getLogger(__name__)


@frozen
class Program:
    """What a model's first dynamo export left: the program torch.export traced (None where it
    could not be seen), and that export's own outcome at its opset."""

    traced: Any  # torch.export.ExportedProgram
    opset: int
    first: ExportedModel | ExportError


def trace_program(module: Any, example: Sequence[Any], inputs: Sequence[InputSpec],
                  outputs: Sequence[str], opset: int, path: Path,
                  forward_args: Mapping[str, Any] | None = None,
                  by_name: Sequence[str] | None = None) -> Program:
    """The model's first dynamo export, at `opset`, to `path` (export_model's arguments),
    keeping the program torch.export traced for it. Raises ExportError only when torch.export
    itself failed: every opset's export would fail the same way."""
    with _watching_torch_export() as traced:
        try:
            first: ExportedModel | ExportError = export_model(
                module, example, inputs, outputs, opset, "dynamo", path, forward_args, by_name)
        except ExportError as exc:
            if not traced and _before_conversion(exc):
                raise
            first = exc  # this opset's conversion failed; another may not
    # The exporter's strategies stop at the first program torch.export returns.
    return Program(traced[-1] if traced else None, opset, first)


def export_at(program: Program, opset: int, path: Path, module: Any, example: Sequence[Any],
              inputs: Sequence[InputSpec], outputs: Sequence[str],
              forward_args: Mapping[str, Any] | None = None,
              by_name: Sequence[str] | None = None) -> ExportedModel:
    """The model's dynamo export at `opset`: the first export's own where it was at `opset`,
    else its program converted (or the module traced again, where no program was seen)."""
    if opset == program.opset:
        if isinstance(program.first, ExportError):
            raise program.first
        return program.first
    if program.traced is not None:
        logger.debug("exporting at opset %d from the program traced for opset %d", opset,
                     program.opset)
    return export_model(module, example, inputs, outputs, opset, "dynamo", path, forward_args,
                        by_name, program=program.traced)


def _before_conversion(exc: ExportError) -> bool:
    """Whether the export failed before any opset took part: in torch.export, or on the
    spec's inputs before it."""
    cause = exc.__cause__
    return cause is not None and (in_torch_export(cause) or isinstance(cause, ExportError))


@contextlib.contextmanager
def _watching_torch_export() -> Iterator[list[Any]]:
    """The programs torch.export returns while the block runs, in order. The dynamo exporter's
    capture strategies call torch.export.export by its module attribute; it is watched, not
    changed: arguments, result and exceptions pass through as they are."""
    import torch.export

    seen: list[Any] = []
    originals = {name: getattr(torch.export, name) for name in ("export", "draft_export")
                 if callable(getattr(torch.export, name, None))}

    def watched(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            program = original(*args, **kwargs)
            seen.append(program)
            return program

        return call

    for name, original in originals.items():
        setattr(torch.export, name, watched(original))
    try:
        yield seen
    finally:
        for name, original in originals.items():
            setattr(torch.export, name, original)
