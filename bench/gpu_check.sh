#!/usr/bin/env bash
# The GPU check (issue 11): native Triton, exactness, the worked examples and speed on one GPU.
#   bash bench/gpu_check.sh [--dry-run] [--out DIR] [--stages abcd]
# Each stage runs in its own process under its own time limit; a failing stage does not stop the
# rest. The report (report.md, results.json, log.txt, figures: at most 8 files) goes to --out, else
# to $OUT (the device tool's folder), else to bench/gpu_reports/DATE. bench/GPU_CHECK.md says how
# a session lent a GPU runs it. --dry-run: every stage at toy size on the CPU (Triton interpreter),
# as `make test` runs it.
set -u
cd "$(dirname "$0")/.."
DRY=0; STAGES=abcd; DEST=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) DEST="$2"; shift ;;
    --stages) STAGES="$2"; shift ;;
    *) echo "usage: bash bench/gpu_check.sh [--dry-run] [--out DIR] [--stages abcd]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$DEST" ]; then
  if [ $DRY = 1 ]; then DEST=$(mktemp -d /tmp/gpu_check_dry.XXXXXX)
  else DEST=${OUT:-bench/gpu_reports/$(date -u +%Y-%m-%d)}; fi
fi
mkdir -p "$DEST"
WORK=$(mktemp -d /tmp/gpu_check_work.XXXXXX)

# Python: the project's venv here; the device image's python3 there (its torch, triton, transformers)
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
# wheels the device image lacks (fastcore), carried in .whl/ (see bench/GPU_CHECK.md)
if ! $PY -c "import fastcore" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/minivllm_site \
    .whl/*.whl && export PYTHONPATH=/tmp/minivllm_site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
FLAG=""
if [ $DRY = 1 ]; then FLAG=--dry-run; export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""; fi

# seconds per stage (H200 / dry run on 2 CPU cores): 110 + 55 + 55 + 240 = 460 s on the GPU
declare -A LIMIT=([a]=110 [b]=55 [c]=55 [d]=240)
[ $DRY = 1 ] && LIMIT=([a]=120 [b]=90 [c]=60 [d]=120)   # generous: CI has 2 slow cores
START=$(date +%s)
for s in $(echo "$STAGES" | grep -o .); do
  [ -n "${LIMIT[$s]:-}" ] || { echo "unknown stage $s" >&2; continue; }
  t=$(date +%s)
  # the stage stops itself at its budget; SIGINT at the limit lets it save; SIGKILL 15 s later
  timeout --signal=INT --kill-after=15 "${LIMIT[$s]}" \
    $PY bench/gpu_check.py "$s" --work "$WORK" --budget $(( ${LIMIT[$s]} - 8 )) $FLAG \
    > "$WORK/stage_$s.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$s" "$rc" "$(( $(date +%s) - t ))" >> "$WORK/stages.tsv"
  echo "stage $s: exit $rc after $(( $(date +%s) - t )) s"
  tail -n 3 "$WORK/stage_$s.log"
done
$PY bench/gpu_check.py report --work "$WORK" --out "$DEST" $FLAG
echo "total $(( $(date +%s) - START )) s; report in $DEST"
