#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds nnc with
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install_deps.sh
# cuda-sm70's device code is checked with CUDA 12's headers and ptxas (CUDA
# 13 dropped Volta): without them (no PyPI) that one check is skipped
bash tests/volta_toolchain.sh build/cuda12 \
  || echo "warning: CUDA 12 from PyPI not fetched: the cuda-sm70 device-code check will be skipped"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if [ ! -d build/asan ]; then
  meson setup build/asan -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug
fi
ninja -C build/asan
meson test -C build/asan --print-errorlogs "$@"
# The demo builds with optimisation, where gcc warns about more: -Werror
# must hold there too.
if [ ! -d build/release ]; then
  meson setup build/release --buildtype=release >/dev/null
fi
ninja -C build/release >/dev/null
echo "release build: ok"
