"""The export cache (`run --cache DIR`): a second run of an unchanged model takes its exports and
variants from the cache and reaches the same verdict; a changed weight, a changed line of
forward(), a changed factory argument or another torch version misses; after any change (a config
file the factory reads, a helper forward() imports, entries swapped, cut short, edited or
symlinked) the cached verdict is the fresh one; writers racing on one key leave a whole entry; the
size cap evicts the least recently used entries."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import ROOT, by_id
from onnx_parity.plan.cases import plan
from onnx_parity.prepare import cachekey
from onnx_parity.prepare.cache import Entry, ExportCache
from onnx_parity.results import CaseResult
from onnx_parity.run.flow import run_case
from onnx_parity.run.memo import ModelMemo
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.spec import load_spec


@pytest.fixture(autouse=True)
def bytecode_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python as users run it: a module's first import compiles its source and writes its
    bytecode, and the next run's import reads the bytecode alone; the key must be the same."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


NET = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.a = nn.Linear(4, hidden)
        self.b = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def make(hidden=8):
    torch.manual_seed(0)
    net = Net(hidden)
    weights = __file__.replace("net.py", "weights.pt")
    try:
        net.load_state_dict(torch.load(weights))
    except FileNotFoundError:
        pass
    return net
'''

SPEC = """
version: 1
models:
  - name: net
    torch: net.py:make
    args: {hidden: HIDDEN}
    inputs: {x: [batch, 4]}
    opsets: [17]
    exporter: EXPORTER
    precisions: [fp32, fp16]
    datasets: [r]
datasets:
  r: {kind: random, samples: 1, batch_sizes: [2]}
"""


def _spec(folder: Path, hidden: int = 8, exporter: str = "torchscript",
          precisions: str = "[fp32, fp16]", opsets: str = "[17]") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "net.py").exists():
        (folder / "net.py").write_text(NET)
    text = (SPEC.replace("HIDDEN", str(hidden)).replace("EXPORTER", exporter)
            .replace("[fp32, fp16]", precisions).replace("[17]", opsets))
    path = folder / "parity.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _check(spec_path: Path, cache: ExportCache, work: Path) -> list[CaseResult]:
    """The spec's cases through one memo, as a worker runs them, in this process."""
    spec = load_spec(spec_path)
    cases = plan(spec)
    memo = ModelMemo(WorkerTask(spec.root, cases[0].model, cases, work, cache=cache))
    return [run_case(memo, case) for case in cases]


def _export_cache(results: list[CaseResult]) -> list[str]:
    return [(r.details.cache or {}).get("export", "none") for r in results]


@pytest.fixture
def cached_once(tmp_path: Path) -> tuple[Path, ExportCache]:
    """A spec whose model's exports are in the cache."""
    spec = _spec(tmp_path / "repo")
    cache = ExportCache(tmp_path / "cache")
    first = _check(spec, cache, tmp_path / "work0")
    assert [r.status for r in first] == ["passed"] * 2
    assert _export_cache(first) == ["miss", "miss"]
    return spec, cache


