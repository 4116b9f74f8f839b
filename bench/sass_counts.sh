#!/usr/bin/env bash
# bench/sass_counts.sh FILE.cu [PATTERN] [-- NVCC_ARGS...]: the SASS of a CUDA
# file's kernels without a GPU, counted per kernel: how many instructions,
# wgmma products (HGMMA), moves into uniform registers (R2UR: a descriptor
# the compiler did not know to be warp-uniform), MUFU, barriers, mbarrier
# waits (SYNCS), shuffles, local loads/stores (spills). PATTERN (a regular
# expression, default: every kernel) picks kernels by mangled name.
# cuobjdump and nvdisasm are not in the CUDA toolkit this machine installs;
# PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry them,
# and this script fetches them once into build/tools. Default NVCC_ARGS: -O3 for sm_90a with NNC_CUDA_SM90A,
# templates/cuda, tests/gpu, runtime and the repository on the include path.
#   bash bench/sass_counts.sh tests/gpu/test_gemm_tma.cu 'gemm_tma_kernel.*bfloat16'
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: sass_counts.sh FILE.cu [PATTERN] [-- NVCC_ARGS...]}
pattern=${2:-.}
shift $(( $# >= 2 ? 2 : 1 ))
[ "${1:-}" = -- ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A
                               -I"$ROOT/templates/cuda" -I"$ROOT/tests/gpu" -I"$ROOT" -I"$ROOT/runtime" -I"$ROOT/runtime/cuda")
tools=$ROOT/build/tools
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$tools"
  python3 -m pip download --quiet --no-deps --dest "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null
  (cd "$tools" && for w in nvidia_cuda_cuobjdump-*.whl nvidia_cuda_nvdisasm-*.whl; do python3 -m zipfile -e "$w" .; done)
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc "${args[@]}" -cubin -o "$work/k.cubin" "$src"
PATH=$bin:$PATH cuobjdump -sass "$work/k.cubin" > "$work/k.sass"
python3 - "$work/k.sass" "$pattern" <<'PY'
import collections, re, sys
text, pattern = open(sys.argv[1]).read(), sys.argv[2]
keys = ["HGMMA", "R2UR", "MUFU", "BAR", "SYNCS", "SHFL", "LDL", "STL"]
print("| kernel | instructions | " + " | ".join(keys) + " |")
print("| --- | ---: | " + " | ".join("---:" for _ in keys) + " |")
for fn in re.split(r"\n\s*Function : ", text)[1:]:
    name = fn.split("\n", 1)[0].strip()
    if not re.search(pattern, name):
        continue
    ops = re.findall(r"/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", fn)
    c = collections.Counter(o.split(".")[0] for o in ops)
    print(f"| {name[:90]} | {len(ops)} | " + " | ".join(str(c[k]) for k in keys) + " |")
PY
