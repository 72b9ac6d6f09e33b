"""torch → ONNX with either exporter; the full ONNX checker on every model, exported or shipped."""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import re
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_parity.capture import native_output
from onnx_parity.errors import CheckError, ExportError
from onnx_parity.frozen import frozen
from onnx_parity.literals import Exporter
from onnx_parity.prepare.dynamic import dynamic_axes, dynamic_shapes, static_dims
from onnx_parity.spec import InputSpec

logger = logging.getLogger(__name__)

# Above this the protobuf limit (2 GiB) is near: weights go to a side file next to the model.
EXTERNAL_DATA_BYTES = 1 << 30


@frozen
class ExportedModel:
    path: Path
    opset: int
    exporter: Exporter
    seconds: float
    log: str  # what the exporter printed; kept for error messages and --verbose


def export_model(
    module: Any,
    example: Sequence[Any],
    inputs: Sequence[InputSpec],
    outputs: Sequence[str],
    opset: int,
    exporter: Exporter,
    path: Path,
    forward_args: Mapping[str, Any] | None = None,
    by_name: Sequence[str] | None = None,
    program: Any = None,
) -> ExportedModel:
    """Export `module` (already in eval mode) with tensors `example` (in the order of
    `inputs`) and keyword arguments `forward_args`, named dims dynamic. The inputs go to
    forward() by position, or as keywords when `by_name` lists their names (in forward()'s
    order, which the exported graph's inputs then follow). With `program`, the torch.export
    program of this module and these inputs (program.py), the dynamo exporter converts it
    instead of tracing the module again: the same ONNX, without torch.export's time.

    Nothing is wrapped around the call that the user's own torch.onnx.export would not have:
    under torch.no_grad(), nn.MultiheadAttention takes a fused path that the TorchScript
    exporter cannot export, a failure that would be this tool's and not the model's.
    """
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    external = _parameter_bytes(module) > EXTERNAL_DATA_BYTES
    fixed = dict(forward_args or {})
    values = dict(zip([i.name for i in inputs], example, strict=False))
    if by_name is None:
        args, keywords, names = tuple(example), {}, [i.name for i in inputs]
    else:
        args, keywords, names = (), {n: values[n] for n in by_name}, list(by_name)
    captured = io.StringIO()
    started = time.perf_counter()
    native: list[str] = []
    try:
        # The exporters print progress, warnings and graph dumps, from Python and from C++: all
        # of it goes to the export's log, none to the console.
        with native_output((1, 2)) as native, contextlib.redirect_stdout(captured), \
                contextlib.redirect_stderr(captured), warnings.catch_warnings(), \
                _logged_to(captured):
            if exporter == "dynamo":
                # From a program, torch.onnx.export ignores the arguments, and dynamic_shapes
                # only names its dynamic axes as the module's export named them.
                torch.onnx.export(
                    module if program is None else program, args, str(path),
                    kwargs={**keywords, **fixed},
                    dynamo=True, opset_version=opset, input_names=names,
                    output_names=list(outputs) or None,
                    dynamic_shapes=dynamic_shapes(module, inputs, fixed, by_name),
                    external_data=external,
                )
            else:
                # The spec chose the TorchScript exporter; its deprecation notice is no news.
                warnings.filterwarnings("ignore", category=DeprecationWarning,
                                        message=".*legacy TorchScript-based ONNX export")
                with _by_position(module, args, keywords, fixed) as (args, keywords, fixed):
                    torch.onnx.export(
                        module, args, str(path), kwargs={**keywords, **fixed},
                        dynamo=False, opset_version=opset, input_names=names,
                        output_names=list(outputs) or None,
                        dynamic_axes=dynamic_axes(inputs) or None,
                    )
    except Exception as exc:
        log = _log(captured, native, exc)
        logger.debug("%s exporter failed:\n%s", exporter, exc)
        where = ("in torch.export, before any opset" if in_torch_export(exc)
                 else f"at opset {opset}")
        raise ExportError(f"{exporter} exporter failed {where}: {explain(exc)}", log) from exc
    seconds = time.perf_counter() - started
    log = _log(captured, native)
    actual = model_opset(path)
    if actual != opset:
        # The dynamo exporter converts from its own opset and keeps that one when conversion fails.
        raise ExportError(conversion_failure(opset, actual, exporter, log, path), log)
    fixed_dims = static_dims(path, inputs, exporter)
    if fixed_dims:
        raise ExportError(fixed_dims, log)
    return ExportedModel(path, actual, exporter, seconds, log)


