#!/usr/bin/env bash
# A separate venv with vLLM 0.33.0 for the plugin tests (`make vllm-env`): its pins clash with the
# project's (transformers, fastapi), and vLLM's own dependency list would pull CUDA builds.
# torch first (pinned: an open range pulls a multi-GB CUDA build), vLLM without its dependencies,
# then exactly the import closure of vLLM's scheduler (requirements.txt here), also --no-deps.
#   bash tests/vllm_env/setup.sh               # venv at build/vllm-venv
#   VLLM_VENV=/some/dir bash tests/vllm_env/setup.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/build/vllm-venv}"
PY="${PYTHON:-python3.11}"
VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
TORCH_SPEC="${TORCH_SPEC:-$(grep '^torch==' "$ROOT/requirements.txt")}"

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q "$TORCH_SPEC"
"$PIP" install -q --no-deps "vllm==$VLLM_VERSION"
"$PIP" install -q --no-deps -r "$HERE/requirements.txt"
"$VENV/bin/python" -c "import torch, sys; v = torch.__version__; print('torch', v); \
sys.exit(0 if not torch.version.cuda else 'torch is not a CPU build: ' + v)"
VLLM_TARGET_DEVICE=cpu PYTHONPATH="$ROOT" "$VENV/bin/python" -c "import vllm, \
vllm.v1.core.sched.scheduler, minivllm.integrations.vllm as m; m.TimelineScheduler; \
print('vllm', vllm.__version__, 'and minivllm.integrations.vllm.TimelineScheduler: OK')"
touch "$VENV/.installed"
echo "vLLM venv ready: $VENV"
