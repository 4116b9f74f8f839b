#!/usr/bin/env bash
# tests/volta_toolchain.sh DIR: what checks nnc's cuda-sm70 device code, put
# together in DIR. CUDA 13's nvcc rejects Volta (sm_70), and Debian has no
# CUDA 12 nvcc, so the check compiles the generated .cu files' device code
# with clang 19 (Debian) against CUDA 12's headers and assembles the PTX with
# CUDA 12's ptxas, both from NVIDIA's PyPI wheels (pip download, nothing
# installed into Python). DIR then holds include/, nvvm/libdevice/,
# bin/ptxas and version.json, the layout clang's --cuda-path expects.
set -euo pipefail
dir=$1
[ -x "$dir/bin/ptxas" ] && exit 0
ver=12.9
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps -d "$tmp" "nvidia-cuda-nvcc-cu12==$ver.*" "nvidia-cuda-runtime-cu12==$ver.*"
for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
rm -rf "$dir" && mkdir -p "$dir/include" "$dir/bin" "$dir/nvvm"
cp -r "$tmp/x/nvidia/cuda_runtime/include/." "$tmp/x/nvidia/cuda_nvcc/include/." "$dir/include/"
cp -r "$tmp/x/nvidia/cuda_nvcc/nvvm/libdevice" "$dir/nvvm/"
install -m 755 "$tmp/x/nvidia/cuda_nvcc/bin/ptxas" "$dir/bin/ptxas"
echo "{\"cuda\": {\"name\": \"CUDA SDK\", \"version\": \"$ver\"}}" > "$dir/version.json"
"$dir/bin/ptxas" --version | tail -1
