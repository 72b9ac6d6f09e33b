from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import onnx_parity
from onnx_parity.errors import SpecError, SpecProblem
from onnx_parity.results import Tolerance
from onnx_parity.spec import (
    DEFAULT_OPSETS,
    DEFAULT_TOLERANCE,
    PREDEFINED_DATASETS,
    PREDEFINED_TARGETS,
    DatasetSpec,
    InputSpec,
    Spec,
    TargetSpec,
    load_spec,
    parse_spec,
    spec_schema,
    yamlnodes,
)
from onnx_parity.spec.tolerance import resolve

COMPLETE = """\
version: 1
defaults:
  opsets: [17, 18]
  exporter: dynamo
  targets: [cpu]
  datasets: [random]
  tolerance: {atol: 1.0e-4, rtol: 1.0e-3}
  timeout: 600
targets:
  cpu: {providers: [CPUExecutionProvider]}
  gpu1:
    providers: [CUDAExecutionProvider, CPUExecutionProvider]
    provider_options: {CUDAExecutionProvider: {device_id: 1}}
    fallback: warn
datasets:
  wide: {kind: random, seed: 1, samples: 3, batch_sizes: [1, 8], distribution: normal}
  uni: {kind: random, distribution: uniform, low: -1, high: 1}
  recorded: {kind: npz, path: data/inputs.npz}
  zoo: {kind: onnx-test-data, path: models/resnet}
models:
  - name: mlp
    torch: models.py:make_mlp
    args: {hidden: 16}
    inputs:
      x: {shape: [batch, 10], dtype: float32}
      tokens: {shape: [batch, 7], dtype: int64, low: 0, high: 50}
    outputs: [logits, hidden]
    exporter: torchscript
    targets: [cpu, gpu1]
    datasets: [wide, uni]
    tolerance:
      atol: 1.0e-5
      outputs: {logits: {rtol: 1.0e-2}, hidden: {atol: 1e-3, rtol: 0}}
  - name: shipped
    onnx: artifacts/model.onnx
    torch: models.py:make_mlp
    timeout: 30
  - name: golden
    onnx: artifacts/model.onnx
    datasets: [zoo, recorded]
"""

# A valid spec to append a broken line to: line 5 is the model's first key after the name.
MINIMAL = """\
version: 1
models:
  - name: m
    torch: pkg.mod:build
    inputs: {x: {shape: [1, 3]}}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with the files COMPLETE refers to."""
    (tmp_path / "models.py").write_text("def make_mlp(hidden): ...\n")
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "inputs.npz").write_bytes(b"npz")
    (tmp_path / "models" / "resnet").mkdir(parents=True)
    return tmp_path


def problems(text: str, folder: Path) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(textwrap.dedent(text), folder / "parity.yaml")
    for problem in caught.value.problems:
        assert problem.file == str(folder / "parity.yaml")
    return [(p.line, p.column, p.message) for p in caught.value.problems]


def one_problem(text: str, folder: Path) -> tuple[int, int, str]:
    found = problems(text, folder)
    assert len(found) == 1, found
    return found[0]


# -- a valid spec ----------------------------------------------------------------------------


def test_complete_spec_resolves_defaults_paths_and_tolerances(repo: Path) -> None:
    spec = parse_spec(COMPLETE, repo / "p.yaml")
    assert spec.path == repo / "p.yaml"
    assert spec.root == repo
    assert spec.version == 1

    assert list(spec.targets) == ["cpu", "cuda", "tensorrt", "gpu1"]
    assert spec.targets["cpu"] == TargetSpec("cpu", ("CPUExecutionProvider",), line=10)
    assert spec.targets["cuda"] == PREDEFINED_TARGETS["cuda"]
    assert spec.targets["gpu1"] == TargetSpec(
        "gpu1",
        ("CUDAExecutionProvider", "CPUExecutionProvider"),
        {"CUDAExecutionProvider": {"device_id": 1}},
        fallback="warn",
        line=11,
    )
    assert list(spec.datasets) == ["random", "wide", "uni", "recorded", "zoo"]
    assert spec.datasets["random"] == PREDEFINED_DATASETS["random"]
    assert spec.datasets["wide"] == DatasetSpec(
        "wide", "random", seed=1, samples=3, batch_sizes=(1, 8), line=16
    )
    assert spec.datasets["uni"] == DatasetSpec(
        "uni",
        "random",
        samples=2,
        batch_sizes=(1,),
        distribution="uniform",
        low=-1.0,
        high=1.0,
        line=17,
    )
    assert spec.datasets["recorded"] == DatasetSpec(
        "recorded", "npz", path=repo / "data" / "inputs.npz", line=18
    )
    assert spec.datasets["zoo"] == DatasetSpec(
        "zoo", "onnx-test-data", path=repo / "models" / "resnet", line=19
    )

    mlp, shipped, golden = spec.models
    assert (mlp.name, mlp.line, mlp.torch, mlp.onnx) == ("mlp", 21, "models.py:make_mlp", None)
    assert mlp.args == {"hidden": 16}
    assert mlp.inputs == (
        InputSpec("x", ("batch", 10), "float32"),
        InputSpec("tokens", ("batch", 7), "int64", low=0, high=50),
    )
    assert mlp.outputs == ("logits", "hidden")
    assert (mlp.opsets, mlp.exporters[0], mlp.targets, mlp.datasets) == (
        (17, 18),
        "torchscript",
        ("cpu", "gpu1"),
        ("wide", "uni"),
    )
    # The model's atol over the defaults' rtol; each output over the model.
    assert resolve(mlp.tolerances, None, None) == Tolerance(atol=1e-5, rtol=1e-3)
    assert mlp.tolerances.output_names() == ("logits", "hidden")
    assert resolve(mlp.tolerances, "cpu", "logits") == Tolerance(atol=1e-5, rtol=1e-2)
    assert resolve(mlp.tolerances, "gpu1", "hidden") == Tolerance(atol=1e-3, rtol=0.0)
    assert resolve(mlp.tolerances, "cpu", "other") == Tolerance(atol=1e-5, rtol=1e-3)
    assert mlp.timeout == 600.0

    assert (shipped.name, shipped.line, shipped.torch) == ("shipped", 34, "models.py:make_mlp")
    assert shipped.onnx == repo / "artifacts" / "model.onnx"
    assert shipped.inputs == ()
    assert (shipped.opsets, shipped.exporters, shipped.datasets) == (
        (17, 18), ("dynamo",), ("random",))
    assert resolve(shipped.tolerances, "cpu", "y") == Tolerance(atol=1e-4, rtol=1e-3)
    assert shipped.timeout == 30.0

    assert (golden.name, golden.line, golden.torch) == ("golden", 38, None)
    assert golden.datasets == ("zoo", "recorded")


