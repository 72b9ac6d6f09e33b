"""Facts about the machine a run happened on: versions of everything that decides the numbers, and
what decides whether ONNX Runtime can run on an NVIDIA GPU here (driver, GPUs, the CUDA and cuDNN
libraries it would load, the CUDA versions onnxruntime-gpu and torch were built for).

Reading only: nothing here imports torch or onnxruntime or loads a CUDA library, so it is fast
and harmless on a machine without a GPU. Every reader takes its sources as arguments (the NVML
module, nvidia-smi, folders, the environment), so recorded findings can stand in for a machine.
Judging the facts is preflight.py's job; the values they fill (MachineFacts and its parts) are
findings.py's, so that a run's report holds them.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnx_parity.findings import (
    DriverFacts,
    Gpu,
    LibraryFacts,
    MachineFacts,
    PluginFacts,
    RuntimeFacts,
    TorchFacts,
)
from onnx_parity.machine.compat import (
    CUDA_PLUGIN_LIBRARY,
    CUDA_PLUGIN_MODULE,
    CUDA_PLUGIN_PACKAGES,
    libraries,
    requirement,
    tensorrt_libraries,
)
from onnx_parity.machine.libraries import (
    SYSTEM_FOLDERS,
    default_pip_roots,
    describe_search,
    find_libraries,
    package_file,
    read_ld_cache,
)
from onnx_parity.machine.versions import PACKAGES, read_versions  # noqa: F401  (re-exported)

# -- the facts ---------------------------------------------------------------------------------

# -- reading them ------------------------------------------------------------------------------

# nvidia-smi's stdout for these arguments; None where there is no nvidia-smi.
Smi = Callable[[Sequence[str]], "str | None"]


def read_machine(*, nvml: Any = None, smi: Smi | None = None, env: Mapping[str, str] | None = None,
           pip_roots: Sequence[Path] | None = None, ld_cache: Mapping[str, str] | None = None,
           system_folders: Sequence[str] = SYSTEM_FOLDERS) -> MachineFacts:
    """Read this machine; each keyword replaces one source (recorded findings in tests)."""
    runtime = read_runtime()
    driver = read_driver(nvml, smi or run_nvidia_smi)
    needs = requirement(runtime.version or "", runtime.gpu_cuda)
    env = os.environ if env is None else env
    roots = default_pip_roots() if pip_roots is None else pip_roots
    cache = read_ld_cache() if ld_cache is None else ld_cache
    found: tuple[LibraryFacts, ...] = ()
    if needs is not None:
        wanted = libraries(needs.cuda, needs.cudnn, cudnn_optional=needs.cudnn_optional)
        if runtime.tensorrt:
            wanted += tensorrt_libraries(needs.cuda, needs.tensorrt)
        found = find_libraries(wanted, roots, env, cache, system_folders)
    return MachineFacts(driver=driver, runtime=runtime, torch=read_torch(), libraries=found,
                        search=describe_search(roots, env, cache, system_folders))


def read_driver(nvml: Any, smi: Smi) -> DriverFacts:
    """NVML first (nvidia-ml-py, imported here and only here), nvidia-smi second."""
    problems: list[str] = []
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError:
            problems.append("NVML: nvidia-ml-py is not installed")
    if nvml is not None:
        try:
            return read_nvml(nvml)
        except Exception as exc:  # NVMLError and its kin: no driver, no library, no permission
            problems.append(f"NVML: {_clean(str(exc)) or type(exc).__name__}")
    try:
        facts = read_nvidia_smi(smi)
    except Exception as exc:
        problems.append(f"nvidia-smi: {_clean(str(exc)) or type(exc).__name__}")
    else:
        if facts is not None:
            return replace(facts, problems=tuple(problems))
        problems.append("nvidia-smi: not found on PATH")
    return DriverFacts(problems=tuple(problems))


def read_nvml(nvml: Any) -> DriverFacts:
    nvml.nvmlInit()
    try:
        version = _text(nvml.nvmlSystemGetDriverVersion())
        cuda_number = int(nvml.nvmlSystemGetCudaDriverVersion())
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                compute: str | None = f"{major}.{minor}"
            except Exception:
                compute = None
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20
            gpus.append(Gpu(index, _text(nvml.nvmlDeviceGetName(handle)), memory, compute))
    finally:
        nvml.nvmlShutdown()
    cuda = f"{cuda_number // 1000}.{cuda_number % 1000 // 10}"
    return DriverFacts(source="NVML", version=version, cuda=cuda, gpus=tuple(gpus))


_SMI_QUERY = ("--query-gpu=index,name,memory.total,compute_cap,driver_version",
              "--format=csv,noheader,nounits")


def read_nvidia_smi(smi: Smi) -> DriverFacts | None:
    """The GPU table from a CSV query, the CUDA version from the plain banner."""
    table = smi(list(_SMI_QUERY))
    if table is None:
        return None
    gpus, version = [], None
    for row in table.strip().splitlines():
        cells = [c.strip() for c in row.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        memory = int(cells[2]) if cells[2].isdigit() else None
        compute = cells[3] if re.fullmatch(r"\d+\.\d+", cells[3]) else None
        gpus.append(Gpu(int(cells[0]), cells[1], memory, compute))
        version = cells[4]
    banner = smi([]) or ""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", banner)
    return DriverFacts(source="nvidia-smi", version=version,
                       cuda=match.group(1) if match else None, gpus=tuple(gpus))


def run_nvidia_smi(args: Sequence[str]) -> str | None:
    command = shutil.which("nvidia-smi")
    if command is None:
        return None
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=20,
                          check=False)
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit code {done.returncode}")
    return done.stdout


def read_runtime() -> RuntimeFacts:
    """Which onnxruntime distributions share the `onnxruntime` folder, and what build is there.

    onnxruntime, onnxruntime-gpu and their kin all install into that one folder, so with two of
    them the files are whichever was installed last; the build file inside tells which.
    """
    owners: dict[str, str] = {}
    locations: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name != "onnxruntime" and not name.startswith(("onnxruntime-", "ort-nightly")):
            continue
        if any(f.parts[:2] == ("onnxruntime", "capi") for f in dist.files or ()):
            owners[name] = dist.version
            locations[name] = _resolved(Path(str(dist.locate_file("onnxruntime"))))
    build = package_file("onnxruntime", "capi/build_and_package_info.py")
    values = _assignments(build) if build else {}
    return RuntimeFacts(
        distributions=dict(sorted(owners.items())),
        package=values.get("package_name"),
        version=values.get("__version__"),
        cuda=values.get("cuda_version") or None,
        folder=_resolved(build.parent.parent) if build else None,
        locations=dict(sorted(locations.items())),
        tensorrt=bool(build and (build.parent / "libonnxruntime_providers_tensorrt.so").is_file()),
        cuda_plugin=read_cuda_plugin(),
    )


def read_cuda_plugin() -> PluginFacts | None:
    """The CUDA provider's plugin package, where one is installed (the newest CUDA first)."""
    for cuda, package in sorted(CUDA_PLUGIN_PACKAGES.items(), reverse=True):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        library = package_file(CUDA_PLUGIN_MODULE, CUDA_PLUGIN_LIBRARY)
        return PluginFacts(package, version, str(cuda),
                           _resolved(library) if library is not None else None)
    return None


def _resolved(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return str(path)


def read_torch() -> TorchFacts:
    """torch's build from torch/version.py and its cuDNN wheel from its requirements."""
    source = package_file("torch", "version.py")
    if source is None:
        return TorchFacts()
    values = _assignments(source)
    cudnn = None
    try:
        for requirement_text in importlib.metadata.requires("torch") or ():
            match = re.match(r"nvidia-cudnn-cu\d+\s*==\s*([\d.]+)", requirement_text)
            if match:
                cudnn = match.group(1)
    except importlib.metadata.PackageNotFoundError:
        pass
    return TorchFacts(version=values.get("__version__"), cuda=values.get("cuda") or None,
                      cudnn=cudnn)


def _assignments(path: Path) -> dict[str, str]:
    """Top-level `name = 'text'` assignments of a generated Python file, without running it."""
    values: dict[str, str] = {}
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return values
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and isinstance(value.value, str):
            values[target.id] = value.value
    return values


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _clean(text: str) -> str:
    return " ".join(text.split())
