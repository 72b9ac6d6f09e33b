#!/usr/bin/env bash
# Install onnx-parity and its pinned dependencies (constraints.txt) into the current Python.
#
# One install, three callers: the Dockerfile (TORCH_VARIANT=cu130), CI's test of the image's
# install steps in a fresh virtual environment (scripts/test-image-install.sh, TORCH_VARIANT=cpu),
# and the action on runners that do not use the image (TORCH_VARIANT=cpu, or keep).
#
#   scripts/install.sh [SOURCE]     SOURCE: the onnx-parity source tree (default: this checkout)
#
# TORCH_VARIANT    cu130: torch's CUDA 13.0 build and the CUDA/cuDNN wheels onnxruntime-gpu needs
#                  cpu:   torch's CPU build (default)
#                  keep:  the torch already installed stays; everything else is pinned
# TORCH_INDEX_URL  where that torch build comes from (default: download.pytorch.org/whl/VARIANT);
#                  empty: only pip's own configuration (an offline wheelhouse, say)
# PYTHON           the Python to install into (default: `python` on PATH)
set -euo pipefail
python="${PYTHON:-python}"

source_dir="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
constraints="$source_dir/constraints.txt"
variant="${TORCH_VARIANT:-cpu}"
torch_pin="$(grep -E '^torch==' "$constraints")"

# Wheels only: the image carries no compiler, and a dependency that would need one is a
# surprise to find here rather than in a build log on a GPU runner.
pip_install=("$python" -m pip install --no-cache-dir --disable-pip-version-check
             --only-binary=:all:)
requirements=()
index=""
case "$variant" in
  keep)
    if ! torch_version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"; then
      echo "install.sh: TORCH_VARIANT=keep, but this Python has no torch" >&2
      exit 2
    fi
    echo "install.sh: keeping torch $torch_version"
    kept="$(mktemp)"
    trap 'rm -f "$kept"' EXIT
    grep -vE '^torch==' "$constraints" >"$kept"
    constraints="$kept"
    ;;
  cpu | cu[0-9]*)
    index="${TORCH_INDEX_URL-https://download.pytorch.org/whl/$variant}"
    # The local version (+cpu, +cu130) exists only on PyTorch's index, never on PyPI, so the
    # extra index cannot hand over a look-alike. macOS wheels carry no local version.
    if [[ "$(uname -s)" == Linux ]]; then
      requirements+=("$torch_pin+$variant")
    else
      requirements+=("$torch_pin")
    fi
    if [[ "$variant" == cu* ]]; then
      requirements+=("onnxruntime-gpu[cuda,cudnn]")
    fi
    ;;
  *)
    echo "install.sh: TORCH_VARIANT must be cu130, cpu or keep; got '$variant'" >&2
    exit 2
    ;;
esac

"${pip_install[@]}" ${index:+--extra-index-url "$index"} --constraint "$constraints" \
  "${requirements[@]}" "$source_dir"

if [[ "$variant" == cu* ]]; then
  # The CUDA wheels torch brought must be the variant's release and, on NVIDIA's base image
  # (which sets CUDA_VERSION), the base's release too: never two CUDA sets that disagree.
  release="${CUDA_VERSION:-$(sed -E 's/^cu([0-9]+)([0-9])$/\1.\2/' <<<"$variant")}"
  "$python" "$source_dir/scripts/cuda_set.py" "$release" ${CUDA_LDCONFIG:+--ldconfig "$CUDA_LDCONFIG"}
fi