def test_builtins_apply_without_defaults(tmp_path: Path) -> None:
    (model,) = parse_spec(MINIMAL, tmp_path / "p.yaml").models
    assert model.opsets == DEFAULT_OPSETS
    assert (model.exporters, model.targets, model.datasets) == (("dynamo",), ("cpu",), ("random",))
    assert resolve(model.tolerances, "cpu", "y") == DEFAULT_TOLERANCE
    assert model.inputs == (InputSpec("x", (1, 3), "float32"),)


def test_memory_limit_from_defaults_or_model(tmp_path: Path) -> None:
    text = "version: 1\ndefaults: {memory_limit: 4096}\n" + MINIMAL.split("\n", 1)[1]
    (model,) = parse_spec(text, tmp_path / "p.yaml").models
    assert model.memory_limit == 4096
    assert parse_spec(MINIMAL, tmp_path / "p.yaml").models[0].memory_limit is None
    line, _, message = one_problem(MINIMAL + "    memory_limit: 12\n", tmp_path)
    assert line == 6 and "memory_limit" in message


def test_load_spec_reads_the_file_and_names_it_as_given(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "parity.yaml").write_text(COMPLETE)
    monkeypatch.chdir(repo)
    spec = load_spec("parity.yaml")
    assert spec.path == repo / "parity.yaml"
    assert spec.models[2].onnx == repo / "artifacts" / "model.onnx"

    (repo / "broken.yaml").write_text("version: 1\nmodels: [}\n")
    with pytest.raises(SpecError) as caught:
        load_spec("broken.yaml")
    assert caught.value.problems[0].file == "broken.yaml"
    assert str(caught.value).startswith("broken.yaml:2:")


def test_users_may_redefine_predefined_targets_and_datasets(tmp_path: Path) -> None:
    spec = parse_spec(
        MINIMAL + "targets:\n  cpu: {providers: [XnnpackExecutionProvider, CPUExecutionProvider]}\n"
        "datasets:\n  random: {kind: random, seed: 7}\n",
        tmp_path / "p.yaml",
    )
    assert spec.targets["cpu"].providers == ("XnnpackExecutionProvider", "CPUExecutionProvider")
    assert spec.datasets["random"] == DatasetSpec(
        "random", "random", seed=7, samples=2, batch_sizes=(1,), line=9
    )


def test_yaml_1_2_floats_are_numbers(tmp_path: Path) -> None:
    text = MINIMAL + "    tolerance: {atol: 1e-5, rtol: 5E-3}\n    timeout: 1e3\n"
    (model,) = parse_spec(text, tmp_path / "p.yaml").models
    assert resolve(model.tolerances, "cpu", None) == Tolerance(atol=1e-5, rtol=5e-3)
    assert model.timeout == 1000.0


def test_models_without_a_tolerance_of_their_own_share_the_specs_layers(tmp_path: Path) -> None:
    text = """\
        version: 1
        defaults: {tolerance: {atol: 0.01}}
        targets: {cpu: {providers: [CPUExecutionProvider], tolerance: {rtol: 0.5}}}
        models:
          - {name: a, torch: pkg.mod:a, inputs: {x: {shape: [1]}}}
          - {name: b, torch: pkg.mod:b, inputs: {x: {shape: [1]}}, tolerance: {atol: 0.2}}
          - {name: c, torch: pkg.mod:c, inputs: {x: {shape: [1]}}}
          - {name: d, torch: pkg.mod:d, inputs: {x: {shape: [1]}}, tolerance: {}}
    """
    a, b, c, d = parse_spec(textwrap.dedent(text), tmp_path / "p.yaml").models
    # One value for the models that add nothing, made once (the cases' tolerances and their
    # texts are then worked out once per run); a model's own layer is its own.
    assert a.tolerances is c.tolerances is d.tolerances
    assert b.tolerances is not a.tolerances
    assert resolve(a.tolerances, "cpu", "y") == Tolerance(atol=0.01, rtol=0.5)
    assert resolve(b.tolerances, "cpu", "y") == Tolerance(atol=0.2, rtol=0.5)
    assert resolve(c.tolerances, None, None) == Tolerance(atol=0.01, rtol=DEFAULT_TOLERANCE.rtol)


def test_extension_keys_hold_anchors_and_merges_apply(tmp_path: Path) -> None:
    text = """\
        version: 1
        x-common: &common {opsets: [17], tolerance: {atol: 0.5}}
        models:
          - name: m
            <<: *common
            opsets: [18]
            torch: pkg.mod:build
            inputs: {x: {shape: [1]}}
    """
    (model,) = parse_spec(textwrap.dedent(text), tmp_path / "p.yaml").models
    assert model.opsets == (18,)  # an explicit key overrides the merged one
    expected = Tolerance(atol=0.5, rtol=DEFAULT_TOLERANCE.rtol)
    assert resolve(model.tolerances, "cpu", None) == expected


