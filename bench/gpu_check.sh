#!/usr/bin/env bash
# The GPU check (issues 11, 21, 53): correctness, the worked examples, memory pressure, serving,
# speed and the native Triton kernels on one GPU, sized for its kind (H100 or H200).
#   bash bench/gpu_check.sh [--dry-run] [--out DIR] [--stages bcmsda] [--only ITEM ...] [--merge FILE]
# First the plan: the GPU's name and copy bandwidth size every stage so the first call fits 8 minutes
# with the machine's start and the transfers; `--only ITEM ...` (a stage letter or STAGE/NAME, as the
# report's failures name them) reruns those items in a call of at most 3 minutes, merging into the
# earlier call's results.json given by `--merge`. Each stage runs in its own process under the
# plan's limit; every finished item rewrites report.md and results.json in the report folder (--out,
# else $OUT, the device tool's folder, else bench/gpu_reports/DATE), so a killed call keeps what it
# measured. The script exits 1 when anything failed. bench/GPU_CHECK.md says how a session lent a GPU
# runs it. --dry-run: everything at toy size on the CPU (Triton interpreter), plus stage k (every
# kernel configuration compiled for sm_90); `make gpu-rehearsal` runs it in the device image's versions.
set -u
cd "$(dirname "$0")/.."
DRY=0; STAGES=""; DEST=""; ONLY=(); MERGE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) DEST="$2"; shift ;;
    --stages) STAGES="$2"; shift ;;
    --merge) MERGE="$(realpath "$2")"; shift ;;
    --only) while [ $# -gt 1 ] && [ "${2#--}" = "$2" ]; do ONLY+=("$2"); shift; done ;;
    *) echo "usage: bash bench/gpu_check.sh [--dry-run] [--out DIR] [--stages bcmsda] [--only ITEM ...]" \
            "[--merge results.json]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$DEST" ]; then
  if [ $DRY = 1 ]; then DEST=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_dry.XXXXXX")
  else DEST=${OUT:-bench/gpu_reports/$(date -u +%Y-%m-%d)}; fi
fi
mkdir -p "$DEST"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT        # the report folder keeps what is worth keeping, as it goes

# Python: $PYTHON, else the project's venv here, else the device image's python3 (its torch, triton,
# transformers). The project is never installed: only the repository on PYTHONPATH.
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
# wheels the device image lacks (bench/gpu_wheels.txt: fastcore and the server's), carried in .whl/
# (bench/GPU_CHECK.md), or $WHEELS: installed into the work folder as the device tool advises
WHEELS=${WHEELS:-.whl}
if ! $PY -c "import fastcore, fastapi, uvicorn, zmq, pydantic" 2>/dev/null && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$WHEELS"/*.whl && export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
FLAG=""
if [ $DRY = 1 ]; then FLAG=--dry-run; export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""; fi

# every stage needs the package: say so once, at the top, when it does not import
if ! $PY -c "import minivllm; from minivllm import LLM, SamplingParams, load_model" > "$WORK/import.log" 2>&1; then
  echo "FAILED: the package does not import here ($PY, PYTHONPATH=$PYTHONPATH):"; tail -n 5 "$WORK/import.log"
  IMPORT_FAILED=1
fi

START=$(date +%s)
# the plan: this GPU's name and copy bandwidth, each stage's seconds (it prints the H100 and H200 plans)
PLAN=$($PY bench/gpu_check.py plan --work "$WORK" $FLAG ${STAGES:+--stages $STAGES} \
       ${MERGE:+--merge "$MERGE"} ${ONLY[@]+--only "${ONLY[@]}"}) || { echo "FAILED: the plan"; exit 1; }
eval "$PLAN"
echo "plan: stages $STAGES, $(( $(date +%s) - START )) s"
for s in $(echo "$STAGES" | grep -o .); do
  t=$(date +%s)
  limit_var=LIMIT_$s
  # stage k compiles (into an empty cache, so each kernel's time is its compile); it interprets nothing
  INTERP=${TRITON_INTERPRET:-0}; CACHE=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
  [ "$s" = k ] && INTERP=0 CACHE=$WORK/triton_cache
  # the stage stops itself 5 s before its limit; SIGINT at the limit lets it save; SIGKILL 10 s later
  TRITON_INTERPRET=$INTERP TRITON_CACHE_DIR=$CACHE timeout --signal=INT --kill-after=10 "${!limit_var}" \
    $PY bench/gpu_check.py "$s" --work "$WORK" --out "$DEST" $FLAG > "$WORK/stage_$s.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$s" "$rc" "$(( $(date +%s) - t ))" >> "$WORK/stages.tsv"
  echo "stage $s: exit $rc after $(( $(date +%s) - t )) s of ${!limit_var}"
  tail -n 3 "$WORK/stage_$s.log"
done
rc=0
$PY bench/gpu_check.py report --work "$WORK" --out "$DEST" $FLAG || rc=1
echo "total $(( $(date +%s) - START )) s; report in $DEST"
[ -z "${IMPORT_FAILED:-}" ] || { echo "FAILED: the package did not import"; rc=1; }
exit $rc
