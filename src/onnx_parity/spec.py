"""YAML → validated, frozen Spec; imports neither torch nor onnxruntime."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from onnx_parity.errors import SpecError, SpecProblem
from onnx_parity.results import Tolerance
from onnx_parity.schema import (
    DIM_PATTERN,
    TORCH_PATTERN,
    describe_path,
    describe_place,
    describe_value,
    did_you_mean,
    quoted,
    schema_problems,
)
from onnx_parity.yamlnodes import LocatedDocument, NodePath, UnusableYaml, YamlProblem, load_located

Exporter = Literal["dynamo", "torchscript"]
DatasetKind = Literal["random", "npz", "onnx-test-data"]
FallbackPolicy = Literal["fail", "warn", "allow"]

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool")
DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
DEFAULT_OPSETS = (18,)
DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape (named dims are dynamic in the export) and dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float | None = None  # for integers: uniform in [low, high); for floats: uniform only
    high: float | None = None


@dataclass(frozen=True)
class TargetSpec:
    """An ONNX Runtime configuration: providers in order of preference."""

    name: str
    providers: tuple[str, ...]
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fallback: FallbackPolicy = "fail"
    line: int | None = None
    allow_cpu_ops: tuple[str, ...] = ()  # op types ONNX Runtime may put on the CPU on purpose
    disable_cpu_ep_fallback: bool = False  # ONNX Runtime refuses the session instead


@dataclass(frozen=True)
class DatasetSpec:
    """Where a case's inputs (and, for recorded data, reference outputs) come from."""

    name: str
    kind: DatasetKind
    seed: int = 0
    samples: int | None = None  # random: default 2; recorded: every sample there is
    batch_sizes: tuple[int, ...] = ()  # random: default (1,); npz: default the whole array
    distribution: Literal["normal", "uniform"] = "normal"
    low: float | None = None
    high: float | None = None
    path: Path | None = None  # resolved against the spec's folder
    line: int | None = None
    dims: Mapping[str, int] = field(default_factory=dict)  # random: sizes of named dims past axis 0


@dataclass(frozen=True)
class ModelSpec:
    """One model entry with defaults already applied."""

    name: str
    line: int
    torch: str | None = None  # "file.py:callable" (relative to the spec) or "pkg.mod:callable"
    args: Mapping[str, Any] = field(default_factory=dict)
    onnx: Path | None = None
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[str, ...] = ()
    opsets: tuple[int, ...] = DEFAULT_OPSETS
    exporter: Exporter = "dynamo"
    targets: tuple[str, ...] = ("cpu",)
    datasets: tuple[str, ...] = ("random",)
    tolerance: Tolerance = DEFAULT_TOLERANCE
    output_tolerances: Mapping[str, Tolerance] = field(default_factory=dict)  # already merged
    timeout: float = DEFAULT_TIMEOUT
    memory_limit: float | None = None  # MiB of address space for the model's worker

    def tolerance_for(self, output: str) -> Tolerance:
        return self.output_tolerances.get(output, self.tolerance)


@dataclass(frozen=True)
class Spec:
    path: Path
    version: int
    models: tuple[ModelSpec, ...]
    targets: Mapping[str, TargetSpec]
    datasets: Mapping[str, DatasetSpec]

    @property
    def root(self) -> Path:
        return self.path.parent


PREDEFINED_TARGETS: dict[str, TargetSpec] = {
    "cpu": TargetSpec(name="cpu", providers=("CPUExecutionProvider",), fallback="fail"),
    "cuda": TargetSpec(
        name="cuda", providers=("CUDAExecutionProvider", "CPUExecutionProvider"), fallback="fail"
    ),
}
PREDEFINED_DATASETS: dict[str, DatasetSpec] = {
    "random": DatasetSpec(name="random", kind="random", seed=0, samples=2, batch_sizes=(1,)),
}


# Loading: YAML with marks -> schema check -> semantic checks and defaults -> the dataclasses.