def test_named_dims_past_the_batch_take_sizes_from_the_dataset(tmp_path: Path) -> None:
    text = MINIMAL.replace("[1, 3]", "[batch, seq]") + (
        "    datasets: [d]\ndatasets:\n  d: {kind: random, dims: {seq: 12}}\n"
    )
    spec = parse_spec(text, tmp_path / "p.yaml")
    assert spec.datasets["d"].dims == {"seq": 12}


# -- one test per kind of problem -------------------------------------------------------------


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "missing.yaml")
    assert caught.value.problems == (
        SpecProblem(
            str(tmp_path / "missing.yaml"), 1, 1, "cannot read the spec: No such file or directory"
        ),
    )


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_bytes(b"version: 1\nmodels: \xff\n")
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "p.yaml")
    (problem,) = caught.value.problems
    assert (problem.line, problem.column) == (2, 9)
    assert problem.message == "the spec is not UTF-8 text (byte 0xff)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "version: 1\nmodels: [\n  - a\n",
            (
                3,
                3,
                "invalid YAML: while parsing a flow node "
                "(line 3), expected the node content, but found '-'",
            ),
        ),
        ("version: 1\n  models: x\n", (2, 9, "invalid YAML: mapping values are not allowed here")),
        (
            "version: 1\nmodels:\n\t- m\n",
            (
                3,
                1,
                "invalid YAML: while scanning for the next "
                "token, found character '\\t' that cannot start "
                "any token (YAML indents with spaces, not tabs)",
            ),
        ),
        ("a: \x01\n", (1, 4, "invalid YAML: character U+0001 is not allowed in YAML")),
        (
            "a: 1\n---\nb: 2\n",
            (
                2,
                1,
                "invalid YAML: expected a single document in the stream "
                "(line 1), but found another document",
            ),
        ),
    ],
)
def test_bad_yaml_syntax_is_located(
    text: str, expected: tuple[int, int, str], tmp_path: Path
) -> None:
    assert one_problem(text, tmp_path) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the spec is empty; it needs 'version: 1' and a 'models:' list"),
        ("# only a comment\n", "the spec is empty; it needs 'version: 1' and a 'models:' list"),
        ("- 1\n", "the spec must be a mapping with 'version: 1' and 'models:', got a list"),
        (
            "hello\n",
            "the spec must be a mapping with 'version: 1' and 'models:', got a string 'hello'",
        ),
    ],
)
def test_top_level_must_be_a_mapping(text: str, message: str, tmp_path: Path) -> None:
    assert one_problem(text, tmp_path) == (1, 1, message)


def test_missing_and_unsupported_version(tmp_path: Path) -> None:
    body = MINIMAL.replace("version: 1\n", "")
    assert one_problem(body, tmp_path) == (
        1,
        1,
        "missing required key 'version' (add 'version: 1' at the top)",
    )
    assert one_problem("version: 2\n" + body, tmp_path) == (
        1,
        10,
        "version: unsupported spec version 2; this onnx-parity reads version 1",
    )
    assert one_problem("version: '1'\n" + body, tmp_path) == (
        1,
        10,
        "version: unsupported spec version '1'; this onnx-parity reads version 1",
    )


def test_unknown_keys_suggest_the_closest_allowed_key(tmp_path: Path) -> None:
    assert one_problem(MINIMAL + "    tolerence: {atol: 0.1}\n", tmp_path) == (
        6,
        5,
        "unknown key 'tolerence' in model 'm'; did you mean 'tolerance'?",
    )
    assert one_problem(MINIMAL + "    tolerance: {atoll: 0.1}\n", tmp_path) == (
        6,
        17,
        "unknown key 'atoll' in tolerance of model 'm'; did you mean 'atol'?",
    )
    assert one_problem(MINIMAL + "model: 1\n", tmp_path) == (
        6,
        1,
        "unknown key 'model' at the top level; did you mean 'models'?",
    )
    assert one_problem(MINIMAL + "zzz: 1\n", tmp_path) == (
        6,
        1,
        "unknown key 'zzz' at the top level; expected one of: version, defaults, "
        "targets, datasets, models",
    )
    assert problems(MINIMAL.replace("{shape:", "{shap:"), tmp_path) == [
        (5, 17, "missing required key 'shape' in input 'x' of model 'm'"),
        (5, 18, "unknown key 'shap' in input 'x' of model 'm'; did you mean 'shape'?"),
    ]


def test_wrong_types_say_what_was_expected_and_what_came(tmp_path: Path) -> None:
    assert one_problem(MINIMAL + "    opsets: eighteen\n", tmp_path) == (
        6,
        13,
        "model 'm': opsets: expected a non-empty list of integers from 7 to 25, got a "
        "string 'eighteen'",
    )
    assert one_problem(MINIMAL + "    opsets: [17, eighteen]\n", tmp_path) == (
        6,
        18,
        "model 'm': opsets: expected a list of integers from 7 to 25, but item 2 is a "
        "string 'eighteen'",
    )
    assert one_problem(MINIMAL + "    timeout: '10'\n", tmp_path) == (
        6,
        14,
        "model 'm': timeout: expected a positive number, got a string '10'",
    )
    assert one_problem(MINIMAL + "    args: [1]\n", tmp_path) == (
        6,
        11,
        "model 'm': args: expected a mapping, got a list",
    )
    assert one_problem(MINIMAL.replace("name: m", "name: on"), tmp_path) == (
        3,
        11,
        "model #1: name: expected a name, got a boolean on (quote it if you meant 'on')",
    )


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        (
            "    exporter: dinamo\n",
            15,
            "model 'm': exporter: expected one of 'dynamo', 'torchscript', got 'dinamo'; did you "
            "mean 'dynamo'?",
        ),
        (
            "datasets: {d: {kind: randon}}\n",
            22,
            "dataset 'd': kind: expected one of 'random', 'npz', 'onnx-test-data', got 'randon'; "
            "did you mean 'random'?",
        ),
        (
            "datasets: {d: {kind: random, distribution: unifrom}}\n",
            44,
            "dataset 'd': distribution: expected one of 'normal', 'uniform', got 'unifrom'; did "
            "you mean 'uniform'?",
        ),
        (
            "targets: {t: {providers: [CPUExecutionProvider], fallback: warning}}\n",
            60,
            "target 't': fallback: expected one of 'fail', 'warn', 'allow', got 'warning'; did "
            "you mean 'warn'?",
        ),
    ],
)
def test_bad_enum_values_suggest_the_closest(
    line: str, column: int, message: str, tmp_path: Path
) -> None:
    assert one_problem(MINIMAL + line, tmp_path) == (6, column, message)


