"""The GPU preflight: machine facts judged against the compatibility table, with a fix for each
problem; shown by `onnx-parity doctor` and run before `run` when a target asks for a GPU.

Judging is a pure function of the facts (facts.py reads them; compat.py holds the table),
so recorded findings test it. The last word is a probe: a one-node session on CUDA, made in a
child process (backends/probe.py, named by the command) so that the parent never holds a CUDA
context, and only where a GPU was found.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from onnx_parity.findings import LibraryFacts, MachineFacts
from onnx_parity.frozen import frozen
from onnx_parity.literals import COMPAT_TABLE, CUDA, TENSORRT
from onnx_parity.machine.compat import (
    CUDA_PLUGIN_LIBRARY,
    Requirement,
    newest_release_for,
    requirement,
    version_tuple,
)
from onnx_parity.machine.facts import read_machine
from onnx_parity.results import Finding, PreflightRecord, Probe

PROBE_TIMEOUT = 180.0


@frozen
class Preflight:
    facts: MachineFacts
    findings: tuple[Finding, ...]
    probe: Probe | None = None
    seconds: float = 0.0

    @property
    def usable(self) -> bool:
        """Can a CUDA target run here? The probe says so where it ran; else the findings."""
        if self.probe is not None and self.probe.ran:
            return self.probe.usable
        return not any(f.status == "fail" and not about_tensorrt(f) for f in self.findings)

    @property
    def reason(self) -> str:
        """Why not, in one line: every failed check's finding."""
        if self.usable:
            return ""
        return "; ".join(f"{f.check}: {f.found}" for f in self.findings
                         if f.status == "fail" and not about_tensorrt(f))

    def record(self) -> PreflightRecord:
        """The judgement as the reports hold it (RunReport.preflight), timed to the ms."""
        return PreflightRecord(usable=self.usable, reason=self.reason, findings=self.findings,
                               facts=self.facts, table=COMPAT_TABLE, probe=self.probe,
                               seconds=round(self.seconds, 3))


def about_tensorrt(finding: Finding) -> bool:
    """A TensorRT library's finding: it says whether TensorRT targets can run, not whether CUDA
    is usable, and the CUDA probe neither proves nor disproves it."""
    return finding.check.startswith("TensorRT")


def preflight(*, probe: str | None, providers: Sequence[str] | None = None,
              **sources: Any) -> Preflight:
    """Read this machine (sources as in facts.read_machine), judge it for `providers` (the
    run's targets' GPU providers; None: for any, as `doctor` does), and probe CUDA where the
    findings leave a chance that it works: `probe` names the probe's module (None: no probe).
    The command hands it in (cli/ may know backends/, where the probe makes its session with
    the one session builder): it is run in a child process, never imported, so machine/ names
    no later stage and the parent never holds a CUDA context."""
    started = time.perf_counter()
    run = None if probe is None else functools.partial(run_probe, probe)
    checked = assess(read_machine(**sources), run, providers)
    return dataclasses.replace(checked, seconds=time.perf_counter() - started)


def assess(facts: MachineFacts, probe: Callable[[], Probe] | None = None,
           providers: Sequence[str] | None = None) -> Preflight:
    """Judge the facts, then let `probe` (a real CUDA session) have the last word where the
    findings leave a chance that CUDA works: a session that ran on CUDA turns every static
    FAIL into a warning that names it, TensorRT's aside."""
    findings = static_findings(facts, providers)
    ran = None
    if probe is not None and _worth_probing(facts, findings):
        ran = probe()
        if ran.usable:
            findings = tuple(_overruled(f) for f in findings)
        findings = (*findings, _probe_finding(ran))
    return Preflight(facts, findings, ran)


def _overruled(finding: Finding) -> Finding:
    """A static FAIL that a real CUDA session contradicts: a warning that names the finding."""
    if finding.status != "fail" or about_tensorrt(finding):
        return finding
    return Finding(finding.check, "warn",
                   f"{finding.found} (yet ONNX Runtime ran a session on CUDA here, so this did "
                   "not stop it)", finding.fix)


# -- judging -----------------------------------------------------------------------------------