# A name close to one of these is a typo; a name close to none may be a newer provider.
KNOWN_PROVIDERS = (
    "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider",
    "NvTensorRTRTXExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider",
    "OpenVINOExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider",
    "DnnlExecutionProvider", "QNNExecutionProvider", "NnapiExecutionProvider",
    "XnnpackExecutionProvider", "WebGpuExecutionProvider", "VitisAIExecutionProvider",
    "CANNExecutionProvider", "ACLExecutionProvider", "ArmNNExecutionProvider",
    "AzureExecutionProvider", "RknpuExecutionProvider", "SNPEExecutionProvider",
)
_INT_RANGES = {
    "int8": (-(2**7), 2**7), "uint8": (0, 2**8), "int16": (-(2**15), 2**15),
    "int32": (-(2**31), 2**31), "int64": (-(2**63), 2**63),
}
_EXPORTERS: tuple[Exporter, ...] = ("dynamo", "torchscript")
_KINDS: tuple[DatasetKind, ...] = ("random", "npz", "onnx-test-data")
_FALLBACKS: tuple[FallbackPolicy, ...] = ("fail", "warn", "allow")
_DISTRIBUTIONS: tuple[Literal["normal", "uniform"], ...] = ("normal", "uniform")
_T = TypeVar("_T")


