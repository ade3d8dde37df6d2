#!/usr/bin/env bash
# Build the docs site into docs/_build/html from nbdev's processed notebooks (no Quarto needed).
#   1. docs/nbproc.py: nbdev's processing (what `nbdev_proc_nbs` does): nbs/ -> _proc/
#   2. docs/stage_nbs.py: _proc -> docs/_nbs (Quarto-isms -> myst-nb; reading order; toc)
#   3. sphinx-build -W --keep-going: any warning not listed as harmless in docs/conf.py
#      (missing figure, broken cross-reference, bad toctree, ...) fails the build.
# Usage: bash docs/build.sh        (from anywhere; uses the repo's .venv unless PYTHON is set)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
JOBS="${DOCS_JOBS:-2}"
# show_doc cells import the chapters' modules; Triton kernels must not need a GPU for that
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
export PYTHONHASHSEED=0
start=$(date +%s)

# 1. nbdev's notebook processing (`#| hide`, `#| export`, show_doc, doc links, front matter):
# nbs/ -> _proc/. docs/nbproc.py runs nbdev's own processors, as `nbdev_proc_nbs` does, without
# that command's Quarto install / `pip install -e .` / nbs/_quarto.yml side effects, and keeps the
# notebooks' saved outputs (see its docstring). nbdev's lint "Found cells containing imports and
# other code" is silenced: that is the case nbproc.py handles.
PYTHONWARNINGS="ignore:Found cells containing imports" "$PYTHON" docs/nbproc.py "$JOBS"

# 2. stage the processed notebooks for Sphinx
"$PYTHON" docs/stage_nbs.py "$ROOT"

# 3. build (fresh each time, so every page's warnings are seen)
rm -rf docs/_build/html docs/_build/doctrees docs/_build/jupyter_execute
"$PYTHON" -m sphinx -b html -E -a -q -W --keep-going -j "$JOBS" -c docs \
  -d docs/_build/doctrees docs/_nbs docs/_build/html
test -s docs/_build/html/index.html
echo "docs: built docs/_build/html/index.html in $(( $(date +%s) - start ))s"