def test_a_second_run_of_the_cli_takes_the_exports_from_the_cache_with_the_same_verdict(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    spec = _spec(tmp_path / "repo", exporter="torchscript", precisions="[fp32, int8-dynamic]")
    cache = tmp_path / "cache"
    code, _, _, cold = run_cli(spec, "--cache", str(cache))
    code_again, _, _, warm = run_cli(spec, "--cache", str(cache))
    assert code == code_again == 0
    for case_id, case in by_id(warm).items():
        before = by_id(cold)[case_id]
        assert case["status"] == before["status"] == "passed"
        assert case["outputs"] == before["outputs"]  # the same file, so the same numbers
        assert "export: cached" in case["notes"]
        assert case["details"]["cache"]["export"] == "hit"
        assert before["details"]["cache"]["export"] == "miss"
    variant = by_id(warm)["net[opset17-int8-dynamic-cpu-r-b2]"]
    assert variant["details"]["cache"] == {"export": "hit", "int8-dynamic variant": "hit"}
    assert "int8-dynamic variant: cached" in variant["notes"]
    assert len(list(cache.glob("*.entry"))) == 2  # the export and its variant


def test_a_hit_needs_no_export_at_all(cached_once: tuple[Path, ExportCache], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec, cache = cached_once

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("exported although the cache held the export")

    monkeypatch.setattr(torch.onnx, "export", refused)
    results = _check(spec, cache, tmp_path / "work1")
    assert [r.status for r in results] == ["passed"] * 2, [r.message for r in results]
    assert _export_cache(results) == ["hit", "hit"]
    assert results[1].details.cache == {"export": "hit", "fp16 variant": "hit"}


def test_a_changed_weight_misses(cached_once: tuple[Path, ExportCache], tmp_path: Path) -> None:
    spec, cache = cached_once
    weights = {k: v.clone() for k, v in _module(spec).state_dict().items()}
    weights["a.weight"][0, 0] += 0.25  # one weight of 40
    torch.save(weights, spec.parent / "weights.pt")
    results = _check(spec, cache, tmp_path / "work1")
    assert _export_cache(results) == ["miss", "miss"]
    assert [r.status for r in results] == ["passed"] * 2  # the new file was checked


def test_a_changed_line_of_forward_misses(cached_once: tuple[Path, ExportCache],
                                          tmp_path: Path) -> None:
    spec, cache = cached_once
    model = spec.parent / "net.py"
    model.write_text(model.read_text().replace("torch.relu(self.a(x))",
                                               "torch.nn.functional.gelu(self.a(x))"))
    results = _check(spec, cache, tmp_path / "work1")
    assert _export_cache(results) == ["miss", "miss"]
    assert [r.status for r in results] == ["passed"] * 2


def test_a_changed_factory_argument_misses(cached_once: tuple[Path, ExportCache],
                                           tmp_path: Path) -> None:
    spec, cache = cached_once
    results = _check(_spec(spec.parent, hidden=6), cache, tmp_path / "work1")
    assert _export_cache(results) == ["miss", "miss"]


def test_another_torch_version_misses(cached_once: tuple[Path, ExportCache], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec, cache = cached_once
    real = cachekey.versions
    monkeypatch.setattr(cachekey, "versions", lambda: {**real(), "torch": "99.0.0+cpu"})
    results = _check(spec, cache, tmp_path / "work1")
    assert _export_cache(results) == ["miss", "miss"]
    # the variant's key reads the versions too (its converter is onnxruntime's)
    assert results[1].details.cache == {"export": "miss", "fp16 variant": "miss"}


def test_a_dynamo_model_whose_opsets_all_hit_runs_no_torch_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path / "repo", exporter="dynamo", precisions="[fp32]", opsets="[17, 18]")
    cache = ExportCache(tmp_path / "cache")
    assert _export_cache(_check(spec, cache, tmp_path / "work0")) == ["miss", "miss"]
    calls: list[int] = []
    original = torch.export.export

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counted)
    results = _check(spec, cache, tmp_path / "work1")
    assert _export_cache(results) == ["hit", "hit"]
    assert [r.status for r in results] == ["passed"] * 2
    assert calls == []


_WRITER = """
import sys
from pathlib import Path
from onnx_parity.prepare.cache import Entry, ExportCache

cache, payload, mark = ExportCache(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[3]
payload.write_bytes(mark.encode() * 200_000)
for _ in range(30):
    assert cache.store("same", payload, log=mark)
"""


def test_two_processes_writing_one_key_leave_a_whole_entry(tmp_path: Path) -> None:
    cache = ExportCache(tmp_path / "cache")
    env = {"PYTHONPATH": str(ROOT / "src")}
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(cache.folder),
                                 str(tmp_path / f"{mark}.bin"), mark], env=env)
               for mark in ("a", "b")]
    seen = set()
    while any(w.poll() is None for w in writers):  # a reader meanwhile sees whole entries only
        entry = cache.load("same", tmp_path / "read.bin")
        if isinstance(entry, Entry):
            seen.add(entry.log)
            assert (tmp_path / "read.bin").read_bytes() == entry.log.encode() * 200_000
    assert [w.wait() for w in writers] == [0, 0]
    entry = cache.load("same", tmp_path / "read.bin")
    assert isinstance(entry, Entry) and entry.log in ("a", "b")
    assert (tmp_path / "read.bin").read_bytes() == entry.log.encode() * 200_000
    assert [p.name for p in cache.folder.iterdir()] == ["same.entry"]  # no temporary file left


def test_the_size_cap_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = ExportCache(tmp_path / "cache", max_bytes=2500)
    model = tmp_path / "model.onnx"
    model.write_bytes(b"x" * 1000)
    for index, key in enumerate(("old", "used", "new")):
        assert cache.store(key, model)
        stamp = time.time() - 100 + index  # stored in this order, a second apart
        os.utime(cache.folder / f"{key}.entry", (stamp, stamp))
    # all three do not fit in 2,500 bytes: the oldest went when the third came
    assert sorted(p.stem for p in cache.folder.glob("*.entry")) == ["new", "used"]
    assert isinstance(cache.load("used", tmp_path / "out.onnx"), Entry)  # now the newest
    assert cache.store("newest", model)
    assert sorted(p.stem for p in cache.folder.glob("*.entry")) == ["newest", "used"]