def load_spec(path: str | Path) -> Spec:
    """Read, check and resolve a spec file; raise SpecError listing every problem found."""
    shown = str(path)
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError([SpecProblem(shown, 1, 1, f"cannot read the spec: {reason}")]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line, column = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        message = f"the spec is not UTF-8 text (byte 0x{data[exc.start]:02x})"
        raise SpecError([SpecProblem(shown, line, column, message)]) from None
    return _parse(text, Path(path), shown)


def parse_spec(text: str, path: Path) -> Spec:
    """Check and resolve spec text as if read from `path` (relative files resolve next to it)."""
    return _parse(text, Path(path), str(path))


def _parse(text: str, path: Path, shown: str) -> Spec:
    try:
        doc = load_located(text)
    except UnusableYaml as exc:
        raise SpecError(_located(shown, exc.problems)) from None
    if not isinstance(doc.value, dict):
        raise SpecError(_located(shown, [*doc.problems, _not_a_mapping(doc)]))
    problems = [*doc.problems, *schema_problems(doc)]
    resolver = _Resolver(doc, Path(os.path.abspath(path)))
    spec = resolver.spec()
    problems += resolver.problems
    if problems:
        raise SpecError(_located(shown, problems))
    return spec


def _located(shown: str, problems: list[YamlProblem]) -> list[SpecProblem]:
    unique = sorted({(p.line, p.column, p.message) for p in problems})
    return [SpecProblem(shown, line, column, message) for line, column, message in unique]


def _not_a_mapping(doc: LocatedDocument) -> YamlProblem:
    mark = doc.value_mark(())
    if doc.value is None:
        return YamlProblem(mark.line, mark.column,
                           "the spec is empty; it needs 'version: 1' and a 'models:' list")
    got = describe_value(doc.value, mark)
    message = f"the spec must be a mapping with 'version: 1' and 'models:', got {got}"
    return YamlProblem(mark.line, mark.column, message)


class _Resolver:
    """Semantic checks and defaults over schema-checked values.

    Values of the wrong type were already reported by the schema pass, so every accessor here
    skips them quietly; a Spec built from such fallbacks is never returned.
    """

    def __init__(self, doc: LocatedDocument, path: Path) -> None:
        self.doc = doc
        self.raw: dict[str, Any] = doc.value
        self.path = path
        self.problems: list[YamlProblem] = []

    def report(self, path: NodePath, message: str, *, at_key: bool = False) -> None:
        mark = self.doc.key_mark(path) if at_key else self.doc.value_mark(path)
        self.problems.append(YamlProblem(mark.line, mark.column, message))

    def place(self, path: NodePath) -> str:
        return describe_place(path, self.raw)[0]

    def spec(self) -> Spec:
        self._check_numbers(self.raw, ())
        targets = dict(PREDEFINED_TARGETS)
        for name, entry in _entries(self.raw.get("targets")):
            targets[name] = self._target(name, entry)
        datasets = dict(PREDEFINED_DATASETS)
        for name, entry in _entries(self.raw.get("datasets")):
            datasets[name] = self._dataset(name, entry)
        defaults = _mapping(self.raw.get("defaults"))
        self._check_references(("defaults",), defaults, targets, datasets)
        models = tuple(
            self._model(index, entry, defaults, targets, datasets)
            for index, entry in enumerate(_items(self.raw.get("models")))
            if isinstance(entry, dict)
        )
        self._check_unique_models()
        return Spec(self.path, 1, models, targets, datasets)

    # -- numbers and files ------------------------------------------------------------------

    def _check_numbers(self, value: Any, path: NodePath) -> None:
        """NaN, infinities and huge integers pass JSON Schema's bounds; refuse them here."""
        if len(path) >= 3 and (path[0], path[2]) in (("models", "args"),
                                                      ("targets", "provider_options")):
            return  # passed through to user code as they are
        if len(path) == 1 and str(path[0]).startswith("x-"):
            return  # extension keys hold anchors; what they are used for is checked there
        if isinstance(value, dict):
            for key, item in value.items():
                self._check_numbers(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self._check_numbers(item, (*path, index))
        elif isinstance(value, float) and not math.isfinite(value):
            text = self.doc.value_mark(path).text or repr(value)
            self.report(path, f"{describe_path(path, self.raw)}: expected a finite number, "
                              f"got {text}")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
            digits = len(str(abs(value)))
            self.report(path, f"{describe_path(path, self.raw)}: expected a smaller number, got "
                              f"one with {digits} digits")

    def _existing(self, path: NodePath, raw: str, *, folder: bool, what: str) -> Path:
        """`raw` resolved against the spec's folder; reports it unless it is a file (folder)."""
        resolved = self.path.parent / raw
        try:
            resolved = resolved.resolve()
            ok = resolved.is_dir() if folder else resolved.is_file()
            other = resolved.is_file() if folder else resolved.is_dir()
        except (OSError, RuntimeError, ValueError):  # symlink loops, NUL bytes
            ok = other = False
        if other:
            kind = "a file, not a folder" if folder else "a folder, not a file"
            self.report(path, f"{what} {resolved} is {kind}")
        elif not ok:
            self.report(path, f"{what} not found: {resolved}")
        return resolved

    # -- targets and datasets ---------------------------------------------------------------

    def _target(self, name: str, entry: dict[str, Any]) -> TargetSpec:
        base = ("targets", name)
        place = self.place(base)
        providers = _strings(entry.get("providers"))
        for index, provider in enumerate(_items(entry.get("providers"))):
            if isinstance(provider, str) and provider and provider not in KNOWN_PROVIDERS:
                # Provider names share a long suffix, so only a near miss is a typo.
                hint = did_you_mean(provider, KNOWN_PROVIDERS, cutoff=0.9)
                if hint:
                    message = f"{place}: unknown execution provider {quoted(provider)}{hint}"
                    self.report((*base, "providers", index), message)
        options: dict[str, Mapping[str, Any]] = {}
        for provider, values in _mapping(entry.get("provider_options")).items():
            if provider not in providers:
                listed = ", ".join(providers) or "none"
                hint = did_you_mean(provider, providers, cutoff=0.9)
                self.report((*base, "provider_options", provider),
                            f"{place}: provider_options for {quoted(provider)}, which is not "
                            f"among its providers ({listed}){hint}", at_key=True)
            if isinstance(values, dict):
                options[provider] = dict(values)
        self._check_fallback_keys(base, entry, providers)
        return TargetSpec(
            name=name,
            providers=providers,
            provider_options=options,
            fallback=_choice(entry.get("fallback"), _FALLBACKS, "fail"),
            line=self.doc.key_mark(base).line,
            allow_cpu_ops=_strings(entry.get("allow_cpu_ops")),
            disable_cpu_ep_fallback=entry.get("disable_cpu_ep_fallback") is True,
        )

    def _check_fallback_keys(self, base: NodePath, entry: dict[str, Any],
                             providers: tuple[str, ...]) -> None:
        """Both keys are about nodes leaving a first provider that is not the CPU."""
        place = self.place(base)
        cpu_first = bool(providers) and providers[0] == "CPUExecutionProvider"
        if "allow_cpu_ops" in entry and cpu_first:
            self.report((*base, "allow_cpu_ops"), f"{place}: 'allow_cpu_ops' applies only to "
                        "targets whose first provider is not CPUExecutionProvider; on this "
                        "target every node runs on the CPU anyway", at_key=True)
        if entry.get("disable_cpu_ep_fallback") is True and "CPUExecutionProvider" in providers:
            self.report((*base, "disable_cpu_ep_fallback"), f"{place}: "
                        "disable_cpu_ep_fallback: true needs a providers list without "
                        "CPUExecutionProvider (ONNX Runtime refuses a session that lists the CPU "
                        "provider and disables falling back to it); remove CPUExecutionProvider "
                        "from its providers", at_key=True)

    def _dataset(self, name: str, entry: dict[str, Any]) -> DatasetSpec:
        base = ("datasets", name)
        place = self.place(base)
        kind = _choice(entry.get("kind"), _KINDS, "random")
        path = None
        raw_path = entry.get("path")
        if kind != "random" and isinstance(raw_path, str) and raw_path:
            folder = kind == "onnx-test-data"
            what = f"{place}: {'onnx-test-data folder' if folder else 'npz file'}"
            path = self._existing((*base, "path"), raw_path, folder=folder, what=what)
        distribution = _choice(entry.get("distribution"), _DISTRIBUTIONS, "normal")
        low, high = _number(entry.get("low")), _number(entry.get("high"))
        if kind == "random" and distribution == "normal":
            for key in ("low", "high"):
                if key in entry:
                    self.report((*base, key), f"{place}: '{key}' applies only to "
                                f"distribution: uniform, and this dataset is normal",
                                at_key=True)
        elif low is not None and high is not None and low >= high:
            self.report((*base, "high"), f"{place}: low ({low:g}) must be below high ({high:g})")
        default = PREDEFINED_DATASETS["random"]
        random = kind == "random"
        samples = _integer(entry.get("samples"))
        return DatasetSpec(
            name=name,
            kind=kind,
            seed=_integer(entry.get("seed")) or 0,
            samples=samples if samples is not None else (default.samples if random else None),
            batch_sizes=_integers(entry.get("batch_sizes"))
            or (default.batch_sizes if random else ()),
            distribution=distribution,
            low=low,
            high=high,
            path=path,
            line=self.doc.key_mark(base).line,
            dims=_sizes(entry.get("dims")),
        )

    def _check_references(self, base: NodePath, entry: dict[str, Any],
                          targets: Mapping[str, TargetSpec],
                          datasets: Mapping[str, DatasetSpec]) -> None:
        place = self.place(base)
        defined_sets: tuple[tuple[str, Mapping[str, Any]], ...] = (
            ("targets", targets), ("datasets", datasets))
        for key, defined in defined_sets:
            for index, name in enumerate(_items(entry.get(key))):
                if isinstance(name, str) and name not in defined:
                    hint = did_you_mean(name, defined) or f"; defined {key}: {', '.join(defined)}"
                    self.report((*base, key, index),
                                f"{place}: undefined {key[:-1]} {quoted(name)}{hint}")

    # -- models -----------------------------------------------------------------------------

    def _model(self, index: int, entry: dict[str, Any], defaults: dict[str, Any],
               targets: Mapping[str, TargetSpec],
               datasets: Mapping[str, DatasetSpec]) -> ModelSpec:
        base = ("models", index)
        self._check_kind(base, entry)
        torch = entry.get("torch") if isinstance(entry.get("torch"), str) else None
        if torch is not None:
            self._check_torch_file(base, torch)
        onnx = None
        if isinstance(entry.get("onnx"), str) and entry["onnx"]:
            onnx = self._existing((*base, "onnx"), entry["onnx"], folder=False,
                                  what=f"{self.place(base)}: onnx file")
        self._check_references(base, entry, targets, datasets)

        def setting(key: str) -> Any:
            return entry[key] if key in entry else defaults.get(key)

        dataset_names = _strings(setting("datasets")) or ("random",)
        if "torch" not in entry and "onnx" in entry:
            self._check_reference_data(base, entry, dataset_names, datasets)
        outputs = _strings(entry.get("outputs"))
        tolerance, per_output = self._tolerance(base, entry, defaults, outputs)
        inputs = self._inputs(base, _mapping(entry.get("inputs")))
        used = [datasets[n] for n in dataset_names if n in datasets]
        self._check_dim_sizes(base, _mapping(entry.get("inputs")), used)
        name = entry.get("name")
        return ModelSpec(
            name=name if isinstance(name, str) else f"#{index + 1}",
            line=self.doc.value_mark(base).line,
            torch=torch,
            args=dict(_mapping(entry.get("args"))),
            onnx=onnx,
            inputs=inputs,
            outputs=outputs,
            opsets=_integers(setting("opsets")) or DEFAULT_OPSETS,
            exporter=_choice(setting("exporter"), _EXPORTERS, "dynamo"),
            targets=_strings(setting("targets")) or ("cpu",),
            datasets=dataset_names,
            tolerance=tolerance,
            output_tolerances=per_output,
            timeout=_number(setting("timeout")) or DEFAULT_TIMEOUT,
            memory_limit=_number(setting("memory_limit")),
        )

    def _check_kind(self, base: NodePath, entry: dict[str, Any]) -> None:
        """Which of torch/onnx the model has decides which other keys make sense."""
        place = self.place(base)
        has_torch, has_onnx = "torch" in entry, "onnx" in entry
        if not has_torch and not has_onnx:
            self.report(base, f"{place} has neither 'torch' nor 'onnx': give the PyTorch model "
                              "to export ('torch'), an ONNX file ('onnx'), or both")
        if has_torch and not has_onnx and entry.get("inputs", {}) == {}:
            self.report(base, f"{place} is exported from 'torch', and the export needs "
                              "'inputs': the shape and dtype of each forward() argument, e.g. "
                              "inputs: {x: {shape: [batch, 10], dtype: float32}}")
        if has_onnx:
            for key in ("opsets", "exporter"):
                if key in entry:
                    self.report((*base, key), f"{place}: '{key}' applies only to models that "
                                "are exported ('torch' without 'onnx'); this model's ONNX file "
                                "is used as it is", at_key=True)
        if not has_torch and "args" in entry:
            self.report((*base, "args"), f"{place}: 'args' are passed to the 'torch' callable, "
                        "but this model has no 'torch'", at_key=True)

    def _check_torch_file(self, base: NodePath, torch: str) -> None:
        if re.match(TORCH_PATTERN, torch) is None:
            return  # the schema pass said what is wrong with it
        module = torch.split(":", 1)[0]
        if module.endswith(".py"):
            self._existing((*base, "torch"), module, folder=False,
                           what=f"{self.place(base)}: torch file")

    def _check_reference_data(self, base: NodePath, entry: dict[str, Any],
                              names: tuple[str, ...], datasets: Mapping[str, DatasetSpec]) -> None:
        """Without a PyTorch model, expected outputs can only come from recorded data."""
        place = self.place(base)
        own = "datasets" in entry
        for index, name in enumerate(names):
            dataset = datasets.get(name)
            if dataset is None or dataset.kind != "random":
                continue
            origin = "" if own else " (from defaults)"
            self.report((*base, "datasets", index) if own else base,
                        f"{place} has no 'torch', so its expected outputs must come from its "
                        f"data, but dataset {quoted(name)}{origin} is of kind random; use an "
                        "npz or onnx-test-data dataset with reference outputs, or add 'torch'")

    def _check_dim_sizes(self, base: NodePath, inputs: dict[str, Any],
                         datasets: list[DatasetSpec]) -> None:
        """Random data needs a size for each named dim but the batch (inputs.concrete_shape)."""
        for name, entry in _entries(inputs):
            for axis, dim in enumerate(_items(entry.get("shape"))):
                if axis == 0 or not isinstance(dim, str) or not re.match(DIM_PATTERN, dim):
                    continue
                for dataset in datasets:
                    if dataset.kind == "random" and dim not in dataset.dims:
                        path = (*base, "inputs", name, "shape", axis)
                        self.report(path, f"{self.place(path)}: random data needs a size for the "
                                    f"named dimension '{dim}' at axis {axis}: set "
                                    f"dims: {{{dim}: N}} on dataset {quoted(dataset.name)}")

    def _inputs(self, base: NodePath, raw: dict[str, Any]) -> tuple[InputSpec, ...]:
        inputs = []
        for name, entry in _entries(raw):
            path = (*base, "inputs", name)
            shape = tuple(d for d in (_dim(d) for d in _items(entry.get("shape"))) if d is not None)
            dtype = entry.get("dtype", "float32")
            dtype = dtype if dtype in DTYPES else "float32"
            low, high = self._input_range(path, entry, dtype)
            inputs.append(InputSpec(name=name, shape=shape, dtype=dtype, low=low, high=high))
        return tuple(inputs)

    def _input_range(self, path: NodePath, entry: dict[str, Any],
                     dtype: str) -> tuple[float | None, float | None]:
        place = self.place(path)
        if dtype == "bool":
            for key in ("low", "high"):
                if key in entry:
                    self.report((*path, key), f"{place}: a bool input takes no '{key}'",
                                at_key=True)
            return None, None
        if dtype in _INT_RANGES:
            return self._integer_range(path, entry, dtype)
        low, high = _number(entry.get("low")), _number(entry.get("high"))
        if low is not None and high is not None and low >= high:
            self.report((*path, "high"), f"{place}: low ({low:g}) must be below high ({high:g})")
        return low, high

    def _integer_range(self, path: NodePath, entry: dict[str, Any],
                       dtype: str) -> tuple[int | None, int | None]:
        place = self.place(path)
        if "high" not in entry:
            self.report(path, f"{place}: an integer input ({dtype}) needs 'high', the exclusive "
                              "upper bound of its random values (low defaults to 0), e.g. the "
                              "vocabulary size")
        for key in ("low", "high"):
            value = entry.get(key)
            if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
                self.report((*path, key), f"{place}: {key}: expected an integer for {dtype} "
                                          f"inputs, got {value!r}")
        low = _whole(entry.get("low")) if "low" in entry else 0
        high = _whole(entry.get("high"))
        if low is None or high is None:
            return low, high
        smallest, limit = _INT_RANGES[dtype]
        if low >= high:
            self.report((*path, "high"), f"{place}: low ({low}) must be below high ({high}); "
                                         "high is exclusive")
        elif low < smallest or high > limit:
            self.report(path, f"{place}: values in [{low}, {high}) do not fit {dtype}, which "
                              f"holds [{smallest}, {limit})")
        return low, high

    def _tolerance(self, base: NodePath, entry: dict[str, Any], defaults: dict[str, Any],
                   outputs: tuple[str, ...]) -> tuple[Tolerance, dict[str, Tolerance]]:
        """Model over defaults over built-ins, key by key; then each output over the model."""
        shared = _mapping(defaults.get("tolerance"))
        own = _mapping(entry.get("tolerance"))
        tolerance = Tolerance(
            atol=_first_number(own.get("atol"), shared.get("atol"), DEFAULT_TOLERANCE.atol),
            rtol=_first_number(own.get("rtol"), shared.get("rtol"), DEFAULT_TOLERANCE.rtol),
        )
        per_output: dict[str, Tolerance] = {}
        for output, values in _entries(own.get("outputs")):
            if outputs and output not in outputs:
                self.report((*base, "tolerance", "outputs", output),
                            f"{self.place(base)}: tolerance for output {quoted(output)}, which "
                            f"is not among its outputs ({', '.join(dict.fromkeys(outputs))})"
                            f"{did_you_mean(output, outputs)}", at_key=True)
            per_output[output] = Tolerance(
                atol=_first_number(values.get("atol"), tolerance.atol),
                rtol=_first_number(values.get("rtol"), tolerance.rtol),
            )
        return tolerance, per_output

    def _check_unique_models(self) -> None:
        first: dict[str, int] = {}
        for index, entry in enumerate(_items(self.raw.get("models"))):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str):
                continue
            path = ("models", index, "name")
            if name in first:
                self.report(path, f"duplicate model name {quoted(name)} (first on line "
                                  f"{first[name]})")
            else:
                first[name] = self.doc.value_mark(path).line


# Accessors that return nothing for values of the wrong type (the schema pass reported those).

def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _entries(value: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, entry in _mapping(value).items():
        if isinstance(entry, dict):
            yield name, entry


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(item for item in _items(value) if isinstance(item, str))


def _whole(value: Any) -> int | None:
    """An int, or a float that is one (JSON Schema's integer accepts 3.0)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _integer(value: Any) -> int | None:
    return _whole(value)


def _integers(value: Any) -> tuple[int, ...]:
    return tuple(n for n in (_whole(item) for item in _items(value)) if n is not None)


def _sizes(value: Any) -> dict[str, int]:
    sizes = {name: _whole(size) for name, size in _mapping(value).items()}
    return {name: size for name, size in sizes.items() if size is not None}


def _dim(value: Any) -> int | str | None:
    return value if isinstance(value, str) else _whole(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _first_number(*values: Any) -> float:
    for value in values:
        number = _number(value)
        if number is not None:
            return number
    raise AssertionError("the last value is always a number")  # pragma: no cover


def _choice(value: Any, options: tuple[_T, ...], default: _T) -> _T:
    return next((option for option in options if option == value), default)
