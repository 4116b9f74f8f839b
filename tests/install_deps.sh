#!/usr/bin/env bash
# Installs the Debian 12 packages nnc needs to build and test, when missing.
set -euo pipefail
pkgs=(gcc make meson ninja-build pkg-config liblua5.4-dev lua5.4 libcmocka-dev
      ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclang-14-dev clang-19
      openmpi-bin libopenmpi-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
# pip fetches the CUDA 12 pieces of the Volta check (tests/volta_toolchain.sh)
python3 -m pip --version > /dev/null 2>&1 || pkgs+=(python3-pip)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