def in_torch_export(exc: BaseException) -> bool:
    """Whether the dynamo exporter failed in torch.export, its first step, which no opset
    takes part in (torch's TorchExportError, matched by name: its module is private)."""
    return any(kind.__name__ == "TorchExportError" for kind in type(exc).__mro__)


@contextlib.contextmanager
def _by_position(module: Any, args: tuple[Any, ...], keywords: dict[str, Any],
                 fixed: dict[str, Any],
                 ) -> Iterator[tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]]:
    """The TorchScript exporter passes keyword arguments to forward() by position, in its
    parameters' order, so it cannot pass a keyword-only one (nor one only **kwargs takes), and
    it fills every parameter before the last one given with its default, which becomes an
    input of the graph where it is a number (GPT-2's `logits_to_keep=0`, before `use_cache`).
    So forward() is called through a stand-in on the module itself (a wrapper module would
    rename every node's scope) that takes the inputs by position and passes them on by name,
    whenever there is a keyword to pass."""
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):  # a TorchScript module: the exporter's own way, as before
        parameters = {}
    if not parameters or not (keywords or fixed):
        yield args, keywords, fixed
        return
    original, names, own = module.forward, list(keywords), module.__dict__.get("forward")

    def forward(*tensors: Any) -> Any:
        named = dict(zip(names, tensors[len(args):], strict=True))
        return original(*tensors[:len(args)], **named, **fixed)

    module.forward = forward
    try:
        yield (*args, *keywords.values()), {}, {}
    finally:
        del module.forward  # the class's own forward() again
        if own is not None:
            module.forward = own


@contextlib.contextmanager
def _logged_to(captured: io.StringIO) -> Iterator[None]:
    """The exporter's and onnxscript's log records (the version converter says why it kept
    another opset only there) go to the export's log while it runs."""
    handler = logging.StreamHandler(captured)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in ("onnxscript", "torch.onnx")]
    for each in loggers:
        each.addHandler(handler)
    try:
        yield
    finally:
        for each in loggers:
            each.removeHandler(handler)


def _log(captured: io.StringIO, native: list[str], exc: BaseException | None = None) -> str:
    """What the exporter printed, from Python and from native code, and its exception."""
    parts = [captured.getvalue(), "\n".join(native)]
    if exc is not None:
        import traceback

        parts.append("".join(traceback.format_exception(exc)))
    return "\n".join(part.rstrip() for part in parts if part.strip()) + "\n"


def conversion_failure(asked: int, produced: int, exporter: Exporter, log: str,
                       path: Path | None = None) -> str:
    """Why the exporter kept another opset, naming the node that blocked the conversion where
    the model and the converter's log tell, and the ways that work."""
    blocked = _blocking_nodes(path, log) if path is not None else ""
    if not blocked and path is not None:
        blocked = _changed_nodes(path, asked)
    if not blocked:
        reason = next((line.strip() for line in reversed(log.splitlines())
                       if re.match(r"\s*\w*(Error|Exception)\b", line)), "")
        blocked = f" ({reason[:200]})" if reason else ""
    return (f"asked for opset {asked}, the {exporter} exporter produced opset {produced}: its "
            f"conversion to opset {asked} failed{blocked}; use opset {produced} or newer, or "
            f"exporter: torchscript, which writes opset {asked} directly")


# Ops whose axes are an input in newer opsets and an attribute in older ones.
_AXES_OPS = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                       "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
                       "Squeeze", "Unsqueeze", "ReduceSum"})


