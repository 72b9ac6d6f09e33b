"""The one compatibility table: what each onnxruntime-gpu needs from CUDA, cuDNN, TensorRT and
the driver.

docs/gpu.md cites this file; `onnx-parity doctor` judges a machine against it. Each row says where
its facts come from. The CUDA version a wheel was built for is also read from the wheel itself
(`onnxruntime/capi/build_and_package_info.py`), and that reading wins over the table; the table
supplies what the wheel does not record: the cuDNN major and whether the CUDA provider needs it
to load, the TensorRT major, and the driver and GPUs a CUDA major needs.
"""

from __future__ import annotations

from onnx_parity.frozen import frozen
from onnx_parity.literals import CUDA, TENSORRT, TENSORRT_RTX

# Providers that run on an NVIDIA GPU and load the libraries below: a target asking for one
# gets the preflight, and its session's node placement is checked.
GPU_PROVIDERS = (CUDA, TENSORRT, TENSORRT_RTX)

# From ONNX Runtime 1.28 the CUDA provider also comes as a plugin, installed apart from
# onnxruntime and registered at run time under the same provider name. The names are those of
# ONNX Runtime's own packaging sources (microsoft/onnxruntime, plugin-ep-cuda/README.md and
# plugin-ep-cuda/python/onnxruntime_ep_cuda/__init__.py): the pip distributions
# onnxruntime-ep-cuda12 and onnxruntime-ep-cuda13, one import module, one library. Whether the
# wheels are on PyPI was not confirmed, and no plugin install has been measured here.
CUDA_PLUGIN_PACKAGES = {13: "onnxruntime-ep-cuda13", 12: "onnxruntime-ep-cuda12"}
CUDA_PLUGIN_MODULE = "onnxruntime_ep_cuda"
CUDA_PLUGIN_LIBRARY = "libonnxruntime_providers_cuda.so"


@frozen
class OrtRow:
    """Releases first..last (major, minor) of the default onnxruntime-gpu wheel on PyPI."""

    first: tuple[int, int]
    last: tuple[int, int]
    cuda: int
    cudnn: int
    source: str
    # The CUDA provider loads cuDNN only when a kernel needs it (from 1.28): without it the
    # provider still loads, and the ops whose CUDA kernels use cuDNN fail.
    cudnn_optional: bool = False


ORT_ROWS: tuple[OrtRow, ...] = (
    OrtRow((1, 31), (1, 31), cuda=13, cudnn=9, cudnn_optional=True,
           source="measured: 1.31.1 reports cuda_version 13.0 and logs 'Require cuDNN 9.* and "
                  "CUDA 13.*'; its CUDA provider library links no cuDNN (readelf), its TensorRT "
                  "provider links libnvinfer.so.10, libnvonnxparser.so.10 and libcudnn.so.9"),
    OrtRow((1, 28), (1, 30), cuda=13, cudnn=9, cudnn_optional=True,
           source="ONNX Runtime 1.28.0 release notes: CUDA 13 wheels, cuDNN and cuFFT optional "
                  "at run time (microsoft/onnxruntime#29252, #29808); 1.29 and 1.30 not "
                  "measured"),
    OrtRow((1, 27), (1, 27), cuda=13, cudnn=9,
           source="ONNX Runtime 1.27.0 release candidates (microsoft/onnxruntime#29032): the "
                  "PyPI GPU package is built for CUDA 13, the CUDA 12 packages deprecated"),
    OrtRow((1, 24), (1, 26), cuda=12, cudnn=9, source="measured: built for CUDA 12.8"),
    OrtRow((1, 19), (1, 23), cuda=12, cudnn=9,
           source="ONNX Runtime docs, CUDA EP requirements: CUDA 12.x is the PyPI default "
                  "from 1.19, with cuDNN 9"),
    OrtRow((1, 15), (1, 18), cuda=11, cudnn=8,
           source="ONNX Runtime docs, CUDA EP requirements: CUDA 11.8 and cuDNN 8 on PyPI"),
)