def test_fallback_keys_resolve_onto_the_target(tmp_path: Path) -> None:
    spec = parse_spec(MINIMAL + textwrap.dedent("""\
        targets:
          gpu:
            providers: [CUDAExecutionProvider]
            allow_cpu_ops: [Shape, Gather]
            disable_cpu_ep_fallback: true
        """), tmp_path / "parity.yaml")
    gpu = spec.targets["gpu"]
    assert gpu.allow_cpu_ops == ("Shape", "Gather") and gpu.disable_cpu_ep_fallback
    cuda = spec.targets["cuda"]
    assert cuda.allow_cpu_ops == () and not cuda.disable_cpu_ep_fallback


def test_fallback_keys_that_cannot_work_are_located_errors(tmp_path: Path) -> None:
    found = problems(MINIMAL + textwrap.dedent("""\
        targets:
          both:
            providers: [CUDAExecutionProvider, CPUExecutionProvider]
            disable_cpu_ep_fallback: true
          cpu1: {providers: [CPUExecutionProvider], allow_cpu_ops: [Shape]}
          typo: {providers: [CUDAExecutionProvider], allow_cpu_ops: [shape op]}
        """), tmp_path)
    assert found == [
        (9, 5, "target 'both': disable_cpu_ep_fallback: true needs a providers list without "
                "CPUExecutionProvider (ONNX Runtime refuses a session that lists the CPU provider "
                "and disables falling back to it); remove CPUExecutionProvider from its providers"),
        (10, 45, "target 'cpu1': 'allow_cpu_ops' applies only to targets whose first provider is "
                "not CPUExecutionProvider; on this target every node runs on the CPU anyway"),
        (11, 62, "target 'typo': allow_cpu_ops: expected a list of ONNX op types such as Shape, "
                 "but item 1 is 'shape op'"),
    ]


def test_bad_dtype_suggests_the_closest(tmp_path: Path) -> None:
    line, column, message = one_problem(
        MINIMAL.replace("[1, 3]}", "[1, 3], dtype: flaot32}"), tmp_path
    )
    assert (line, column) == (5, 40)
    assert message.startswith("input 'x' of model 'm': dtype: expected one of 'float32', ")
    assert message.endswith(", got 'flaot32'; did you mean 'float32'?")


def test_undefined_targets_and_datasets(tmp_path: Path) -> None:
    text = (
        MINIMAL
        + "    datasets: [random, wid]\n"
        + (
            "defaults: {targets: [gpu]}\n"
            "datasets: {wide: {kind: random}}\n"
            "targets: {gpu1: {providers: [CUDAExecutionProvider]}}\n"
        )
    )
    assert problems(text, tmp_path) == [
        (6, 24, "model 'm': undefined dataset 'wid'; did you mean 'wide'?"),
        (7, 22, "defaults: undefined target 'gpu'; did you mean 'gpu1'?"),
    ]
    assert one_problem(MINIMAL + "    targets: [tpu9000]\n", tmp_path) == (
        6,
        15,
        "model 'm': undefined target 'tpu9000'; defined targets: cpu, cuda, tensorrt",
    )


def test_missing_files_name_the_resolved_path(tmp_path: Path) -> None:
    text = """\
        version: 1
        datasets:
          rec: {kind: npz, path: data/x.npz}
          zoo: {kind: onnx-test-data, path: zoo}
        models:
          - name: a
            torch: nets/models.py:build
            inputs: {x: {shape: [1]}}
          - name: b
            onnx: out/b.onnx
            datasets: [rec, zoo]
    """
    assert problems(text, tmp_path) == [
        (3, 26, f"dataset 'rec': npz file not found: {tmp_path / 'data' / 'x.npz'}"),
        (4, 37, f"dataset 'zoo': onnx-test-data folder not found: {tmp_path / 'zoo'}"),
        (7, 12, f"model 'a': torch file not found: {tmp_path / 'nets' / 'models.py'}"),
        (10, 11, f"model 'b': onnx file not found: {tmp_path / 'out' / 'b.onnx'}"),
    ]
    (tmp_path / "zoo").write_text("")
    assert (
        4,
        37,
        f"dataset 'zoo': onnx-test-data folder {tmp_path / 'zoo'} is a file, not a folder",
    ) in problems(text, tmp_path)


def test_a_model_needs_torch_or_onnx_and_an_exported_one_needs_inputs(tmp_path: Path) -> None:
    assert one_problem("version: 1\nmodels:\n  - name: m\n    outputs: [y]\n", tmp_path) == (
        3,
        5,
        "model 'm' has neither 'torch' nor 'onnx': give the PyTorch model to export "
        "('torch'), an ONNX file ('onnx'), or both",
    )
    assert one_problem("version: 1\nmodels:\n  - name: m\n    torch: pkg.mod:f\n", tmp_path) == (
        3,
        5,
        "model 'm' is exported from 'torch', and the export needs 'inputs': the shape "
        "and dtype of each forward() argument, e.g. inputs: {x: {shape: [batch, 10], "
        "dtype: float32}}",
    )


