#!/usr/bin/env bash
# make gpu-rehearsal (issue 21): the GPU check's dry run in the device image's versions, on a CPU.
#   bash bench/gpu_rehearsal.sh [--out DIR]
#   bash bench/gpu_rehearsal.sh --setup-only    # only the venv and the wheel below (make test, early)
# The device image (bench/GPU_CHECK.md) has python 3.12, torch 2.11+cu130, Triton 3.6, transformers
# 5.17, psutil (transformers' continuous batching on a CPU needs it), no fastcore (carried as a
# wheel), none of pyzmq, fastapi, uvicorn, gguf, and the project only on PYTHONPATH. This builds that here, once (build/gpu-rehearsal, reused while the pins are equal):
# Triton 3.6 and transformers 5.17 pinned as there; torch 2.13.0 as here (PyPI's torch 2.11 is a
# multi-GB CUDA build, and a CPU cannot use it); python3 of this machine; fastcore only from the
# wheel the device run carries, installed by gpu_check.sh as it is there. Then every stage:
#   k  every Triton kernel configuration compiled for sm_90 by Triton 3.6's compiler and ptxas: 0 spills
#   a-d  the device run's paths at toy size: the Triton backend (interpreter) everywhere, all worked
#      examples through worked_examples_on_engine, the KV-cache profiling, a bf16 64-sequence decode
# and fails when a stage fails (gpu_check.sh exits 1), or the dry run skipped a path the device takes.
set -eu -o pipefail
cd "$(dirname "$0")/.."
R=build/gpu-rehearsal
OUTDIR=""
SETUP_ONLY=""
[ "${1:-}" = "--out" ] && OUTDIR=$2
[ "${1:-}" = "--setup-only" ] && SETUP_ONLY=1
OUTDIR=${OUTDIR:-$R/report}
PINS="torch==2.13.0 triton==3.6.0 transformers==5.17.0 tokenizers==0.23.2 huggingface_hub==1.33.0
safetensors==0.8.0 numpy==2.4.6 matplotlib==3.11.2 tqdm==4.70.1 pytest==9.2.0 hypothesis==6.170.17
msgpack==1.2.4 psutil==7.2.2"
FASTCORE=fastcore==1.14.5
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
# fastcore: the wheel the device run carries (bench/GPU_CHECK.md's command), here in $R/whl
if ! ls $R/whl/fastcore-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d $R/whl $FASTCORE
fi
# the image's absences: none of these importable, and minivllm not installed (asked from /)
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
[ -n "$SETUP_ONLY" ] && exit 0
rm -rf "$OUTDIR"; mkdir -p "$OUTDIR"
rc=0
PYTHON=$R/venv/bin/python WHEELS=$R/whl PYTHONPATH= bash bench/gpu_check.sh --dry-run --out "$OUTDIR" || rc=$?
# the dry run must have taken the device run's paths
$R/venv/bin/python bench/gpu_check.py verify --work /dev/null --out "$OUTDIR" --dry-run || rc=1
echo "gpu-rehearsal: $( [ $rc = 0 ] && echo PASSED || echo FAILED ) in $(( $(date +%s) - T0 )) s; report in $OUTDIR/report.md"
exit $rc