def _module(spec: Path) -> Any:
    import importlib.util

    found = importlib.util.spec_from_file_location("net_for_weights", spec.parent / "net.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module.make()


def test_the_action_input_keeps_the_cache_in_the_runners_temp_folder(tmp_path: Path) -> None:
    from onnx_parity.cli import action

    on = action.get_settings({"INPUT_CACHE": "on", "RUNNER_TEMP": str(tmp_path)})
    args = on.run_args("report.json", None)
    assert args[args.index("--cache") + 1] == str(tmp_path / "onnx-parity-cache")
    assert "--cache" not in action.get_settings({}).run_args("report.json", None)
    with pytest.raises(action.SettingsError, match="input 'cache'"):
        action.get_settings({"INPUT_CACHE": "sometimes"})


BAKED = '''
import torch
from torch import nn


class Baked(nn.Module):
    """Its reshape takes the traced sequence length as a constant."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)

    def forward(self, x):
        y = self.a(x)
        return y.reshape(y.shape[0], int(y.shape[1]) * 2)


def make():
    torch.manual_seed(0)
    return Baked()
'''


def test_the_size_an_export_was_traced_at_is_in_its_key(tmp_path: Path) -> None:
    """One case fed at seq 8, its export traced at the list's first size: 4, then 8. The key
    takes the traced size, not the fed one, else the second run would reuse the export traced
    at 4 and fail a model whose export at 8 serves 8."""
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "baked.py").write_text(BAKED)
    spec_path = folder / "parity.yaml"
    cache = ExportCache(tmp_path / "cache")

    def fed_at_8(sizes: str, work: str) -> CaseResult:
        spec_path.write_text(textwrap.dedent(f"""
            version: 1
            models:
              - name: baked
                torch: baked.py:make
                inputs: {{x: [batch, seq, 4]}}
                opsets: [17]
                exporter: torchscript
                precisions: [fp32]
                datasets: [r]
            datasets:
              r: {{kind: random, samples: 1, batch_sizes: [2], dims: {{seq: {sizes}}}}}
            """).lstrip())
        spec = load_spec(spec_path)
        cases = [case for case in plan(spec) if case.id.endswith("-seq8]")]
        memo = ModelMemo(WorkerTask(spec.root, cases[0].model, cases, tmp_path / work,
                                    cache=cache))
        return run_case(memo, cases[0])

    traced_at_4 = fed_at_8("[4, 8]", "work0")
    assert traced_at_4.status != "passed"  # the export serves seq 4 only
    traced_at_8 = fed_at_8("[8, 4]", "work1")
    assert (traced_at_8.details.cache or {}).get("export") == "miss"
    assert traced_at_8.status == "passed", traced_at_8.message


# The property: whatever changed since the cache was filled, a run with it reaches the verdict a
# fresh run reaches. The model reads a config file in its factory and imports a helper inside
# forward(); neither shows in its parameters or plain attributes, so only the recorded reads
# (prepare/reads.py) can put them in the key. Each change is made to a copy of a repository and
# a cache filled once; a stale export would give the other verdict each time.
READER = '''
import json
from pathlib import Path

import torch
from torch import nn


def _baked(y):
    return y.reshape(int(y.shape[0]), -1)  # traced as a constant: the export serves one batch


class Reader(nn.Module):
    def __init__(self, post):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.post = post

    def forward(self, x):
        from helper import act

        return self.post(act(self.lin(x)))


def make():
    torch.manual_seed(0)
    config = json.loads(Path(__file__).with_name("config.json").read_text())
    return Reader(_baked if config["bake"] else (lambda y: y))
'''

READER_SPEC = """
version: 1
models:
  - name: reader
    torch: models.py:make
    inputs: {x: [batch, 4]}
    opsets: [17]
    exporter: torchscript
    precisions: [fp32]
    datasets: [r]
datasets:
  r: {kind: random, samples: 1, batch_sizes: [3]}
"""


def _reader_repo(folder: Path, act: str = "torch.relu(x)") -> Path:
    folder.mkdir(parents=True)
    (folder / "models.py").write_text(READER)
    (folder / "helper.py").write_text(f"import torch\n\n\ndef act(x):\n    return {act}\n")
    (folder / "config.json").write_text('{"bake": false}')
    (folder / "parity.yaml").write_text(READER_SPEC.lstrip())
    return folder / "parity.yaml"


def _run_once(spec: Path, cache: ExportCache, work: Path) -> CaseResult:
    """The spec's one case, as a new worker runs it: the helper imported afresh."""
    sys.modules.pop("helper", None)
    [result] = _check(spec, cache, work)
    return result