def test_keys_that_do_not_apply_to_an_onnx_model(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"")
    text = """\
        version: 1
        datasets: {rec: {kind: onnx-test-data, path: .}}
        models:
          - name: m
            onnx: m.onnx
            opsets: [17]
            args: {a: 1}
            datasets: [rec, random]
    """
    assert problems(text, tmp_path) == [
        (
            6,
            5,
            "model 'm': 'opsets' applies only to models that are exported ('torch' without "
            "'onnx'); this model's ONNX file is used as it is",
        ),
        (
            7,
            5,
            "model 'm': 'args' are passed to the 'torch' callable, but this model has no 'torch'",
        ),
        (
            8,
            21,
            "model 'm' has no 'torch', so its expected outputs must come from its data, but "
            "dataset 'random' is of kind random; use an npz or onnx-test-data dataset with "
            "reference outputs, or add 'torch'",
        ),
    ]


def test_duplicate_model_names(tmp_path: Path) -> None:
    text = MINIMAL + "  - name: m\n    torch: pkg.mod:other\n    inputs: {y: {shape: [2]}}\n"
    assert one_problem(text, tmp_path) == (6, 11, "duplicate model name 'm' (first on line 3)")


@pytest.mark.parametrize(
    ("old", "new", "column", "message"),
    [
        ("name: m", "name: my model", 11, "model 'my model': name: 'my model' is not a valid name"),
        ("{x: {", "{x y: {", 14, "input name 'x y' is not a valid name"),
        (
            "inputs:",
            "outputs: [ok, -bad]\n    inputs:",
            19,
            "model 'm': outputs: '-bad' is not a valid name",
        ),
    ],
)
def test_names_must_fit_in_case_ids(
    old: str, new: str, column: int, message: str, tmp_path: Path
) -> None:
    _, found_column, found = one_problem(MINIMAL.replace(old, new), tmp_path)
    assert found_column == column
    assert found == message + (
        ": use letters, digits, '_', '.' and '-', not starting with '.' or '-', because names "
        "end up in case ids such as mlp[opset17-cpu-wide-b8]"
    )


def test_target_and_dataset_names_are_checked_at_their_keys(tmp_path: Path) -> None:
    text = (
        MINIMAL
        + "targets:\n  gpu one: {providers: [CPUExecutionProvider]}\n"
        + ("datasets:\n  .hidden: {kind: random}\n")
    )
    found = problems(text, tmp_path)
    assert [(line, column, message.split(":")[0]) for line, column, message in found] == [
        (7, 3, "target name 'gpu one' is not a valid name"),
        (9, 3, "dataset name '.hidden' is not a valid name"),
    ]


def test_shape_dims_are_positive_sizes_or_identifiers(tmp_path: Path) -> None:
    assert problems(MINIMAL.replace("[1, 3]", "[0, 2.5, 1x, 4]"), tmp_path) == [
        (
            5,
            26,
            "input 'x' of model 'm': shape: expected a list of positive integers or "
            "dimension names, but item 1 is an integer 0",
        ),
        (
            5,
            29,
            "input 'x' of model 'm': shape: expected a list of positive integers or "
            "dimension names, but item 2 is a number 2.5",
        ),
        (
            5,
            34,
            "input 'x' of model 'm': shape: expected a list of positive integers or "
            "dimension names, but item 3 is a string '1x'",
        ),
    ]


def test_integer_inputs_need_a_valid_range(tmp_path: Path) -> None:
    def inputs(text: str) -> str:
        return MINIMAL.replace("{x: {shape: [1, 3]}}", text)

    assert one_problem(inputs("{t: {shape: [1], dtype: int64}}"), tmp_path) == (
        5,
        17,
        "input 't' of model 'm': an integer input (int64) needs 'high', the exclusive "
        "upper bound of its random values (low defaults to 0), e.g. the vocabulary size",
    )
    assert one_problem(inputs("{t: {shape: [1], dtype: int32, low: 5, high: 5}}"), tmp_path) == (
        5,
        58,
        "input 't' of model 'm': low (5) must be below high (5); high is exclusive",
    )
    assert one_problem(inputs("{t: {shape: [1], dtype: uint8, high: 300}}"), tmp_path) == (
        5,
        17,
        "input 't' of model 'm': values in [0, 300) do not fit uint8, which holds [0, 256)",
    )
    assert one_problem(inputs("{t: {shape: [1], dtype: int8, high: 2.5}}"), tmp_path) == (
        5,
        49,
        "input 't' of model 'm': high: expected an integer for int8 inputs, got 2.5",
    )
    (model,) = parse_spec(
        inputs("{t: {shape: [1], dtype: int8, high: 4.0}}"), tmp_path / "p.yaml"
    ).models
    assert model.inputs == (InputSpec("t", (1,), "int8", low=0, high=4),)


def test_bool_and_float_input_ranges(tmp_path: Path) -> None:
    def inputs(text: str) -> str:
        return MINIMAL.replace("{x: {shape: [1, 3]}}", text)

    assert one_problem(inputs("{b: {shape: [1], dtype: bool, high: 1}}"), tmp_path) == (
        5,
        43,
        "input 'b' of model 'm': a bool input takes no 'high'",
    )
    assert one_problem(inputs("{f: {shape: [1], low: 1, high: -1}}"), tmp_path) == (
        5,
        44,
        "input 'f' of model 'm': low (1) must be below high (-1)",
    )
    # A float range overrides a uniform dataset's range, so it is allowed.
    (model,) = parse_spec(inputs("{f: {shape: [1], low: -2, high: 2}}"), tmp_path / "p.yaml").models
    assert model.inputs == (InputSpec("f", (1,), "float32", low=-2.0, high=2.0),)


