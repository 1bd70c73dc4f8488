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
N_TRIALS ?=
WORKERS ?=
STORAGE ?=
TIMEOUT ?=

OVERRIDES := $(if $(DATASET),--set dataset=$(DATASET)) $(if $(DATA_DIR),--set data_dir=$(DATA_DIR)) \
             $(foreach s,$(SET),--set $(s))
STORE := $(if $(TRACKING_URI),--tracking-uri $(TRACKING_URI))
STUDY_OPTS := $(if $(N_TRIALS),--n-trials $(N_TRIALS)) $(if $(WORKERS),--workers $(WORKERS)) \
              $(if $(STORAGE),--storage $(STORAGE)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(ARGS)

.DEFAULT_GOAL := help
.PHONY: help install test test-fast sweep-sparsity report-sparsity ui list bench-overhead clean-store \
        study-lr-batch study-sparsity-tradeoff bench-workers

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
	$(HARNESS) sweep sparsity --scale $(SCALE) $(if $(WORKERS),--workers $(WORKERS)) $(if $(STORAGE),--storage $(STORAGE)) $(OVERRIDES) $(STORE)

study-lr-batch: ## Optuna study: best lr, batch size, optimizer for test accuracy (resumes; ARGS=--status)
	$(HARNESS) study lr_batch --scale $(SCALE) $(STUDY_OPTS) $(OVERRIDES) $(STORE)

study-sparsity-tradeoff: ## Optuna study: sparsity x batch size, Pareto front of accuracy vs train time
	$(HARNESS) study sparsity_tradeoff --scale $(SCALE) $(STUDY_OPTS) $(OVERRIDES) $(STORE)

report-sparsity: ## T6.1 table and plot beside the book's figures (reports/sparsity.*)
	$(HARNESS) report sparsity $(STORE)

ui: ## MLflow UI on http://127.0.0.1:5000 over the same store
	$(HARNESS) ui $(STORE)

list: ## experiments, sweeps, models, datasets and config fields
	$(HARNESS) list

bench-overhead: ## harness vs bare training, and harness loop vs the notebook's DataLoader loop
	$(BIN)/python benchmarks/overhead.py $(ARGS)

bench-workers: ## the same tiny trials with 1 and 2 workers: trials per minute and the ratio
	$(BIN)/python benchmarks/workers.py $(ARGS)

clean-store: ## delete the default MLflow store (mlruns/) and reports
	rm -rf mlruns reports/*.md reports/*.csv reports/*.png