def _verdict(result: CaseResult) -> tuple[Any, ...]:
    return (result.status, result.stage,
            [(o.name, o.passed, o.max_abs) for o in result.outputs])


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, CaseResult]:
    """Two repositories whose entries share one cache folder (tanh's and relu's), and the
    fresh verdict on the relu one."""
    base = tmp_path_factory.mktemp("filled")
    cache = ExportCache(base / "cache")
    other = _run_once(_reader_repo(base / "tanh", act="torch.tanh(x)"), cache, base / "w0")
    fresh = _run_once(_reader_repo(base / "relu"), cache, base / "w1")
    assert [other.status, fresh.status] == ["passed", "passed"]
    assert len(list(cache.folder.glob("*.entry"))) == 2
    return base / "relu", cache.folder, fresh


def _entries(folder: Path) -> tuple[Path, Path]:
    """The relu repository's entry and the tanh one's, told apart by their exports' ops."""
    relu, tanh = sorted(folder.glob("*.entry"), key=lambda p: b"Tanh" in p.read_bytes())
    return relu, tanh


def _swap(cache: Path, repo: Path) -> None:
    relu, tanh = _entries(cache)
    relu_bytes = relu.read_bytes()
    relu.write_bytes(tanh.read_bytes())
    tanh.write_bytes(relu_bytes)


def _truncate(cache: Path, repo: Path) -> None:
    relu, _ = _entries(cache)
    relu.write_bytes(relu.read_bytes()[:-100])


def _edit(cache: Path, repo: Path) -> None:
    relu, _ = _entries(cache)
    data = bytearray(relu.read_bytes())  # the exporter's Relu made a Tanh, the length kept
    at = data.index(b"Relu")
    data[at:at + 4] = b"Tanh"
    relu.write_bytes(bytes(data))


def _symlink(cache: Path, repo: Path) -> None:
    relu, tanh = _entries(cache)
    relu.unlink()
    relu.symlink_to(tanh.name)


def _config(cache: Path, repo: Path) -> None:
    (repo / "config.json").write_text('{"bake": true}')


def _helper(cache: Path, repo: Path) -> None:
    helper = repo / "helper.py"
    helper.write_text(helper.read_text().replace(  # the batch traced as a constant, as above
        "torch.relu(x)", "torch.relu(x).reshape(int(x.shape[0]), -1)"))


@pytest.mark.parametrize(("change", "state", "why"), [
    (_config, "miss", None),
    (_helper, "miss", None),
    (_swap, "rebuilt", "another key's entry"),
    (_truncate, "rebuilt", "cut short"),
    (_edit, "rebuilt", "changed since it was stored"),
    (_symlink, "rebuilt", "a symbolic link"),
])
def test_after_any_change_the_cached_verdict_is_the_fresh_one(
            filled: tuple[Path, Path, CaseResult], tmp_path: Path,
        change: Callable[[Path, Path], None], state: str, why: str | None) -> None:
    repo, folder, fresh = filled
    shutil.copytree(repo, tmp_path / "repo", symlinks=True)
    shutil.copytree(folder, tmp_path / "cache", symlinks=True)
    spec, cache = tmp_path / "repo" / "parity.yaml", ExportCache(tmp_path / "cache")
    change(cache.folder, spec.parent)
    cached = _run_once(spec, cache, tmp_path / "w0")
    if state == "miss":  # the repository changed: its fresh verdict is a run without a cache
        fresh = _run_once(spec, ExportCache(tmp_path / "empty"), tmp_path / "w1")
        assert fresh.status != "passed"  # so a stale export, which passes, would be a lie
    assert _verdict(cached) == _verdict(fresh)
    assert (cached.details.cache or {}).get("export") == state
    if why is not None:
        assert any(note.startswith(f"export: the cache's entry was {why}")
                   for note in cached.notes), cached.notes
    again = _run_once(spec, cache, tmp_path / "w2")  # the entry made whole again, and used
    assert (again.details.cache or {}).get("export") == "hit"
    assert _verdict(again) == _verdict(cached)


def test_a_factory_that_reads_the_network_is_never_taken_from_the_cache(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    spec = _reader_repo(tmp_path / "repo")
    models = spec.parent / "models.py"
    models.write_text(models.read_text().replace("    torch.manual_seed(0)\n", f"""\
    torch.manual_seed(0)
    import socket
    socket.create_connection({listener.getsockname()!r}).close()
"""))
    cache = ExportCache(tmp_path / "cache")
    for work in ("w0", "w1"):
        result = _run_once(spec, cache, tmp_path / work)
        assert result.status == "passed"
        assert result.details.cache == {"export": "uncached"}
        assert "export: made without the cache, which cannot vouch for it: its factory or " \
               "first forward() opened a network connection" in result.notes
    listener.close()
    assert not list(cache.folder.glob("*.entry"))
