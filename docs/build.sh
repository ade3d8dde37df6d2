#!/usr/bin/env bash
# Build the docs site into docs/_build/html from nbdev's processed notebooks (no Quarto needed).
#   0. (make docs / make test) docs/run_nbs.py executed the notebooks -- the notebook tests --
#      and wrote them, with fresh outputs, to docs/_build/executed: the site is built from those.
#   1. docs/nbproc.py: nbdev's processing (what `nbdev_proc_nbs` does): SRC -> _proc/
#   2. docs/stage_nbs.py: _proc -> docs/_nbs (Quarto-isms -> myst-nb; reading order; parts and
#      chapter numbers; module source pages via docs/source_pages.py; docs/_build/site_manifest.json)
#   3. sphinx-build -W --keep-going: any warning not listed as harmless in docs/conf.py
#      (missing figure, broken cross-reference, bad toctree, ...) fails the build.
# Usage: bash docs/build.sh [SRC]  (from anywhere; uses the repo's .venv unless PYTHON is set)
#   SRC = docs/_build/executed (what `make docs` passes: fresh outputs of docs/run_nbs.py), or
#   nbs (the default: a quick preview from the outputs saved in the notebooks, maybe stale).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${1:-$ROOT/nbs}"
test -d "$SRC" || { echo "docs: no notebook folder $SRC (run \`make nbtest\` first?)"; exit 1; }
SRC="$(cd "$SRC" && pwd)"   # relative to where the command was run
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
JOBS="${DOCS_JOBS:-2}"
# show_doc cells import the chapters' modules; Triton kernels must not need a GPU for that
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
export PYTHONHASHSEED=0
start=$(date +%s)
if [ "$SRC" = "$ROOT/nbs" ]; then
  echo "docs: building from the outputs saved in nbs/ (\`make docs\` builds from a fresh execution)"
fi

# 1. nbdev's notebook processing (`#| hide`, show_doc, doc links, front matter; `#| export` cells
# stay on the page, imports-only ones folded; one API entry per definition):
# SRC -> _proc/. docs/nbproc.py runs nbdev's own processors, as `nbdev_proc_nbs` does, without
# that command's Quarto install / `pip install -e .` / nbs/_quarto.yml side effects, and keeps the
# notebooks' outputs -- fresh ones from docs/_build/executed (see its docstring). nbdev's lint "Found cells containing imports and
# other code" is silenced: that is the case nbproc.py handles.
PYTHONWARNINGS="ignore:Found cells containing imports" "$PYTHON" docs/nbproc.py "$JOBS" "$SRC"

# 2. stage the processed notebooks for Sphinx
"$PYTHON" docs/stage_nbs.py "$ROOT" "$SRC"

# 3. build (fresh each time, so every page's warnings are seen)
rm -rf docs/_build/html docs/_build/doctrees docs/_build/jupyter_execute
"$PYTHON" -m sphinx -b html -E -a -q -W --keep-going -j "$JOBS" -c docs \
  -d docs/_build/doctrees docs/_nbs docs/_build/html
test -s docs/_build/html/index.html
echo "docs: built docs/_build/html/index.html in $(( $(date +%s) - start ))s"
