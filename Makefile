# torch-speed-harness: reproduce the published training-speed tables and compare runs in MLflow.
#   make install             then   make sweep-sparsity SCALE=smoke   then   make report-sparsity
# Knobs: SCALE=smoke|quick|full (default full, the document's scale), DATASET=, DATA_DIR=,
#        TRACKING_URI= (default sqlite:///mlruns/mlflow.db), SET="key=value ..." extra overrides.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HARNESS := $(BIN)/harness
SCALE ?= full
DATASET ?=
DATA_DIR ?=
TRACKING_URI ?=
SET ?=
ARGS ?=

OVERRIDES := $(if $(DATASET),--set dataset=$(DATASET)) $(if $(DATA_DIR),--set data_dir=$(DATA_DIR)) \
             $(foreach s,$(SET),--set $(s))
STORE := $(if $(TRACKING_URI),--tracking-uri $(TRACKING_URI))

.DEFAULT_GOAL := help
.PHONY: help install test test-fast sweep-sparsity report-sparsity sweep-amp report-amp sweep-hybridize \
        report-hybridize sweep-async report-async ui list bench-overhead clean-store

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

install: ## create .venv with the project, its pinned torch and every dependency
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	$(HARNESS) list > /dev/null && echo "installed: $(HARNESS)"

test: ## the whole test suite (slow and multi-process tests included; a few minutes on 2 cores)
	$(BIN)/pytest -q

test-fast: ## the suite without the tests marked slow
	$(BIN)/pytest -q -m "not slow"

sweep-sparsity: ## T6.1 pruning sparsity vs time and accuracy (book ch. 6)
	$(HARNESS) sweep sparsity --scale $(SCALE) $(OVERRIDES) $(STORE)

report-sparsity: ## T6.1 table and plot beside the book's figures (reports/sparsity.*)
	$(HARNESS) report sparsity $(STORE)

sweep-amp: ## T7 mixed precision fp32/bf16/fp16 vs time and accuracy (book ch. 7; SCALE=smoke|cpu on a CPU)
	$(HARNESS) sweep amp --scale $(SCALE) $(OVERRIDES) $(STORE)

report-amp: ## T7 table and plot beside the book's figures (reports/amp.*)
	$(HARNESS) report amp $(STORE)

sweep-hybridize: ## D12.1 eager vs torch.jit.script vs torch.compile, time per forward call (d2l 12.1)
	$(HARNESS) sweep hybridize --scale $(SCALE) $(OVERRIDES) $(STORE)

report-hybridize: ## D12.1 table and plot beside d2l's claim (reports/hybridize.*)
	$(HARNESS) report hybridize $(STORE)

sweep-async: ## D12.2 numpy vs torch matmuls, clock read with and without sync (d2l 12.2)
	$(HARNESS) sweep async --scale $(SCALE) $(OVERRIDES) $(STORE)

report-async: ## D12.2 table and plot beside d2l's figures (reports/async.*)
	$(HARNESS) report async $(STORE)

ui: ## MLflow UI on http://127.0.0.1:5000 over the same store
	$(HARNESS) ui $(STORE)

list: ## experiments, sweeps, models, datasets and config fields
	$(HARNESS) list

bench-overhead: ## harness vs bare training, and harness loop vs the notebook's DataLoader loop
	$(BIN)/python benchmarks/overhead.py $(ARGS)

clean-store: ## delete the default MLflow store (mlruns/) and reports
	rm -rf mlruns reports/*.md reports/*.csv reports/*.png
