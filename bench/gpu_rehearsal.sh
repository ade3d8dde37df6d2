#!/usr/bin/env bash
# make gpu-rehearsal (issues 21, 53): the GPU check's dry run in the device image's versions, on a CPU.
#   bash bench/gpu_rehearsal.sh [--out DIR]
#   bash bench/gpu_rehearsal.sh --setup-only      # only the venv and the wheels (make test, early)
#   bash bench/gpu_rehearsal.sh --device-wheels   # the wheels a device call carries, into .whl/
# The device image (bench/GPU_CHECK.md) has python 3.12, torch 2.11+cu130, Triton 3.6, transformers
# 5.17, psutil (transformers' continuous batching on a CPU needs it), none of bench/gpu_wheels.txt
# (fastcore, the server's fastapi, uvicorn, pydantic, pyzmq: carried as wheels), and the project only
# on PYTHONPATH. This builds that here, once (build/gpu-rehearsal/venv, reused while the pins are
# equal): Triton 3.6 and transformers 5.17 pinned as there; torch 2.13.0 as here (PyPI's torch 2.11
# is a multi-GB CUDA build, and a CPU cannot use it); python3 of this machine. The wheels of
# bench/gpu_wheels.txt are downloaded for this python into build/gpu-wheels/rehearsal (with
# prometheus_client, which the image has and the venv lacks) and installed by gpu_check.sh as on the
# device; the device's (python 3.12) into build/gpu-wheels/device, to check what a call carries
# stays under the device tool's 64 MiB. Then every stage:
#   k  every Triton kernel configuration compiled for sm_90 by Triton 3.6's compiler and ptxas: 0 spills
#   b-a  the device run's paths at toy size: the Triton backend (interpreter) everywhere, the fifteen
#      worked examples with their records, memory pressure, `minivllm serve` with streaming clients,
#      the KV-cache profiling, a bf16 64-sequence decode, the profiler, nano-vllm's workload's calls
# and fails when a stage fails (gpu_check.sh exits 1), or the dry run skipped a path the device takes.
set -eu -o pipefail
cd "$(dirname "$0")/.."
R=build/gpu-rehearsal          # the venv (shared between worktrees: built once)
W=build/gpu-wheels             # this checkout's wheels
OUTDIR=""
MODE=""
case "${1:-}" in
  --out) OUTDIR=$2 ;;
  --setup-only|--device-wheels) MODE=$1 ;;
esac
OUTDIR=${OUTDIR:-build/gpu-rehearsal-report}
WHEEL_LIST=$(grep -v '^#' bench/gpu_wheels.txt)

# the wheels of bench/gpu_wheels.txt (and $3...) for python $1 into $2, unless the folder has them
download() {
  local version=$1 dest=$2; shift 2
  local want="$version $WHEEL_LIST $*"
  [ "$(cat "$dest/.list" 2>/dev/null)" = "$want" ] && return 0
  rm -rf "$dest" && mkdir -p "$dest"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" $WHEEL_LIST "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  echo "$want" > "$dest/.list"
}
if [ "$MODE" = --device-wheels ]; then
  download 3.12 .whl
  echo "carried wheels: .whl, $(du -cb .whl/*.whl | tail -1 | cut -f1) bytes"; exit 0
fi

PINS="torch==2.13.0 triton==3.6.0 transformers==5.17.0 tokenizers==0.23.2 huggingface_hub==1.33.0
safetensors==0.8.0 numpy==2.4.6 matplotlib==3.11.2 tqdm==4.70.1 pytest==9.2.0 hypothesis==6.170.17
msgpack==1.2.4 psutil==7.2.2"
T0=$(date +%s)
if [ "$(cat $R/venv/.pins 2>/dev/null)" != "$PINS" ]; then
  echo "rehearsal venv: $R/venv (once; about a minute)"
  rm -rf $R/venv && mkdir -p $R && python3 -m venv $R/venv
  $R/venv/bin/python -m pip install -q $PINS 2>&1 | { grep -v "^WARNING: Location" || true; }
  # Triton 3.6's interpreter turns a loaded scalar into an int with int(array of shape (1,)), which
  # NumPy >= 2.4 refuses (the device has 2.5): 3.7 squeezes first. The dry run interprets, the device
  # compiles, so the venv takes 3.7's one-line fix; Triton 3.6's compiler (stage k) is untouched.
  INTERP=$($R/venv/bin/python -c "import triton.runtime.interpreter as i; print(i.__file__)")
  grep -q 'lambda self: int(self.handle.data))' "$INTERP"
  sed -i 's/lambda self: int(self.handle.data))/lambda self: int(self.handle.data.squeeze()))/' "$INTERP"
  echo "$PINS" > $R/venv/.pins
fi
PYV=$($R/venv/bin/python -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")
download "$PYV" $W/rehearsal prometheus_client==0.26.0
download 3.12 $W/device
# what a device call carries: the working tree (tracked and untracked-not-ignored files) and the wheels
TREE=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
CARRIED=$(du -cb $W/device/*.whl | tail -1 | cut -f1)
echo "a device call carries $(( (TREE + CARRIED) >> 20 )) MiB: the tree $(( TREE >> 20 )) MiB, the wheels" \
     "$(( CARRIED >> 10 )) KiB (the device tool's limit: 64 MiB)"
[ $(( TREE + CARRIED )) -lt $(( 64 << 20 )) ] || { echo "FAILED: over the device tool's 64 MiB"; exit 1; }
# the image's absences: none of these importable, and minivllm not installed (asked from /); pydantic
# is there (typer's, the same version as the carried wheel, which gpu_check.sh puts first)
(cd / && PYTHONPATH= "$OLDPWD/$R/venv/bin/python" - <<'PY'
import importlib.util as u, sys
present = [m for m in ("zmq", "fastapi", "uvicorn", "gguf", "fastcore", "minivllm") if u.find_spec(m)]
if present: sys.exit(f"the rehearsal venv must not have {present}")
import torch, triton, transformers
print(f"rehearsal venv: python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, "
      f"transformers {transformers.__version__}")
PY
)
echo "setup $(( $(date +%s) - T0 )) s"
[ -n "$MODE" ] && exit 0
rm -rf "$OUTDIR"; mkdir -p "$OUTDIR"
rc=0
# every limit doubled: make test runs this beside pytest, which shares the two cores and about doubles
# each stage's time (stage c: 205 s alone, 412 s beside it)
GPU_CHECK_SCALE=${GPU_CHECK_SCALE:-2} PYTHON=$R/venv/bin/python WHEELS=$W/rehearsal PYTHONPATH= \
  bash bench/gpu_check.sh --dry-run --out "$OUTDIR" || rc=$?
# the dry run must have taken the device run's paths
$R/venv/bin/python bench/gpu_check.py verify --out "$OUTDIR" || rc=1
echo "gpu-rehearsal: $( [ $rc = 0 ] && echo PASSED || echo FAILED ) in $(( $(date +%s) - T0 )) s; report in $OUTDIR/report.md"
exit $rc
