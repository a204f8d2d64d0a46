# schedx: one command to run the UI, one to run the tests (see README.md).
# Everything installs into ./.venv; system packages (chromium for browser tests, graphviz for
# .dot -> .svg files) come from apt-get when missing.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PORT   ?= 8501
# test processes (pytest-xdist): one per core, at most 4, tests handed out as workers free up
# (worksteal: a worker that crashes fails its one test and is replaced; loadfile then lost the run)
JOBS   ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
XDIST  := -n $(JOBS) --dist worksteal

.PHONY: ui test test-fast test-slow test-all test-faults bench corpus bench-corpus outside bench-outside exporters bench-exporters screenshots setup setup-dev system clean

ui: setup
	$(BIN)/schedx ui --port $(PORT)

test: setup-dev system
	$(BIN)/python -m pytest -q $(XDIST)

# the edit loop: no browser, no whole-model builds or real searches (marked heavy), no apt-get
test-fast: setup-dev
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not browser and not heavy"

# kill -9, full disk, concurrent writers, signals at start-up, CLI fuzz: real processes (about 3 min)
test-faults: setup-dev system
	$(BIN)/python -m tests.fault_suite

test-slow: setup-dev system
	$(BIN)/python -m pytest -q $(XDIST) -m slow

test-all: setup-dev system
	$(BIN)/python -m pytest -q $(XDIST) -m "slow or not slow"

bench: setup-dev system
	$(BIN)/python -m benchmarks.bench_passes
	$(BIN)/python -m benchmarks.bench_schedule
	$(BIN)/python -m benchmarks.bench_store

# 55 real architectures exported to ONNX in ~/.cache/schedx/corpus (about 5 min), then each one
# imported, exported, verified and timed against ONNX Runtime with no search (about 30 min);
# the 70 held-out models of benchmarks/outside the same way (outside, bench-outside)
corpus: setup-dev
	$(BIN)/python -m pip install -q -e ".[corpus]"
	$(BIN)/python -m benchmarks.corpus.build

bench-corpus: corpus system
	$(BIN)/python -m benchmarks.bench_corpus

outside: setup-dev
	$(BIN)/python -m pip install -q -e ".[corpus]"
	$(BIN)/python -m benchmarks.corpus.build --set outside

bench-outside: outside system
	$(BIN)/python -m benchmarks.bench_corpus --set outside

# the files each exporter writes (tf2onnx/Keras, Paddle2ONNX, ONNX Runtime's quantizer, fp16, scripted
# PyTorch, optimum) in ~/.cache/schedx/exporters: TensorFlow and Paddle in builder venvs of their own
# (~/.cache/schedx/exporter-venvs, python3.11), then benched like the corpus
exporters: setup-dev
	$(BIN)/python -m pip install -q -e ".[corpus]"
	$(BIN)/python -m benchmarks.exporters.build

bench-exporters: exporters system
	$(BIN)/python -m benchmarks.bench_corpus --set exporters

screenshots: setup-dev system
	SCHEDX_SCREENSHOT_DIR=assets/screenshots $(BIN)/python -m pytest -q tests/test_browser.py \
		tests/test_browser_graph.py tests/test_browser_ide.py

setup: $(VENV)/.schedx-installed

setup-dev: $(VENV)/.schedx-dev-installed

$(VENV)/.schedx-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# torch 2.13.0 (CPU build) is the optional PyTorch route; pinning it keeps pip from pulling a
# multi-GB CUDA build.
$(VENV)/.schedx-dev-installed: $(VENV)/.schedx-installed
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,torch]"
	touch $@

# chromium: browser tests; graphviz: .dot -> .svg; g++-aarch64-linux-gnu: `--target aarch64` bundles
system:
	@if ! command -v chromium >/dev/null || ! command -v dot >/dev/null || ! command -v aarch64-linux-gnu-g++ >/dev/null; then \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium graphviz g++-aarch64-linux-gnu; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info
