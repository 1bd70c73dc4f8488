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
DEVICE ?=

OVERRIDES := $(if $(DATASET),--set dataset=$(DATASET)) $(if $(DATA_DIR),--set data_dir=$(DATA_DIR)) \
             $(foreach s,$(SET),--set $(s))
STORE := $(if $(TRACKING_URI),--tracking-uri $(TRACKING_URI))
# DEVICE=cpu runs a GPU sweep as CPU processes over gloo; DEVICE=cuda pins the device only.
DEVICE_SET := $(if $(filter cpu,$(DEVICE)),--set device=cpu --set backend=gloo,$(if $(DEVICE),--set device=$(DEVICE)))
RESNET_SWEEPS := resnet resnet-epochs resnet-batch resnet-lr

.DEFAULT_GOAL := help
.PHONY: help install test test-fast sweep-sparsity report-sparsity ui list bench-overhead clean-store \
        sweep-threads report-threads sweep-cpu-ddp report-cpu-ddp sweep-gpus report-gpus sweep-resnet \
        report-resnet sweep-dp-scratch report-dp-scratch sweep-autoparallel report-autoparallel bench-ddp

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

sweep-threads: ## T9.1 one process, 1..16 threads (counts above this machine's cores are recorded skips)
	$(HARNESS) sweep threads --scale $(SCALE) $(OVERRIDES) $(STORE)

report-threads: ## T9.1 table and plot beside the book's (speed-up, parallel efficiency)
	$(HARNESS) report threads $(STORE)

sweep-cpu-ddp: ## T9.2/T9.3 DDP instances x threads on one CPU, gloo vs oneCCL (torchrun)
	$(HARNESS) sweep cpu-ddp --scale $(SCALE) $(OVERRIDES) $(STORE)

report-cpu-ddp: ## T9.2/T9.3 table and plot beside the book's
	$(HARNESS) report cpu-ddp $(STORE)

sweep-gpus: ## T10.2 DDP on 1..8 GPUs over NCCL x lr scaling [DEVICE=cpu: CPU processes over gloo]
	$(HARNESS) sweep gpus --scale $(SCALE) $(DEVICE_SET) $(OVERRIDES) $(STORE)

report-gpus: ## T10.2 table and plot beside the book's (speed-up, parallel efficiency)
	$(HARNESS) report gpus $(STORE)

sweep-resnet: ## D12.6 ResNet-18 1 vs 2 devices, and the epochs / batch / lr exercise sweeps
	set -e; for s in $(RESNET_SWEEPS); do $(HARNESS) sweep $$s --scale $(SCALE) $(DEVICE_SET) $(OVERRIDES) $(STORE); done

report-resnet: ## D12.6 tables; the exercise plots show accuracy and time on two y-axes
	set -e; for s in $(RESNET_SWEEPS); do $(HARNESS) report $$s $(STORE); done

sweep-dp-scratch: ## D12.5 hand-written data parallel vs DDP, checked against one device
	$(HARNESS) sweep dp-scratch --scale $(SCALE) $(OVERRIDES) $(STORE)

report-dp-scratch: ## D12.5 table: time, accuracy, largest parameter difference from one device
	$(HARNESS) report dp-scratch $(STORE)

sweep-autoparallel: ## D12.3 two GPUs queued together; compute overlapped with copies (GPU only, else skips)
	$(HARNESS) sweep autoparallel --scale $(SCALE) $(DEVICE_SET) $(OVERRIDES) $(STORE)

report-autoparallel: ## D12.3 table beside d2l's figures
	$(HARNESS) report autoparallel $(STORE)

bench-ddp: ## N ranks x t threads against 1 rank x N*t threads on the same cores (ratios)
	$(BIN)/python benchmarks/ddp_vs_threads.py $(ARGS)

ui: ## MLflow UI on http://127.0.0.1:5000 over the same store
	$(HARNESS) ui $(STORE)

list: ## experiments, sweeps, models, datasets and config fields
	$(HARNESS) list

bench-overhead: ## harness vs bare training, and harness loop vs the notebook's DataLoader loop
	$(BIN)/python benchmarks/overhead.py $(ARGS)

clean-store: ## delete the default MLflow store (mlruns/) and reports
	rm -rf mlruns reports/*.md reports/*.csv reports/*.png
