"""The one compatibility table: what each onnxruntime-gpu needs from CUDA, cuDNN and the driver.

docs/gpu.md cites this file; `onnx-parity doctor` judges a machine against it. Each row says where
its facts come from. The CUDA version a wheel was built for is also read from the wheel itself
(`onnxruntime/capi/build_and_package_info.py`), and that reading wins over the table; the table
supplies what the wheel does not record: the cuDNN major, and the driver and GPUs a CUDA major
needs.
"""

from __future__ import annotations

from dataclasses import dataclass

# Providers that run on an NVIDIA GPU and load the libraries below: a target asking for one
# gets the preflight, and its session's node placement is checked.
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider",
                 "NvTensorRTRTXExecutionProvider")


@dataclass(frozen=True)
class OrtRow:
    """Releases first..last (major, minor) of the default onnxruntime-gpu wheel on PyPI."""

    first: tuple[int, int]
    last: tuple[int, int]
    cuda: int
    cudnn: int
    source: str


ORT_ROWS: tuple[OrtRow, ...] = (
    OrtRow((1, 31), (1, 31), cuda=13, cudnn=9,
           source="measured: 1.31.1 reports cuda_version 13.0 and logs 'Require cuDNN 9.* and "
                  "CUDA 13.*'"),
    OrtRow((1, 24), (1, 26), cuda=12, cudnn=9, source="measured: built for CUDA 12.8"),
    OrtRow((1, 19), (1, 23), cuda=12, cudnn=9,
           source="ONNX Runtime docs, CUDA EP requirements: CUDA 12.x is the PyPI default "
                  "from 1.19, with cuDNN 9"),
    OrtRow((1, 15), (1, 18), cuda=11, cudnn=8,
           source="ONNX Runtime docs, CUDA EP requirements: CUDA 11.8 and cuDNN 8 on PyPI"),
)


@dataclass(frozen=True)
class CudaRow:
    """What one CUDA major needs from the machine (NVIDIA's CUDA and cuDNN release notes)."""

    major: int
    driver: str  # the oldest Linux driver that runs every minor release of this major
    compute: tuple[int, int]  # the oldest GPU compute capability its libraries support
    cufft: str  # cuFFT's own soname major that ships with this CUDA major
    pip_folder: str  # where the pip `nvidia-*` wheels put the libraries, under site-packages


CUDA_ROWS: dict[int, CudaRow] = {
    13: CudaRow(13, driver="580.65.06", compute=(7, 5), cufft="12", pip_folder="nvidia/cu13/lib"),
    12: CudaRow(12, driver="525.60.13", compute=(5, 0), cufft="11", pip_folder="nvidia/{lib}/lib"),
    11: CudaRow(11, driver="450.80.02", compute=(3, 5), cufft="10", pip_folder="nvidia/{lib}/lib"),
}


@dataclass(frozen=True)
class LibraryNeed:
    """One shared library the CUDA execution provider loads, and the wheel that provides it."""

    name: str  # as people say it: "cuBLASLt"
    soname: str
    pip: str  # the pip package that ships it
    folder: str  # its folder under site-packages when installed from pip
    required: bool  # False: only some ops need it, and the provider loads without it


def libraries(cuda: int, cudnn: int) -> tuple[LibraryNeed, ...]:
    """The libraries onnxruntime-gpu built for `cuda` and `cudnn` loads, in the order it does.

    cudart, cuBLAS, cuBLASLt and cuRAND are linked: without one the provider does not load.
    cuDNN is loaded when the session starts; cuFFT only by the FFT ops. From CUDA 13 the pip
    wheels drop the -cuNN suffix and share one folder (cuDNN keeps both).
    """
    row = CUDA_ROWS.get(cuda, CUDA_ROWS[max(CUDA_ROWS)])
    suffix = "" if cuda >= 13 else f"-cu{cuda}"

    def need(name: str, soname: str, package: str, component: str, required: bool) -> LibraryNeed:
        folder = row.pip_folder.format(lib=component)
        return LibraryNeed(name, soname, f"nvidia-{package}{suffix}", folder, required)

    cudart = f"libcudart.so.{cuda}" if cuda >= 12 else "libcudart.so.11.0"
    return (
        need("CUDA runtime", cudart, "cuda-runtime", "cuda_runtime", True),
        need("cuBLAS", f"libcublas.so.{cuda}", "cublas", "cublas", True),
        need("cuBLASLt", f"libcublasLt.so.{cuda}", "cublas", "cublas", True),
        need("cuRAND", "libcurand.so.10", "curand", "curand", True),
        need("cuFFT", f"libcufft.so.{row.cufft}", "cufft", "cufft", False),
        LibraryNeed("cuDNN", f"libcudnn.so.{cudnn}", f"nvidia-cudnn-cu{cuda}", "nvidia/cudnn/lib",
                    True),
    )


@dataclass(frozen=True)
class Requirement:
    """What one installed onnxruntime-gpu needs; `row` is None when the table lacks its release."""

    ort_version: str
    cuda: int
    cudnn: int
    row: OrtRow | None

    @property
    def cuda_row(self) -> CudaRow | None:
        return CUDA_ROWS.get(self.cuda)


def requirement(ort_version: str, built_cuda: str | None) -> Requirement | None:
    """The needs of onnxruntime `ort_version`, whose wheel says it was built for `built_cuda`.

    None for a CPU build. A release missing from the table is judged by its own CUDA version,
    with cuDNN 9 for CUDA 12 and later from 1.19 on (cuDNN 8 before), as the docs say.
    """
    if not built_cuda:
        return None
    cuda = _major(built_cuda)
    release = _release(ort_version)
    row = next((r for r in ORT_ROWS if release and r.first <= release <= r.last), None)
    if row is not None and row.cuda == cuda:
        return Requirement(ort_version, cuda, row.cudnn, row)
    cudnn = 9 if cuda >= 12 and (release is None or release >= (1, 19)) else 8
    return Requirement(ort_version, cuda, cudnn, None)


def newest_release_for(cuda: int) -> OrtRow | None:
    """The newest release in the table built for CUDA `cuda` or older, for a fix-it line."""
    rows = [r for r in ORT_ROWS if r.cuda <= cuda]
    return max(rows, key=lambda r: r.last) if rows else None


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6); stops at the first part that is not a number."""
    parts: list[int] = []
    for part in text.replace("+", ".").replace("-", ".").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _major(version: str) -> int:
    parts = version_tuple(version)
    return parts[0] if parts else 0


def _release(version: str) -> tuple[int, int] | None:
    parts = version_tuple(version)
    return (parts[0], parts[1]) if len(parts) >= 2 else None