def static_findings(facts: MachineFacts,
                    providers: Sequence[str] | None = None) -> tuple[Finding, ...]:
    """Every check, in the order a person would fix them: onnxruntime, the driver and GPUs,
    the libraries onnxruntime loads, then torch sharing the process. `providers`: the GPU
    providers the run asks for (TensorRT's libraries are judged only where it is asked for);
    None judges them all, TensorRT's as optional."""
    runtime = facts.runtime
    needs = requirement(runtime.version or "", runtime.gpu_cuda)
    findings = [_runtime_finding(facts, needs), *_shadowed_findings(facts)]
    findings += _driver_findings(facts, needs)
    if needs is not None:
        tensorrt = None if providers is None else TENSORRT in providers
        findings += [finding for lib in facts.libraries
                     if (finding := _library_finding(lib, needs, tensorrt)) is not None]
    findings.append(_torch_finding(facts, needs))
    return tuple(findings)


def _short(version: str) -> str:
    parts = version_tuple(version)
    return ".".join(str(p) for p in parts[:2]) if len(parts) >= 2 else version


def _sharing(facts: MachineFacts) -> tuple[dict[str, str], dict[str, str]]:
    """The distributions whose files are in the folder `import onnxruntime` loads, and those
    installed in other folders (shadowed by it). Facts recorded without folders share one."""
    runtime = facts.runtime
    owners = dict(runtime.distributions)
    if runtime.folder is None or not runtime.locations:
        return owners, {}
    here = {n: v for n, v in owners.items() if runtime.locations.get(n) == runtime.folder}
    return here, {n: v for n, v in owners.items() if n not in here}


def _shadowed_findings(facts: MachineFacts) -> list[Finding]:
    """Another onnxruntime in a folder later on the path is harmless while it stays shadowed."""
    runtime = facts.runtime
    loaded = f"{runtime.package or 'onnxruntime'} {runtime.version or '?'}"
    return [
        Finding("onnxruntime", "warn",
                f"{name} {version} is also installed, in {runtime.locations.get(name)}; "
                f"`import onnxruntime` loads {loaded} from {runtime.folder}, which shadows it",
                f"nothing to do while the path keeps that order; pip uninstall -y {name} from "
                "that folder makes it certain")
        for name, version in _sharing(facts)[1].items()
    ]


def _runtime_finding(facts: MachineFacts, needs: Requirement | None) -> Finding:
    runtime = facts.runtime
    owners = _sharing(facts)[0]
    if not owners and runtime.version is None:
        return Finding("onnxruntime", "fail", "onnxruntime is not installed",
                       "pip install onnxruntime-gpu")
    if len(owners) > 1:
        listed = " and ".join(f"{name} {version}" for name, version in owners.items())
        present = f" (the files there now are {runtime.package}'s)" if runtime.package else ""
        gpu = owners.get("onnxruntime-gpu") or runtime.version or ""
        pin = f"=={gpu}" if gpu else ""
        return Finding(
            "onnxruntime", "fail",
            f"{listed} are installed together; they share the onnxruntime folder and overwrite "
            f"each other{present}",
            f"pip uninstall -y {' '.join(owners)} && pip install onnxruntime-gpu{pin}")
    name = runtime.package or next(iter(owners), "onnxruntime")
    plugin = runtime.cuda_plugin
    if plugin is not None and runtime.cuda is None and needs is not None:
        found = (f"{name} {runtime.version}, a CPU build, with the CUDA provider as a plugin: "
                 f"{plugin.package} {plugin.version}, built for CUDA {plugin.cuda}")
        if plugin.library is None:
            return Finding("onnxruntime", "fail", f"{found}, whose {CUDA_PLUGIN_LIBRARY} is "
                           "missing", f"pip install --force-reinstall {plugin.package}")
        return Finding("onnxruntime", "ok", f"{found} ({plugin.library}; onnx-parity registers "
                                            "it where onnxruntime has no CUDA provider)")
    if needs is None:
        return Finding("onnxruntime", "fail",
                       f"{name} {runtime.version} is a CPU build: it has no {CUDA}",
                       f"pip uninstall -y {name} && pip install onnxruntime-gpu")
    built = f"{name} {runtime.version}, built for CUDA {runtime.cuda} and cuDNN {needs.cudnn}"
    if needs.row is None:
        return Finding("onnxruntime", "warn",
                       f"{built} (cuDNN assumed: this release is not in the table)",
                       f"add a row for {_short(needs.ort_version)} to {COMPAT_TABLE}")
    return Finding("onnxruntime", "ok", built)