@frozen
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


def tensorrt_major(release: tuple[int, int] | None) -> int:
    """The TensorRT major (libnvinfer.so.N) onnxruntime-gpu's TensorRT provider links: 8 before
    1.18 and 10 from it (ONNX Runtime docs, TensorRT EP requirements: 1.15-1.17 TensorRT 8.6,
    1.18-1.22 TensorRT 10.0-10.9; measured: 1.31.1 links libnvinfer.so.10; 1.23-1.30 taken to
    be 10 as well). pip's newest TensorRT is 11, which this provider does not load."""
    return 8 if release is not None and release < (1, 18) else 10


@frozen
class LibraryNeed:
    """One shared library an NVIDIA execution provider loads, and the wheel that provides it."""

    name: str  # as people say it: "cuBLASLt"
    soname: str
    pip: str  # the pip package that ships it
    folder: str  # its folder under site-packages when installed from pip
    required: bool  # False: only some ops need it, and the provider loads without it
    provider: str = CUDA  # the provider that loads it
    pin: str = ""  # the versions of `pip` that fit, where its newest does not: "10.*"


def libraries(cuda: int, cudnn: int, *, cudnn_optional: bool = False) -> tuple[LibraryNeed, ...]:
    """The libraries onnxruntime-gpu built for `cuda` and `cudnn` loads, in the order it does.

    cudart, cuBLAS, cuBLASLt and cuRAND are linked: without one the provider does not load.
    cuDNN is loaded when the session starts (from 1.28, `cudnn_optional`: when a kernel needs
    it); cuFFT only by the FFT ops. From CUDA 13 the pip wheels drop the -cuNN suffix and share
    one folder (cuDNN keeps both).
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
                    not cudnn_optional),
    )


def tensorrt_libraries(cuda: int, tensorrt: int) -> tuple[LibraryNeed, ...]:
    """The libraries onnxruntime-gpu's TensorRT provider links besides CUDA's (and cuDNN, which it
    links too): TensorRT itself and its ONNX parser, both in pip's tensorrt-cuNN-libs wheel,
    under site-packages/tensorrt_libs."""
    package = f"tensorrt-cu{cuda}-libs"
    return tuple(LibraryNeed(name, f"{stem}.so.{tensorrt}", package, "tensorrt_libs", True,
                             provider=TENSORRT, pin=f"{tensorrt}.*")
                 for name, stem in (("TensorRT", "libnvinfer"),
                                    ("TensorRT ONNX parser", "libnvonnxparser")))


@frozen
class Requirement:
    """What one installed onnxruntime-gpu needs; `row` is None when the table lacks its release."""

    ort_version: str
    cuda: int
    cudnn: int
    row: OrtRow | None
    cudnn_optional: bool = False
    tensorrt: int = 10

    @property
    def cuda_row(self) -> CudaRow | None:
        return CUDA_ROWS.get(self.cuda)


def requirement(ort_version: str, built_cuda: str | None) -> Requirement | None:
    """The needs of onnxruntime `ort_version`, whose wheel says it was built for `built_cuda`.

    None for a CPU build. A release missing from the table is judged by its own CUDA version,
    with cuDNN 9 for CUDA 12 and later from 1.19 on (cuDNN 8 before), as the docs say, and
    optional from 1.28 on, as its release notes say.
    """
    if not built_cuda:
        return None
    cuda = _major(built_cuda)
    release = _release(ort_version)
    tensorrt = tensorrt_major(release)
    row = next((r for r in ORT_ROWS if release and r.first <= release <= r.last), None)
    if row is not None and row.cuda == cuda:
        return Requirement(ort_version, cuda, row.cudnn, row, row.cudnn_optional, tensorrt)
    cudnn = 9 if cuda >= 12 and (release is None or release >= (1, 19)) else 8
    optional = release is not None and release >= (1, 28)
    return Requirement(ort_version, cuda, cudnn, None, optional, tensorrt)


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
