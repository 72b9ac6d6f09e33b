"""The GPU preflight: machine readers fed recorded findings, the judgement against the table,
and `onnx-parity doctor` on this machine (onnxruntime-gpu without CUDA or a driver)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import DATA
from onnx_parity.backends import probe as cuda_probe
from onnx_parity.cli.main import main
from onnx_parity.findings import DriverFacts, MachineFacts
from onnx_parity.machine.compat import (
    ORT_ROWS,
    libraries,
    newest_release_for,
    requirement,
    tensorrt_libraries,
)
from onnx_parity.machine.facts import read_cuda_plugin, read_driver, read_runtime, read_torch
from onnx_parity.machine.libraries import find_libraries
from onnx_parity.machine.preflight import assess, preflight, run_probe, static_findings
from onnx_parity.plan.merge import merged_preflight
from onnx_parity.report.jsonvalues import Reader
from onnx_parity.report.preflight import render_text
from onnx_parity.report.preflightjson import facts_dict, read_facts
from onnx_parity.results import Finding, Probe

DOCTOR = DATA / "doctor"
PROBE = cuda_probe.__name__  # the CUDA probe's module, as the commands hand it to the preflight
CUDA13 = libraries(13, 9, cudnn_optional=True)  # what onnxruntime-gpu 1.31 loads
TENSORRT10 = tensorrt_libraries(13, 10)
TENSORRT = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


class RecordedNvml:
    """nvidia-ml-py's calls (NVML's own camelCase names), answered from a recording."""

    def __init__(self, name: str) -> None:
        self.answers = json.loads((DOCTOR / name).read_text())

    def nvmlInit(self) -> None:
        if "init_error" in self.answers:
            raise RuntimeError(self.answers["init_error"])

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.answers["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.answers["cuda_driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.answers["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        gpu: dict[str, Any] = self.answers["gpus"][index]
        return gpu

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> bytes:
        return str(handle["name"]).encode()  # older nvidia-ml-py answers bytes

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=handle["memory_total"])

    def nvmlDeviceGetCudaComputeCapability(self, handle: dict[str, Any]) -> list[int]:
        return list(handle["compute_capability"])


def recorded_smi(args: Sequence[str]) -> str:
    return (DOCTOR / ("nvidia-smi-query.csv" if args else "nvidia-smi-banner.txt")).read_text()


def no_smi(args: Sequence[str]) -> None:
    return None


def machine(name: str) -> MachineFacts:
    return read_facts(Reader(json.loads((DOCTOR / name).read_text()), name))


def through_json(facts: MachineFacts) -> MachineFacts:
    """The facts written as a report holds them, and read back."""
    return read_facts(Reader(json.loads(json.dumps(facts_dict(facts))), "facts"))


def by_check(findings: Sequence[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


# -- reading -----------------------------------------------------------------------------------

def test_nvml_answers_become_driver_and_gpu_facts() -> None:
    driver = read_driver(RecordedNvml("nvml-h100-driver580.json"), no_smi)
    assert driver.source == "NVML" and driver.version == "580.82.07" and driver.cuda == "13.0"
    (gpu,) = driver.gpus
    assert (gpu.name, gpu.compute, gpu.memory_mib) == ("NVIDIA H100 80GB HBM3", "9.0", 81559)


def test_nvidia_smi_answers_when_nvml_cannot() -> None:
    driver = read_driver(RecordedNvml("nvml-no-driver.json"), recorded_smi)
    assert driver.source == "nvidia-smi" and driver.version == "570.133.20"
    assert driver.cuda == "12.8" and driver.gpus[0].compute == "8.6"
    assert driver.problems == ("NVML: NVML Shared Library Not Found",)


def test_no_driver_says_what_each_source_answered() -> None:
    driver = read_driver(RecordedNvml("nvml-no-driver.json"), no_smi)
    assert driver.version is None and not driver.gpus
    assert driver.problems == ("NVML: NVML Shared Library Not Found",
                               "nvidia-smi: not found on PATH")


def test_pip_wheels_are_found_first_with_their_versions() -> None:
    env = {"LD_LIBRARY_PATH": str(DOCTOR / "system-cudnn8")}
    found = find_libraries(CUDA13, [DOCTOR / "site-cu13"], env, {}, system_folders=())
    cudnn = found[-1]
    assert cudnn.origin == "pip nvidia-cudnn-cu13" and cudnn.version == "9.13.0.50"
    assert cudnn.path == str(DOCTOR / "site-cu13/nvidia/cudnn/lib/libcudnn.so.9")
    assert all(lib.path is not None for lib in found)
    assert cudnn.others == (str(DOCTOR / "system-cudnn8/libcudnn.so.8"),
                            str(DOCTOR / "system-cudnn8/libcudnn.so.8.9.7"))


def test_search_order_is_ld_library_path_then_cache_then_system_folders(tmp_path: Path) -> None:
    for folder in ("ld", "cached", "system"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "libcurand.so.10").touch()
    curand = CUDA13[3]
    env = {"LD_LIBRARY_PATH": str(tmp_path / "ld")}
    cache = {"libcurand.so.10": str(tmp_path / "cached" / "libcurand.so.10")}
    system = [str(tmp_path / "system")]
    assert find_libraries([curand], [], env, cache, system)[0].origin == "LD_LIBRARY_PATH"
    assert find_libraries([curand], [], {}, cache, system)[0].origin == "ld.so.cache"
    assert find_libraries([curand], [], {}, {}, system)[0].origin == "system folder"
    assert find_libraries([curand], [], {}, {}, [])[0].path is None


def test_a_soname_link_gives_the_full_version(tmp_path: Path) -> None:
    (tmp_path / "libcudnn.so.9.13.0").touch()
    (tmp_path / "libcudnn.so.9").symlink_to("libcudnn.so.9.13.0")
    (cudnn,) = find_libraries([CUDA13[-1]], [], {}, {}, [str(tmp_path)])
    assert cudnn.version == "9.13.0" and cudnn.others == ()


def test_this_machines_builds_are_read_from_their_files() -> None:
    runtime, torch = read_runtime(), read_torch()
    assert runtime.package == "onnxruntime-gpu" and runtime.cuda == "13.0"
    assert runtime.distributions == {"onnxruntime-gpu": runtime.version}
    assert torch.version is not None and torch.version.endswith("+cpu") and torch.cuda is None


# -- the table ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("version", "cuda", "expected"),
    [
        ("1.31.1", "13.0", (13, 9, (1, 31))),
        ("1.28.0", "13.0", (13, 9, (1, 30))),
        ("1.27.1", "13.0", (13, 9, (1, 27))),
        ("1.25.0", "12.8", (12, 9, (1, 26))),
        ("1.20.1", "12.2", (12, 9, (1, 23))),
        ("1.17.3", "11.8", (11, 8, (1, 18))),
        ("1.40.0", "14.1", (14, 9, None)),  # not in the table: judged by its own CUDA version
        ("1.17.3", "12.2", (12, 8, None)),  # the CUDA 12 build of 1.17, not the PyPI default
    ],
)
def test_requirement_comes_from_the_table_row(version: str, cuda: str,
                                              expected: tuple[Any, ...]) -> None:
    needs = requirement(version, cuda)
    assert needs is not None
    assert (needs.cuda, needs.cudnn, needs.row.last if needs.row else None) == expected


def test_a_cpu_build_needs_nothing_and_rows_do_not_overlap() -> None:
    assert requirement("1.31.1", None) is None
    spans = sorted((row.first, row.last) for row in ORT_ROWS)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    older = newest_release_for(12)
    assert older is not None and older.last == (1, 26)


# -- judging recorded machines -----------------------------------------------------------------

def test_a_machine_with_everything_in_place_is_usable() -> None:
    facts = machine("facts-h100-cu13.json")
    findings = static_findings(facts)
    assert {f.status for f in findings} == {"ok"}, findings
    assert by_check(findings)["GPU"].found.startswith("#0 NVIDIA H100 80GB HBM3")


def test_cudnn_8_beside_a_build_that_needs_cudnn_9_gets_the_fix() -> None:
    facts = machine("facts-h100-cu13.json")
    release_127 = dataclasses.replace(facts.runtime, version="1.27.0",
                                      distributions={"onnxruntime-gpu": "1.27.0"})
    found = find_libraries(libraries(13, 9), [], {}, {}, [str(DOCTOR / "system-cudnn8")])
    cudnn = by_check(static_findings(
        MachineFacts(facts.driver, release_127, facts.torch, found)))["cuDNN"]
    assert cudnn.status == "fail"
    assert cudnn.fix == ("onnxruntime-gpu 1.27 needs CUDA 13 and cuDNN 9; found libcudnn.so.8: "
                         "pip install nvidia-cudnn-cu13")
    assert cudnn.found.startswith("libcudnn.so.9 not found; found ")


def test_from_1_28_a_missing_cudnn_is_a_warning_unless_tensorrt_links_it() -> None:
    facts = machine("facts-h100-cu13.json")
    cudnn = find_libraries(CUDA13[-1:], [], {}, {}, [str(DOCTOR / "system-cudnn8")])
    without = dataclasses.replace(facts, libraries=(*facts.libraries[:-1], *cudnn))
    cuda = by_check(static_findings(without, ["CUDAExecutionProvider"]))["cuDNN"]
    assert cuda.status == "warn"
    assert cuda.found.endswith("(onnxruntime-gpu 1.31 loads it only for the ops whose CUDA "
                               "kernels use it, convolutions most of all: a model with them "
                               "fails on CUDA without it)")
    assert cuda.fix.endswith("found libcudnn.so.8: pip install nvidia-cudnn-cu13")
    tensorrt = by_check(static_findings(without, TENSORRT))["cuDNN"]
    assert tensorrt.status == "fail" and tensorrt.found.endswith("(TensorRT's provider links it)")
    assert by_check(static_findings(without))["cuDNN"].found.endswith(
        "; TensorRT's provider links it)")
    assert assess(without, providers=["CUDAExecutionProvider"]).usable


def test_tensorrt_libraries_are_found_in_pips_tensorrt_libs() -> None:
    found = find_libraries(TENSORRT10, [DOCTOR / "site-cu13"], {}, {}, system_folders=())
    assert [(lib.name, lib.origin, lib.provider, lib.pin) for lib in found] == [
        ("TensorRT", "pip tensorrt-cu13-libs", "TensorrtExecutionProvider", "10.*"),
        ("TensorRT ONNX parser", "pip tensorrt-cu13-libs", "TensorrtExecutionProvider", "10.*")]
    assert found[0].path == str(DOCTOR / "site-cu13/tensorrt_libs/libnvinfer.so.10")
    facts = machine("facts-h100-cu13.json")
    with_trt = dataclasses.replace(facts, libraries=(*facts.libraries, *found))
    assert {f.status for f in static_findings(with_trt, TENSORRT)} == {"ok"}


def test_tensorrt_is_judged_where_a_target_asks_for_it() -> None:
    facts = machine("facts-h100-cu13.json")
    newest = find_libraries(TENSORRT10, [DOCTOR / "site-trt11"], {}, {}, system_folders=())
    machine_ = dataclasses.replace(facts, libraries=(*facts.libraries, *newest))
    asked = by_check(static_findings(machine_, TENSORRT))["TensorRT"]
    assert asked.status == "fail"
    assert asked.found == (f"libnvinfer.so.10 not found; found "
                           f"{DOCTOR / 'site-trt11/tensorrt_libs/libnvinfer.so.11'}")
    assert asked.fix == ("onnxruntime-gpu 1.31's TensorRT provider needs TensorRT 10 for CUDA 13;"
                         " found libnvinfer.so.11: pip install 'tensorrt-cu13-libs==10.*'")
    assert "TensorRT" not in by_check(static_findings(machine_, ["CUDAExecutionProvider"]))
    doctor = by_check(static_findings(machine_))["TensorRT ONNX parser"]
    assert doctor.status == "warn"
    assert doctor.found.endswith("(only targets with TensorrtExecutionProvider need it)")
    # It says whether TensorRT can run, not whether CUDA can: the CUDA probe does not overrule
    # it, and it does not make CUDA unusable.
    checked = assess(machine_, lambda: Probe(ran=True, usable=True), TENSORRT)
    assert checked.usable and by_check(checked.findings)["TensorRT"].status == "fail"
    assert assess(machine_, None, TENSORRT).usable
    assert render_text(checked.record()).startswith("GPU preflight: CUDA is usable here "
                                                     "(2 problems)")


def test_the_cuda_provider_as_a_plugin_beside_the_cpu_build() -> None:
    facts = machine("facts-cuda-plugin.json")
    checks = by_check(static_findings(facts, ["CUDAExecutionProvider"]))
    assert checks["onnxruntime"].status == "ok"
    assert checks["onnxruntime"].found.startswith(
        "onnxruntime 1.31.1, a CPU build, with the CUDA provider as a plugin: "
        "onnxruntime-ep-cuda13 0.1.0, built for CUDA 13 (/venv/lib/python3.12/site-packages/"
        "onnxruntime_ep_cuda/libonnxruntime_providers_cuda.so; onnx-parity registers it")
    assert checks["cuDNN"].status == "warn" and checks["cuBLAS"].status == "ok"
    assert assess(facts).usable
    plugin = facts.runtime.cuda_plugin
    assert plugin is not None
    broken = dataclasses.replace(facts.runtime,
                                 cuda_plugin=dataclasses.replace(plugin, library=None))
    runtime = by_check(static_findings(dataclasses.replace(facts, runtime=broken)))["onnxruntime"]
    assert runtime.status == "fail"
    assert runtime.fix == "pip install --force-reinstall onnxruntime-ep-cuda13"
    assert through_json(facts) == facts


def test_a_cuda_plugin_is_read_from_its_package(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_cuda_plugin() is None  # none installed here
    module = tmp_path / "onnxruntime_ep_cuda"
    module.mkdir()
    (module / "__init__.py").write_text("")
    (module / "libonnxruntime_providers_cuda.so").write_bytes(b"")
    info = tmp_path / "onnxruntime_ep_cuda13-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-ep-cuda13\n"
                                   "Version: 0.1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = read_cuda_plugin()
    assert plugin is not None
    assert (plugin.package, plugin.version, plugin.cuda) == ("onnxruntime-ep-cuda13", "0.1.0", "13")
    assert plugin.library == str(module / "libonnxruntime_providers_cuda.so")


def test_an_old_driver_and_gpu_fail_with_an_upgrade_or_an_older_build() -> None:
    facts = machine("facts-h100-cu13.json")
    old = read_driver(RecordedNvml("nvml-v100-driver535.json"), no_smi)
    checks = by_check(static_findings(
        MachineFacts(old, facts.runtime, facts.torch, facts.libraries)))
    assert checks["driver"].status == "fail"
    assert "runs CUDA ≤ 12.2" in checks["driver"].found
    assert checks["driver"].fix == ("upgrade the NVIDIA driver to 580.65.06 or newer, or pip "
                                    "install 'onnxruntime-gpu==1.26.*' (built for CUDA 12)")
    assert checks["GPU"].status == "fail" and "compute capability 7.0" in checks["GPU"].found


def test_both_runtimes_installed_is_a_failure_with_the_reinstall() -> None:
    runtime = by_check(static_findings(machine("facts-two-runtimes.json")))["onnxruntime"]
    assert runtime.status == "fail"
    assert "onnxruntime 1.23.2 and onnxruntime-gpu 1.31.1 are installed together" in runtime.found
    assert runtime.fix == ("pip uninstall -y onnxruntime onnxruntime-gpu && pip install "
                           "onnxruntime-gpu==1.31.1")


def test_a_shadowed_cpu_runtime_in_a_later_folder_is_only_a_warning() -> None:
    # onnxruntime-gpu first on the path, the plain CPU build under it in the system folder:
    # the GPU build is what imports, so nothing is wrong; the other one is worth a line.
    findings = static_findings(machine("facts-layered-runtimes.json"))
    runtime = [f for f in findings if f.check == "onnxruntime"]
    assert [f.status for f in runtime] == ["ok", "warn"]
    assert runtime[0].found.startswith("onnxruntime-gpu 1.31.1, built for CUDA 13.0")
    assert runtime[1].found == (
        "onnxruntime 1.30.0 is also installed, in /usr/local/lib/python3.12/dist-packages/"
        "onnxruntime; `import onnxruntime` loads onnxruntime-gpu 1.31.1 from "
        "/tmp/site/onnxruntime, which shadows it")
    assert not any(f.status == "fail" for f in findings)


def test_the_same_two_runtimes_in_one_folder_are_a_failure() -> None:
    facts = machine("facts-layered-runtimes.json")
    folder = facts.runtime.folder
    assert folder is not None
    shared = dataclasses.replace(facts.runtime, locations={
        name: folder for name in facts.runtime.distributions})
    runtime = by_check(static_findings(dataclasses.replace(facts, runtime=shared)))["onnxruntime"]
    assert runtime.status == "fail"
    assert "onnxruntime 1.30.0 and onnxruntime-gpu 1.31.1 are installed together" in runtime.found


def test_a_probe_that_ran_on_cuda_overrules_a_static_failure() -> None:
    facts = machine("facts-two-runtimes.json")
    gpu_build = dataclasses.replace(facts.runtime, package="onnxruntime-gpu", version="1.31.1",
                                    cuda="13.0")
    facts = dataclasses.replace(facts, runtime=gpu_build)
    assert by_check(static_findings(facts))["onnxruntime"].status == "fail"
    checked = assess(facts, lambda: Probe(ran=True, usable=True))
    assert checked.usable and checked.reason == ""
    runtime = by_check(checked.findings)["onnxruntime"]
    assert runtime.status == "warn"
    assert runtime.found.endswith("(yet ONNX Runtime ran a session on CUDA here, so this did not "
                                  "stop it)")
    assert "installed together" in runtime.found
    text = render_text(checked.record())
    assert text.startswith("GPU preflight: CUDA is usable here") and "NOT" not in text
    # and where the probe failed, the static finding stands beside the probe's own reason
    failed = assess(facts, lambda: Probe(ran=True, usable=False, reason="no CUDA"))
    assert not failed.usable and by_check(failed.findings)["onnxruntime"].status == "fail"


def test_torch_on_another_cuda_is_a_warning() -> None:
    torch = by_check(static_findings(machine("facts-torch-cu128.json")))["torch"]
    assert torch.status == "warn" and "CUDA 12" in torch.found and "CUDA 13" in torch.fix


def test_no_driver_and_no_probe_make_the_preflight_unusable_with_a_reason() -> None:
    facts = machine("facts-h100-cu13.json")
    gone = DriverFacts(problems=("NVML: NVML Shared Library Not Found",))
    checks = by_check(static_findings(
        MachineFacts(gone, facts.runtime, facts.torch, facts.libraries)))
    assert checks["driver"].status == "fail" and "--skip-unavailable" in checks["driver"].fix
    assert "GPU" not in checks


def test_facts_survive_their_json_form() -> None:
    facts = machine("facts-torch-cu128.json")
    assert through_json(facts) == facts


def test_a_runs_preflight_reads_back_from_its_json_report(tmp_path: Path) -> None:
    from onnx_parity.report.jsonfile import ReportFormatError, read_json, to_dict, write_json
    from onnx_parity.results import RunReport

    checked = assess(machine("facts-cuda-plugin.json"),
                     lambda: Probe(ran=True, usable=False, reason="no CUDA"))
    record = dataclasses.replace(checked.record(), seconds=0.25, gpu_cases=4, skipped_cases=4)
    path = tmp_path / "report.json"
    write_json(RunReport("s.yaml", {"python": "3.12"}, (), preflight=record), path)
    written = json.loads(path.read_text())["environment"]["preflight"]
    assert list(written) == ["usable", "reason", "seconds", "findings", "probe", "table",
                             "facts", "gpu_cases", "skipped_cases"]
    assert written["probe"] == {"ran": True, "usable": False, "reason": "no CUDA"}
    assert written["findings"][0] == {"check": "onnxruntime", "status": "ok",
                                      "found": checked.findings[0].found, "fix": ""}
    assert list(written["facts"]) == ["driver", "runtime", "torch", "libraries", "search"]
    back = read_json(path)
    assert back.preflight == record
    assert to_dict(back) == json.loads(path.read_text())

    written["findings"][0]["status"] = "meh"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**json.loads(path.read_text()),
                                  "environment": {"preflight": written}}))
    with pytest.raises(ReportFormatError,
                       match=r"environment\.preflight\.findings\[0\]\.status: 'meh' is not one"):
        read_json(edited)


# -- this machine ------------------------------------------------------------------------------

def test_preflight_here_reads_the_real_libraries_and_finds_no_driver() -> None:
    found = preflight(probe=PROBE, nvml=RecordedNvml("nvml-no-driver.json"), smi=no_smi)
    assert not found.usable and found.probe is None  # no GPU: nothing worth probing
    checks = by_check(found.findings)
    assert checks["onnxruntime"].status == "ok" and checks["driver"].status == "fail"
    assert "cuBLASLt" in checks and checks["cuBLASLt"].status == "fail"  # ORT's own complaint
    assert found.reason.startswith("driver: no NVIDIA driver found")
    text = render_text(found.record())
    assert text.startswith("GPU preflight: CUDA is NOT usable here")
    assert "fix: onnxruntime-gpu 1.31 needs CUDA 13 and cuDNN 9" in text


def test_doctor_command_prints_json_and_exits_1_without_a_gpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["usable"] is False and data["reason"]
    # a run's counts of GPU cases belong to a run's report, not to doctor's
    assert list(data) == ["usable", "reason", "seconds", "findings", "probe", "table", "facts"]
    assert data["facts"]["runtime"]["package"] == "onnxruntime-gpu"
    assert main(["doctor"]) == 1
    assert "GPU preflight: CUDA is NOT usable here" in capsys.readouterr().out


def test_with_a_gpu_in_sight_the_probe_has_the_last_word() -> None:
    # A recorded H100 and driver 580 in front of this machine's libraries: the findings leave a
    # chance, so a child process tries CUDA for real and reports what ONNX Runtime logged.
    found = preflight(probe=PROBE, nvml=RecordedNvml("nvml-h100-driver580.json"), smi=no_smi)
    checks = by_check(found.findings)
    assert checks["driver"].status == "ok" and checks["GPU"].status == "ok"
    assert found.probe is not None and found.probe.ran and not found.probe.usable
    assert "Require cuDNN 9.* and CUDA 13.*" in found.probe.reason
    assert not found.usable and "CUDA session: ONNX Runtime did not run on CUDA" in found.reason


def test_the_probe_is_a_module_run_in_a_child_process() -> None:
    # The child runs the module, not code handed to it as a string, and prints its answer last.
    done = subprocess.run([sys.executable, "-m", PROBE], capture_output=True, text=True,
                          timeout=180, check=True)
    usable, reason = json.loads(done.stdout.splitlines()[-1])
    assert usable is False and "Require cuDNN 9.* and CUDA 13.*" in reason
    # a probe that does not answer in time is a reason too, never a hang
    late = run_probe(PROBE, timeout=0.001)
    assert late == Probe(True, False, "creating a CUDA session took over 0.001 s")


def test_merged_shards_keep_one_preflight_with_every_gpu_case_counted() -> None:
    facts = machine("facts-h100-cu13.json")
    shard = dataclasses.replace(assess(facts).record(), gpu_cases=2, skipped_cases=0)
    broken = dataclasses.replace(assess(facts).record(), usable=False, reason="driver: none",
                                 gpu_cases=3, skipped_cases=3)
    merged = merged_preflight([shard, broken])
    assert merged is not None
    assert (merged.usable, merged.reason, merged.gpu_cases, merged.skipped_cases) == (
        False, "driver: none", 5, 3)
    assert merged_preflight([shard]) is shard
    assert merged_preflight([]) is None


def test_a_run_that_fails_over_a_missing_cudnn_says_what_to_install() -> None:
    """The preflight cannot know whether a model needs cuDNN (it runs before any export); the
    case whose CUDA kernel fails without it can."""
    from onnx_parity.backends.target import _cudnn_hint

    error = RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Conv needs cuDNN, which "
                         "could not be loaded")
    hint = _cudnn_hint(error, ("CUDAExecutionProvider", "CPUExecutionProvider"))
    assert hint == (" (the CUDA provider runs without cuDNN, but this model's ops need it: pip "
                    "install nvidia-cudnn-cu13; `onnx-parity doctor` checks it)")
    assert _cudnn_hint(error, ("CPUExecutionProvider",)) == ""
    assert _cudnn_hint(RuntimeError("out of memory"), ("CUDAExecutionProvider",)) == ""