def _driver_findings(facts: MachineFacts, needs: Requirement | None) -> list[Finding]:
    driver = facts.driver
    if driver.version is None:
        why = "; ".join(driver.problems) or "neither NVML nor nvidia-smi answered"
        return [Finding("driver", "fail", f"no NVIDIA driver found ({why})",
                        "run GPU targets on a machine with an NVIDIA GPU and driver, or pass "
                        "--skip-unavailable to mark them skipped here")]
    cuda_row = needs.cuda_row if needs is not None else None
    found = f"{driver.version}, runs CUDA ≤ {driver.cuda or '?'} (read through {driver.source})"
    findings = []
    if needs is not None and driver.cuda and version_tuple(driver.cuda)[:1] < (needs.cuda,):
        older = newest_release_for(version_tuple(driver.cuda)[0])
        instead = (f", or pip install 'onnxruntime-gpu=={older.last[0]}.{older.last[1]}.*' "
                   f"(built for CUDA {older.cuda})" if older else "")
        minimum = cuda_row.driver if cuda_row else f"a driver for CUDA {needs.cuda}"
        findings.append(Finding(
            "driver", "fail",
            f"{found}; onnxruntime-gpu {_short(needs.ort_version)} needs CUDA {needs.cuda}",
            f"upgrade the NVIDIA driver to {minimum} or newer{instead}"))
    else:
        findings.append(Finding("driver", "ok", found))
    if not driver.gpus:
        findings.append(Finding("GPU", "fail", f"driver {driver.version} sees no GPU",
                                "check that the GPU is visible to this container or job "
                                "(CUDA_VISIBLE_DEVICES, --gpus)"))
    for gpu in driver.gpus:
        memory = f", {gpu.memory_mib} MiB" if gpu.memory_mib else ""
        text = f"#{gpu.index} {gpu.name} (compute capability {gpu.compute or '?'}{memory})"
        least = cuda_row.compute if cuda_row else None
        if least and gpu.compute and version_tuple(gpu.compute)[:2] < least:
            older = newest_release_for(needs.cuda - 1) if needs else None
            instead = (f"pip install 'onnxruntime-gpu=={older.last[0]}.{older.last[1]}.*' "
                       f"(built for CUDA {older.cuda})" if older else "use an older GPU build")
            findings.append(Finding(
                "GPU", "fail",
                f"{text}: CUDA {needs.cuda if needs else '?'} supports compute capability "
                f"{least[0]}.{least[1]} and newer", instead))
        else:
            findings.append(Finding("GPU", "ok", text))
    return findings


def _library_finding(lib: LibraryFacts, needs: Requirement,
                     tensorrt: bool | None) -> Finding | None:
    """One library's finding; `tensorrt`: whether the run asks for TensorRT (None: not known,
    as for `doctor`), whose libraries are left out where it does not."""
    for_tensorrt = lib.provider == TENSORRT
    if for_tensorrt and tensorrt is False:
        return None
    if lib.path is not None:
        version = f" {lib.version}" if lib.version else ""
        return Finding(lib.name, "ok", f"{lib.soname}{version} at {lib.path} ({lib.origin})")
    others = ", ".join(lib.others)
    seen = f"; found {others}" if others else ""
    wrong = (f"found {', '.join(sorted({_soname(p) for p in lib.others}))}"
             if lib.others else f"{lib.soname} is missing")
    release = _short(needs.ort_version)
    pip = f"'{lib.pip}=={lib.pin}'" if lib.pin else lib.pip
    if for_tensorrt:
        fix = (f"onnxruntime-gpu {release}'s TensorRT provider needs TensorRT {needs.tensorrt} "
               f"for CUDA {needs.cuda}; {wrong}: pip install {pip}")
        if tensorrt:
            return Finding(lib.name, "fail", f"{lib.soname} not found{seen}", fix)
        return Finding(lib.name, "warn", f"{lib.soname} not found{seen} (only targets with "
                       f"{TENSORRT} need it)", fix)
    fix = (f"onnxruntime-gpu {release} needs CUDA {needs.cuda} and cuDNN {needs.cudnn}; "
           f"{wrong}: pip install {pip}")
    if lib.required or (lib.name == "cuDNN" and tensorrt):
        linked = "" if lib.required else " (TensorRT's provider links it)"
        return Finding(lib.name, "fail", f"{lib.soname} not found{seen}{linked}", fix)
    if lib.name == "cuDNN":
        why = (f"onnxruntime-gpu {release} loads it only for the ops whose CUDA kernels use it, "
               "convolutions most of all: a model with them fails on CUDA without it"
               + ("; TensorRT's provider links it" if tensorrt is None else ""))
    else:
        why = "only FFT ops need it"
    return Finding(lib.name, "warn", f"{lib.soname} not found{seen} ({why})", fix)


