"""Check that the image holds one CUDA set, and make it the one every library loads.

    python scripts/cuda_set.py CUDA_VERSION [--ldconfig FILE]

CUDA_VERSION is the base image's (NVIDIA's images set it, e.g. 13.0.2). The CUDA runtime wheel that
torch brought, torch's own CUDA build and onnxruntime-gpu's CUDA major must all be that release,
and cuDNN must be 9; anything else exits 1 naming what disagrees. With --ldconfig, the folders of
the nvidia-* wheels are written to FILE for /etc/ld.so.conf.d/, so ONNX Runtime's CUDA provider
loads the same cuBLAS and cuDNN that torch does, whichever of the two is imported first.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

CUDNN_MAJOR = "9"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> str:
    return ".".join(version.split(".")[:2])


def problems(cuda_version: str) -> list[str]:
    want = _release(cuda_version)
    found: list[str] = []
    runtime = _version("nvidia-cuda-runtime")
    if runtime is None:
        found.append("no nvidia-cuda-runtime wheel: torch's CUDA build was not installed")
    elif _release(runtime) != want:
        found.append(f"nvidia-cuda-runtime {runtime} is CUDA {_release(runtime)}, "
                     f"the base image is CUDA {cuda_version}")
    cudnn = _version("nvidia-cudnn-cu13")
    if cudnn is None or cudnn.split(".")[0] != CUDNN_MAJOR:
        found.append(f"cuDNN {CUDNN_MAJOR} wheel (nvidia-cudnn-cu13) missing or wrong: {cudnn}")
    import torch  # only here: the CUDA build imports without a GPU

    if torch.version.cuda is None or _release(torch.version.cuda) != want:
        found.append(f"torch {torch.__version__} is built for CUDA {torch.version.cuda}, "
                     f"the base image is CUDA {cuda_version}")
    ort = _version("onnxruntime-gpu")
    if ort is None:
        found.append("onnxruntime-gpu is not installed")
    return found


def library_folders() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    folders = {
        library.parent
        for root in spec.submodule_search_locations
        for library in Path(root).glob("**/lib/*.so*")
    }
    return sorted(folders)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Check that the image holds one CUDA set.")
    parser.add_argument("cuda_version")
    parser.add_argument("--ldconfig", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    found = problems(args.cuda_version)
    for problem in found:
        print(f"cuda_set: {problem}", file=sys.stderr)
    if found:
        return 1
    folders = library_folders()
    print(f"cuda_set: one CUDA {args.cuda_version} set, in {len(folders)} wheel folders")
    if args.ldconfig is not None:
        args.ldconfig.write_text("".join(f"{folder}\n" for folder in folders))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
