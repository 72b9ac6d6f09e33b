# onnx-parity's CUDA image:
#   docker run --rm --gpus all --user "$(id -u):$(id -g)" -v "$PWD:/work" IMAGE run parity.yaml
#
# One CUDA set. onnxruntime-gpu 1.31 is built for CUDA 13.0 and cuDNN 9; torch 2.13's CUDA 13.0
# build brings exactly those as nvidia-* wheels (cuBLAS, cuDNN, cuFFT, cuRAND, NVRTC, the runtime),
# and onnxruntime-gpu[cuda,cudnn] accepts the same wheels. NVIDIA's *base* image adds no CUDA
# library of its own beyond the runtime of the same 13.0 release (scripts/cuda_set.py fails the
# build if they differ); it is here for its driver requirement (NVIDIA_REQUIRE_CUDA: the container
# toolkit refuses a host driver too old for CUDA 13, which needs driver 580 or newer, with a
# clear message) and its forward-compatibility libraries for data-centre GPUs.
#
# The base is pinned by tag and by digest. The digest is the one public projects pin for this tag;
# it was not pulled from the registry here (no Docker engine on the project's machines), so the
# first build in image.yml is what confirms it.
ARG BASE_IMAGE=nvidia/cuda:13.0.2-base-ubuntu24.04@sha256:2ab6381d970b211fb93853796dc6707eb8a72575a375c422b17cf4d8b2641701

# --- build: a virtual environment with every dependency pinned by constraints.txt ---------------
FROM ${BASE_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Ubuntu's archive keeps only the current build of a package: exact apt pins break the build
# within weeks. The base digest pins the release; Python's own packages are pinned below.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3.12 python3.12-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3.12 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /opt/src
COPY pyproject.toml README.md constraints.txt ./
COPY scripts/ scripts/
COPY src/ src/
# The same script CI runs in a fresh virtual environment with TORCH_VARIANT=cpu.
# pip's cache is off (PIP_NO_CACHE_DIR); the bytecode pip compiles stays, or every start of the
# container would compile torch again as a user who cannot write it.
RUN TORCH_VARIANT=cu130 CUDA_LDCONFIG=/opt/venv/cuda-libraries.conf bash scripts/install.sh . \
 && python -m pip check

# --- runtime: Python, the virtual environment, nothing used only to build it --------------------
FROM ${BASE_IMAGE} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.12 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/venv/cuda-libraries.conf /etc/ld.so.conf.d/000-onnx-parity-cuda.conf
RUN ldconfig
COPY entrypoint.py /opt/onnx-parity/entrypoint.py
COPY examples/ /opt/onnx-parity/examples/

# A non-root user for `docker run`. Its uid is the one GitHub's hosted runners use (1001), so the
# files it writes into a mounted checkout belong to the runner; the action passes
# `--user $(id -u):$(id -g)` anyway, which covers self-hosted runners with other uids. A job that
# uses this image as its `container:` needs `options: --user root` (docs/action.md: "A GPU runner").
RUN groupadd --gid 1001 parity \
 && useradd --uid 1001 --gid 1001 --create-home --shell /usr/sbin/nologin parity \
 && install -d -o parity -g parity /work
USER 1001:1001
WORKDIR /work
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="onnx-parity" \
      org.opencontainers.image.description="A merge gate that keeps PyTorch models and their ONNX exports numerically honest." \
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["/opt/venv/bin/python", "/opt/onnx-parity/entrypoint.py"]