def _soname(path: str) -> str:
    """'/usr/lib/libcudnn.so.8.9.7' -> 'libcudnn.so.8', the name the loader asks for."""
    stem, _, version = path.rsplit("/", 1)[-1].partition(".so.")
    return f"{stem}.so.{version.split('.')[0]}"


def _torch_finding(facts: MachineFacts, needs: Requirement | None) -> Finding:
    torch = facts.torch
    if torch.version is None:
        return Finding("torch", "ok", "not installed: only ONNX models with recorded data")
    if not torch.cuda:
        return Finding("torch", "ok", f"{torch.version}, a CPU build (the reference runs on "
                                      "the CPU; nothing to share)")
    cudnn = version_tuple(torch.cudnn or "")[:1]
    built = (f"{torch.version}, built for CUDA {torch.cuda}"
             + (f" and cuDNN {torch.cudnn}" if torch.cudnn else ""))
    if needs is None:
        return Finding("torch", "ok", built)
    problems = []
    if version_tuple(torch.cuda)[:1] != (needs.cuda,):
        problems.append(f"CUDA {version_tuple(torch.cuda)[0]}")
    if cudnn and cudnn != (needs.cudnn,):
        problems.append(f"cuDNN {cudnn[0]}")
    if not problems:
        return Finding("torch", "ok", f"{built}: shares one CUDA with onnxruntime-gpu")
    return Finding(
        "torch", "warn",
        f"{built}: its {' and '.join(problems)} differs from onnxruntime-gpu's CUDA "
        f"{needs.cuda} / cuDNN {needs.cudnn}, so one process loads two of each",
        f"install a torch built for CUDA {needs.cuda} (pytorch.org lists the index URLs), or "
        f"an onnxruntime-gpu built for CUDA {version_tuple(torch.cuda)[0]}")


# -- the probe ---------------------------------------------------------------------------------

def _worth_probing(facts: MachineFacts, findings: Sequence[Finding]) -> bool:
    """Only where a GPU, a driver and a GPU build of onnxruntime are there: elsewhere the
    answer is known. A conflict between installed builds does not stop it: what imports, and
    what runs, is what counts."""
    gpu_build = requirement(facts.runtime.version or "", facts.runtime.gpu_cuda) is not None
    return bool(facts.driver.gpus) and gpu_build and not any(
        f.status == "fail" and f.check in ("driver", "GPU") for f in findings)


def run_probe(module: str, timeout: float = PROBE_TIMEOUT) -> Probe:
    """Run the probe's `module` (`python -m`) and read its answer, its last line."""
    try:
        done = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Probe(True, False, f"creating a CUDA session took over {timeout:g} s")
    except OSError as exc:
        return Probe(True, False, f"the probe process did not start: {exc}")
    try:
        usable, reason = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):  # it crashed: its last words are the reason
        tail = " ".join(done.stderr.split()[-40:]) or f"exit code {done.returncode}"
        return Probe(True, False, f"the probe process failed: {tail}")
    return Probe(True, bool(usable), str(reason))


def _probe_finding(probe: Probe) -> Finding:
    if probe.usable:
        return Finding("CUDA session", "ok",
                       f"ONNX Runtime ran a session on {CUDA} in a fresh process")
    return Finding("CUDA session", "fail", f"ONNX Runtime did not run on CUDA: {probe.reason}",
                   "fix the problems above; the reason is what ONNX Runtime logged")