def _blocking_nodes(path: Path, log: str) -> str:
    """' at ReduceMean 'node_mean' (...)' for the nodes the converter's axes adapter works on,
    when that adapter is what failed; '' when the log blames something else."""
    if "axes_input_to_attribute" not in log:
        return ""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # the file is what it is; the message still says what works
        return ""
    found = [n for n in graph.node if n.op_type in _AXES_OPS and len(n.input) > 1 and n.input[1]]
    if not found:
        return ""
    named = ", ".join(f"{n.op_type} '{n.name}'" for n in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (f" at {named}{more}: onnx's converter could not turn its axes input into the "
            "attribute the older opset has")


def _changed_nodes(path: Path, asked: int) -> str:
    """' at ReduceMean 'node_mean' (redefined in opset 18)': the nodes whose operator changed
    after the opset asked for, the ones a conversion to it has to rewrite; '' when none did."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
        produced = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        found = []
        for node in model.graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            since = onnx.defs.get_schema(node.op_type, produced).since_version
            if since > asked:
                found.append(f"{node.op_type} '{node.name}' (redefined in opset {since})")
    except Exception:  # the message still says what works
        return ""
    if not found:
        return ""
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (f" at {', '.join(found[:3])}{more}: nodes whose operator changed after opset "
            f"{asked}, which the conversion has to rewrite")


# An ONNX file is one protobuf message, which cannot pass 2 GiB (weights past that go to external
# data files): a larger file is refused before anything reads it.
MAX_ONNX_BYTES = (2 << 30) - 1


def check_model(path: Path) -> str | None:
    """onnx.checker with full_check (shape inference included); by path, so >2 GiB models work.
    A file past MAX_ONNX_BYTES is refused unread, naming the file and the limit.

    A model the checker finds malformed is an error. One that only onnx's strict shape
    inference refuses (it stumbles on some of onnx's own function bodies, MeanVarianceNormalization
    at opset 13 among them) is judged on what ONNX Runtime makes of it: the returned note says
    what the shape inference said.
    """
    size = path.stat().st_size
    if size > MAX_ONNX_BYTES:
        raise CheckError(f"{path} is {size / (1 << 30):.1f} GiB, over the limit of 2 GiB an ONNX "
                         "file can be (protobuf's); a larger model keeps its weights in external "
                         "data files beside it")
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.shape_inference.InferenceError as exc:
        try:
            onnx.checker.check_model(str(path), full_check=False)
        except Exception as structural:
            raise CheckError(f"onnx.checker rejected {path.name}: "
                             f"{_first_lines(str(structural))}") from structural
        return (f"onnx's strict shape inference refuses {path.name} "
                f"({' '.join(str(exc).split())[:300]}); the case is judged on what ONNX Runtime"
                " computes with it")
    except Exception as exc:  # onnx raises ValidationError or protobuf errors
        raise CheckError(f"onnx.checker rejected {path.name}: {_first_lines(str(exc))}") from exc
    return None


def model_opset(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _parameter_bytes(module: Any) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def explain(exc: BaseException) -> str:
    """The root cause and the user's own line, not the exporter's page of generic advice."""
    root = exc
    for _ in range(20):  # chains are short; a cycle must not hang the worker
        deeper = root.__cause__ or root.__context__
        if deeper is None:
            break
        root = deeper
    text = _ANSI.sub("", str(root)).strip()
    reason = f"{type(root).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
    frames = [m for m in _FRAME.finditer(_ANSI.sub("", str(exc)))
              if "site-packages" not in m[1] and "/torch/" not in m[1]]
    if frames:
        path, line, function = frames[-1].groups()
        reason += f" (at {Path(path).name}:{line}, in {function})"
    if re.search(r"Cache\b.*\b(in output|unsupported type)|(in output|unsupported type).*Cache",
                 text):
        reason += ("; the model returns a key-value cache object: pass forward_args: "
                   "{use_cache: false} on the model")
    return reason


def _first_lines(text: str, lines: int = 12) -> str:
    kept = text.strip().splitlines()
    more = len(kept) - lines
    return "\n".join(kept[:lines]) + (f"\n… ({more} more lines)" if more > 0 else "")