def test_an_input_may_be_just_its_shape(tmp_path: Path) -> None:
    """`x: [batch, 10]`, the key a new user guesses, is `x: {shape: [batch, 10]}`."""
    def inputs(text: str) -> str:
        return MINIMAL.replace("{x: {shape: [1, 3]}}", text)

    (model,) = parse_spec(inputs("{x: [batch, 3], y: {shape: [1], dtype: int64, high: 9}}"),
                          tmp_path / "p.yaml").models
    assert model.inputs == (InputSpec("x", ("batch", 3)),
                            InputSpec("y", (1,), "int64", low=0, high=9))
    assert one_problem(inputs("{x: [batch, 0]}"), tmp_path) == (
        5, 25, "input 'x' of model 'm': expected a list of positive integers or dimension names, "
        "but item 2 is an integer 0")
    assert one_problem(inputs("{x: [batch, seq]}"), tmp_path)[2] == (
        "input 'x' of model 'm': random data needs a size for the named dimension 'seq' at "
        "axis 1: set dims: {seq: N} on dataset 'random'")


def test_tolerances(tmp_path: Path) -> None:
    assert one_problem(MINIMAL + "    tolerance: {atol: -1.0e-3}\n", tmp_path) == (
        6,
        23,
        "model 'm': tolerance.atol: expected a number >= 0, got -0.001",
    )
    assert one_problem(MINIMAL + "    tolerance: {rtol: .nan}\n", tmp_path) == (
        6,
        23,
        "model 'm': tolerance.rtol: expected a finite number, got .nan",
    )
    text = MINIMAL + "    outputs: [logits]\n    tolerance: {outputs: {logit: {atol: 1}}}\n"
    assert one_problem(text, tmp_path) == (
        7,
        27,
        "model 'm': tolerance for output 'logit', which is not among its outputs "
        "(logits); did you mean 'logits'?",
    )


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        (
            "    opsets: [17, 30]\n",
            18,
            "model 'm': opsets: expected a list of integers from 7 to 25, but item 2 is 30",
        ),
        (
            "    opsets: []\n",
            13,
            "model 'm': opsets: expected a non-empty list of integers from 7 to 25, got an empty "
            "list",
        ),
        ("    opsets: [17, 17]\n", 18, "model 'm': opsets: 17 is listed twice (first as item 1)"),
        ("    timeout: 0\n", 14, "model 'm': timeout: expected a positive number, got 0"),
        (
            "datasets: {d: {kind: random, samples: 0}}\n",
            39,
            "dataset 'd': samples: expected a positive integer, got 0",
        ),
        (
            "datasets: {d: {kind: npz, path: x, batch_sizes: [4, -1]}}\n",
            53,
            "dataset 'd': batch_sizes: expected a list of positive integers, but item 2 is -1",
        ),
    ],
)
def test_numeric_bounds(line: str, column: int, message: str, tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    assert one_problem(MINIMAL + line, tmp_path) == (6, column, message)


def test_duplicate_yaml_keys(tmp_path: Path) -> None:
    assert one_problem(MINIMAL + "    inputs: {y: {shape: [1]}}\n", tmp_path) == (
        6,
        5,
        "duplicate key 'inputs' (first on line 5)",
    )


def test_keys_must_be_text(tmp_path: Path) -> None:
    assert one_problem(MINIMAL.replace("{x: {", "{on: {"), tmp_path) == (
        5,
        14,
        "a key must be text, but YAML reads 'on' as a boolean; quote it: 'on'",
    )


def test_torch_reference_format(tmp_path: Path) -> None:
    assert one_problem(MINIMAL.replace("pkg.mod:build", "models.py"), tmp_path) == (
        4,
        12,
        "model 'm': torch: expected 'path/to/file.py:callable' or "
        "'package.module:callable', got 'models.py'",
    )
    (model,) = parse_spec(
        MINIMAL.replace("pkg.mod:build", "pkg.mod:Net.create"), tmp_path / "p.yaml"
    ).models
    assert model.torch == "pkg.mod:Net.create"


def test_dataset_keys_depend_on_the_kind(tmp_path: Path) -> None:
    text = (
        MINIMAL
        + "datasets:\n  rec: {kind: npz, distribution: normal}\n"
        + ("  r: {kind: random, sede: 3}\n")
    )
    assert problems(text, tmp_path) == [
        (7, 8, "missing required key 'path' in dataset 'rec'"),
        (
            7,
            20,
            "key 'distribution' does not apply to dataset 'rec', which is of kind 'npz' "
            "(its keys: kind, path, samples, batch_sizes)",
        ),
        (8, 21, "unknown key 'sede' in dataset 'r'; did you mean 'seed'?"),
    ]
    text = MINIMAL + "datasets:\n  r: {kind: random, low: -1}\n"
    assert one_problem(text, tmp_path) == (
        7,
        21,
        "dataset 'r': 'low' applies only to distribution: uniform, and this dataset is normal",
    )


def test_named_dims_without_a_size_for_random_data(tmp_path: Path) -> None:
    assert one_problem(MINIMAL.replace("[1, 3]", "[batch, seq]"), tmp_path) == (
        5,
        33,
        "input 'x' of model 'm': random data needs a size for the named dimension 'seq' "
        "at axis 1: set dims: {seq: N} on dataset 'random'",
    )


def test_unknown_providers_close_to_a_known_one(tmp_path: Path) -> None:
    text = (
        MINIMAL
        + "targets:\n  t:\n    providers: [CUDAExecutionProvder, MyNewExecutionProvider]\n"
        + ("    provider_options: {TensorrtExecutionProvider: {}}\n")
    )
    assert problems(text, tmp_path) == [
        (
            8,
            17,
            "target 't': unknown execution provider 'CUDAExecutionProvder'; did you mean "
            "'CUDAExecutionProvider'?",
        ),
        (
            9,
            24,
            "target 't': provider_options for 'TensorrtExecutionProvider', which is not "
            "among its providers (CUDAExecutionProvder, MyNewExecutionProvider)",
        ),
    ]


def test_unsupported_tags(tmp_path: Path) -> None:
    assert one_problem(MINIMAL + "    args: {when: !!timestamp 2024-01-01}\n", tmp_path) == (
        6,
        18,
        "unsupported YAML tag 'tag:yaml.org,2002:timestamp'",
    )


def test_every_problem_is_reported_at_once_in_file_order(tmp_path: Path) -> None:
    text = """\
        version: 1
        defaults:
          exporter: onnx
          opset: [18]
        models:
          - name: a
            torch: pkg.mod:build
          - name: a
            onnx: missing.onnx
            datasets: [zoo]
    """
    found = problems(text, tmp_path)
    assert [(line, column) for line, column, _ in found] == [
        (3, 13),
        (4, 3),
        (6, 5),
        (8, 11),
        (9, 11),
        (10, 16),
    ]
    assert [message.split(";")[0].split(":")[0] for _, _, message in found] == [
        "defaults",
        "unknown key 'opset' in defaults",
        "model 'a' is exported from 'torch', and the export needs 'inputs'",
        "duplicate model name 'a' (first on line 6)",
        "model 'a'",
        "model 'a'",
    ]


# -- YAML safety ------------------------------------------------------------------------------


def test_an_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    lines = ["version: 1", 'x-a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        lines.append(f"x-{level}: &{level} [{', '.join([f'*{previous}'] * 8)}]")
    start = time.perf_counter()
    line, column, message = one_problem("\n".join(lines) + "\n", tmp_path)
    assert time.perf_counter() - start < 1.0
    assert (line, column) == (7, 6)  # x-f, 8**6 scalars: the first anchor past the bound
    assert message == (
        "this value expands to more than 100000 YAML nodes through aliases; refusing to expand it"
    )


def test_the_node_bound_holds_with_and_without_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walked once where it holds; measured, to say where, where it does not."""
    monkeypatch.setattr(yamlnodes, "MAX_NODES", 50)
    many = "version: 1\nx-a: [" + ", ".join(["1"] * 60) + "]\n"  # no alias at all
    with pytest.raises(yamlnodes.UnusableYaml) as caught:
        yamlnodes.load_located(many)
    assert [(p.line, p.column) for p in caught.value.problems] == [(2, 6)]
    assert "more than 50 YAML nodes" in caught.value.problems[0].message
    few = "x-a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nx-b: [*a, *a, *a, *a]\n"  # 49 nodes expanded
    assert yamlnodes.load_located(few).value["x-b"] == [[1, 2, 3, 4, 5, 6, 7, 8]] * 4
    with pytest.raises(yamlnodes.UnusableYaml) as caught:
        yamlnodes.load_located(few.replace("*a]", "*a, *a]"))  # 58 expanded, 20 written
    # No one value alone passes the bound, so the whole document is what is refused.
    assert [(p.line, p.column) for p in caught.value.problems] == [(1, 1)]


def test_recursive_aliases_and_deep_nesting_are_refused(tmp_path: Path) -> None:
    assert one_problem("version: 1\nx-a: &a [1, *a]\n", tmp_path) == (
        2,
        6,
        "recursive alias: this anchored value contains an alias to itself",
    )
    assert one_problem("x-deep: " + "[" * 70 + "]" * 70, tmp_path) == (
        1,
        72,
        "the YAML is nested more than 64 levels deep here",
    )
    # So deep that PyYAML's own recursion gives up, where libyaml does not compose it: then
    # there is no location to give.
    line, column, message = one_problem("[" * 600 + "]" * 600, tmp_path)
    assert message.startswith("the YAML is nested more than 64 levels deep")
    assert (line, column) == ((1, 65) if message.endswith(" here") else (1, 1))


# -- the schema -------------------------------------------------------------------------------


def test_the_schema_is_valid_and_accepts_the_complete_example() -> None:
    schema = spec_schema()
    Draft202012Validator.check_schema(schema)
    assert json.loads(json.dumps(schema)) == schema  # publishable as it is
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert Draft202012Validator(schema).is_valid(yaml.safe_load(COMPLETE.replace("1e-3", "0.001")))
    model = schema["$defs"]["model"]["properties"]
    assert model["opsets"]["default"] == list(DEFAULT_OPSETS)
    assert model["tolerance"] == {"$ref": "#/$defs/model_tolerance"}
    assert all("title" in prop or "$ref" in prop for prop in model.values())
    assert spec_schema() == schema and spec_schema() is not schema


# -- robustness -------------------------------------------------------------------------------

_KEYS = [
    "version",
    "defaults",
    "targets",
    "datasets",
    "models",
    "name",
    "torch",
    "onnx",
    "args",
    "inputs",
    "outputs",
    "opsets",
    "exporter",
    "tolerance",
    "atol",
    "rtol",
    "timeout",
    "kind",
    "seed",
    "samples",
    "batch_sizes",
    "distribution",
    "low",
    "high",
    "path",
    "dims",
    "providers",
    "provider_options",
    "fallback",
    "shape",
    "dtype",
    "cpu",
    "random",
    "x",
    "logits",
    "x-anchor",
]
_WORDS = [
    "dynamo",
    "torchscript",
    "random",
    "npz",
    "onnx-test-data",
    "float32",
    "int64",
    "bool",
    "cpu",
    "cuda",
    "m.py:f",
    "pkg.mod:f",
    "batch",
    "uniform",
    "normal",
    "fail",
    "x",
    "logits",
    "CPUExecutionProvider",
    "",
]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 30),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_WORDS),
    st.text(max_size=6),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=20,
)


def _section(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), _values, max_size=len(keys))


_model_like = st.fixed_dictionaries(
    {"name": st.sampled_from(["m", "m", "n", "bad name"])},
    optional={key: _values | _section(_KEYS) for key in _KEYS[6:17]},
)
_spec_like = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 1, 1, 2]), "models": st.lists(_model_like, max_size=3)},
    optional={
        "defaults": _section(_KEYS[11:17]),
        "targets": st.dictionaries(
            st.sampled_from(["cpu", "t", "bad t"]), _section(_KEYS[26:29]) | _values, max_size=2
        ),
        "datasets": st.dictionaries(
            st.sampled_from(["random", "d", "zoo"]), _section(_KEYS[17:26]) | _values, max_size=2
        ),
        "x-anchor": _values,
    },
)
# Mostly valid values, so that the fuzzing also reaches resolution, not only the schema pass.
_FLOATS = st.floats(-2, 1000, allow_nan=False)
_PLAUSIBLE_MODEL = {
    "torch": st.sampled_from(["pkg.mod:f", "pkg.mod:f", "models.py:f", "bad"]),
    "onnx": st.sampled_from(["m.onnx", ""]),
    "args": st.dictionaries(st.text(max_size=3), _scalars, max_size=2),
    "inputs": st.dictionaries(
        st.sampled_from(["x", "tokens", "mask"]),
        st.fixed_dictionaries(
            {"shape": st.lists(st.sampled_from([1, 3, "batch", "seq", 0]), max_size=3)},
            optional={
                "dtype": st.sampled_from(["float32", "int64", "uint8", "bool"]),
                "low": st.integers(-2, 5) | _FLOATS,
                "high": st.integers(-1, 300),
            },
        ),
        max_size=3,
    ),
    "outputs": st.lists(st.sampled_from(["y", "z"]), max_size=2),
    "opsets": st.lists(st.integers(6, 26), max_size=3),
    "exporter": st.sampled_from(["dynamo", "torchscript", "onnx"]),
    "targets": st.lists(st.sampled_from(["cpu", "cuda", "t", "gpu"]), max_size=2),
    "datasets": st.lists(st.sampled_from(["random", "d", "zoo"]), max_size=2),
    "tolerance": st.fixed_dictionaries(
        {},
        optional={
            "atol": _FLOATS,
            "rtol": _FLOATS,
            "outputs": st.dictionaries(
                st.sampled_from(["y", "z"]),
                st.fixed_dictionaries({}, optional={"atol": _FLOATS}),
                max_size=2,
            ),
        },
    ),
    "timeout": _FLOATS | st.integers(0, 100),
}
_plausible_spec = st.fixed_dictionaries(
    {
        "version": st.just(1),
        "models": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["m", "n", "o"])}, optional=_PLAUSIBLE_MODEL
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda model: model["name"],
        ),
    },
    optional={
        "defaults": st.fixed_dictionaries(
            {},
            optional={
                key: _PLAUSIBLE_MODEL[key]
                for key in ("opsets", "exporter", "targets", "datasets", "timeout")
            },
        ),
        "targets": st.dictionaries(
            st.sampled_from(["cpu", "t"]),
            st.fixed_dictionaries(
                {
                    "providers": st.lists(
                        st.sampled_from(
                            [
                                "CPUExecutionProvider",
                                "CUDAExecutionProvider",
                                "CUDAExecutionProvder",
                            ]
                        ),
                        max_size=2,
                        unique=True,
                    )
                },
                optional={"fallback": st.sampled_from(["fail", "allow", "nope"])},
            ),
            max_size=2,
        ),
        "datasets": st.dictionaries(
            st.sampled_from(["random", "d", "zoo"]),
            st.fixed_dictionaries(
                {"kind": st.sampled_from(["random", "random", "npz", "onnx-test-data"])},
                optional={
                    "seed": st.integers(-1, 3),
                    "samples": st.integers(0, 3),
                    "batch_sizes": st.lists(st.integers(0, 8), max_size=2),
                    "distribution": st.sampled_from(["normal", "uniform"]),
                    "low": _FLOATS,
                    "high": _FLOATS,
                    "path": st.sampled_from([".", "x.npz"]),
                    "dims": st.dictionaries(st.sampled_from(["seq", "9"]), st.integers(0, 4)),
                },
            ),
            max_size=2,
        ),
    },
)
_texts = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="-:{}[]&*!|>'\"#,? \n\tabnx01.e<", max_size=120),
    _spec_like.map(lambda spec: yaml.safe_dump(spec, sort_keys=False)),
    _values.map(yaml.safe_dump),
    _plausible_spec.map(lambda spec: yaml.safe_dump(spec, sort_keys=False)),
)
_FUZZ_SPEC = Path(tempfile.gettempdir()) / "onnx-parity-fuzz" / "parity.yaml"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts)
def test_any_text_loads_or_raises_spec_error(text: str) -> None:
    try:
        spec = parse_spec(text, _FUZZ_SPEC)
    except SpecError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.line >= 1 and problem.column >= 1 and problem.message
    else:
        assert isinstance(spec, Spec)


def test_importing_the_spec_loader_stays_light() -> None:
    heavy = ["torch", "onnx", "onnxruntime", "numpy", "jsonschema"]
    code = (
        "import sys, onnx_parity.spec\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    source = str(Path(onnx_parity.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "[]"


def test_several_exporters_under_the_one_key_say_the_key_that_takes_them(repo: Path) -> None:
    line, column, message = one_problem("""
        version: 1
        models:
          - name: m
            torch: models.py:make
            inputs: {x: {shape: [batch, 4]}}
            exporter: [torchscript, dynamo]
        """, repo)
    assert (line, column) == (7, 15)
    assert message.endswith("got a list; for several, write exporters: [torchscript, dynamo]"
                            " instead of exporter")


def test_reading_leaves_the_cycle_collector_as_it_found_it(tmp_path: Path) -> None:
    enabled = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            parse_spec(MINIMAL, tmp_path / "p.yaml")
            assert gc.isenabled() is state
            with pytest.raises(SpecError):
                parse_spec("version: 2\n", tmp_path / "p.yaml")
            assert gc.isenabled() is state
    finally:
        (gc.enable if enabled else gc.disable)()
