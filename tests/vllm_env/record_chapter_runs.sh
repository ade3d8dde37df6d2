#!/usr/bin/env bash
# Record again the vLLM runs that chapter 26 (nbs/26_vllm_integration.ipynb) draws, into
# nbs/vllm_runs/: the workloads (written by the project's venv), vLLM 0.33's record of each
# (TimelineScheduler in vLLM's venv: `make vllm-env`), and the plugin benchmark's result.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/build/vllm-venv}"
OUT="$ROOT/nbs/vllm_runs"
mkdir -p "$OUT"
cd "$ROOT"
.venv/bin/python - "$OUT" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests/vllm_env")
from workloads import stream_workload, vllm_valid, write
from minivllm.testing.worked_examples import e5_workload, e6_workload, e10_self_victim_workload
out = Path(sys.argv[1])
for name, w in (("E6", e6_workload()), ("E5", e5_workload(full=True)),
                ("E10_self", e10_self_victim_workload()), ("stream", stream_workload())):
    write(vllm_valid(w), out / f"{name}.workload.json")
PY
"$VENV/bin/python" tests/vllm_env/run_plugin.py "$OUT" "$OUT"/*.workload.json
"$VENV/bin/python" bench/bench_vllm_plugin.py --json "$OUT/bench.json"
