# torch-speed-harness: reproduce the published training-speed tables and compare runs in MLflow.
#   make install             then   make sweep-sparsity SCALE=smoke   then   make report-sparsity
# Knobs: SCALE=smoke|quick|cpu|full (full: the document's scale; cpu: make reproduce-cpu; unset: the scale that sweep
#        or study last ran at here, else smoke, said in one line), DATASET=, DATA_DIR=,
#        TRACKING_URI= (default sqlite:///mlruns/mlflow.db), SET="key=value ..." extra overrides,
#        DEVICE=cpu|cuda for the sweeps that take a device, REMEASURE=contended|drifted (both: "contended drifted")
#        to measure again a sweep's finished cells timed under contention or at another machine speed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HARNESS := $(BIN)/harness
SCALE ?=
DATASET ?=
DATA_DIR ?=
DEVICE ?=
TRACKING_URI ?=
SET ?=
ARGS ?=
REMEASURE ?=
N_TRIALS ?=
WORKERS ?=
STORAGE ?=
TIMEOUT ?=
BUDGET ?=
PORT ?=
# LAUNCHER=slurm: the WORKERS as one Slurm job array (SLURM_PARTITION, SLURM_TIME, SLURM_GPUS_PER_TASK,
# SLURM_CPUS_PER_TASK, DETACH=1); STORAGE and TRACKING_URI must be ones every node reaches.
LAUNCHER ?=
SLURM_PARTITION ?=
SLURM_TIME ?=
SLURM_GPUS_PER_TASK ?=
SLURM_CPUS_PER_TASK ?=
DETACH ?=

# DEVICE=cpu runs a GPU sweep as CPU processes over gloo; DEVICE=cuda runs it on GPUs over nccl (`--device`:
# the harness sets the backend the sweep's experiment declares for the device, where it has one). What a
# sweep needs (its data, its backend) the harness reads from the sweep file, so no target names a file here.
overrides = $(if $(DATASET),--set dataset=$(DATASET)) $(if $(DATA_DIR),--set data_dir=$(DATA_DIR)) \
            $(if $(DEVICE),--device $(DEVICE)) $(foreach s,$(SET),--set $(s))
# Every sweeps/NAME.toml has `make sweep-NAME` and `make report-NAME`.
SWEEPS := $(basename $(notdir $(filter-out sweeps/study_%,$(wildcard sweeps/*.toml))))
# Every sweeps/study_NAME.toml has `make study-NAME` (underscores written as hyphens).
STUDIES := $(subst _,-,$(patsubst study_%,%,$(basename $(notdir $(wildcard sweeps/study_*.toml)))))
STORE := $(if $(TRACKING_URI),--tracking-uri $(TRACKING_URI))
# `last`: the harness reads the scale this sweep or study last ran at (mlruns/last-scales.json), else smoke.
SCALE_OPT = --scale $(or $(SCALE),last)
# A sweep and the sweeps whose files extend it (`extends = "NAME"`): a new exercise file joins its
# section's target by that line alone.
family = $1 $(basename $(notdir $(shell grep -lE '^extends *= *"$1"' sweeps/*.toml)))
SLURM_OPTS := $(if $(LAUNCHER),--launcher $(LAUNCHER)) $(if $(SLURM_PARTITION),--slurm-partition $(SLURM_PARTITION)) \
              $(if $(SLURM_TIME),--slurm-time $(SLURM_TIME)) $(if $(SLURM_GPUS_PER_TASK),--slurm-gpus-per-task $(SLURM_GPUS_PER_TASK)) \
              $(if $(SLURM_CPUS_PER_TASK),--slurm-cpus-per-task $(SLURM_CPUS_PER_TASK)) $(if $(DETACH),--detach)
WORKER_OPTS := $(if $(WORKERS),--workers $(WORKERS)) $(if $(STORAGE),--storage $(STORAGE)) $(SLURM_OPTS)
STUDY_OPTS := $(if $(N_TRIALS),--n-trials $(N_TRIALS)) $(if $(BUDGET),--budget $(BUDGET)) $(WORKER_OPTS) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(ARGS)

# make reproduce-cpu DATA_DIR=...: every table a CPU can run, each sweep at its `cpu` scale on CIFAR-10
# as JPEG class folders, then REPRODUCTION.md with its PNGs and CSVs in results/$(MACHINE)/ (committed).
# The cells go to a store of their own, results/$(MACHINE)/store/ (committed with the report), unless TRACKING_URI is
# given: the committed report then holds cpu-scale cells only, never smoke runs from mlruns/.
# TABLES=resnet,resnet-lr: those sweeps alone, for a results folder that holds some of the tables (its own host).
MACHINE ?= cpu-2core
TABLES ?=
CPU_STORE = --tracking-uri $(or $(TRACKING_URI),sqlite:///results/$(MACHINE)/store/mlflow.db)
CPU_TABLES = $(if $(TABLES),--sweeps $(TABLES))

.DEFAULT_GOAL := help
# sweep-% and report-% stay out of .PHONY: make skips pattern rules for phony targets.
.PHONY: help install install-system test test-fast report ui list machine bench-overhead bench-ddp clean-store \
        bench-workers bench-cells bench-noise bench-calibration bench-cli soak gpu-check dashboard peak reproduce-cpu \
        reproduce-cpu-report airbench-ladder results-index docs

help: ## list the targets
	@grep -E '^[a-z%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'
	@echo "  sweeps: $(SWEEPS)"
	@echo "  studies: $(STUDIES)"

# setuptools warns at every editable install that folders named like the package in the working directory
# may be imported instead of it ("Editable installation ... take precedence during imports"). Here those
# folders (harness/, experiments/) are the very code the install points at, so the warning is silenced.
install: ## create .venv (about 6.5 GB: torch and its CUDA libraries) with the project, its pinned torch and every dependency
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e '.[test]'
	$(HARNESS) list > /dev/null && echo "installed: $(HARNESS)"

install-system: ## Debian packages the browser test needs (chromium, chromedriver); run as root
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then echo "chromium and chromedriver present"; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; fi

# --durations: every log ends with the slowest tests and their seconds, so a slow one is seen where it grew.
test: ## the whole test suite (slow and multi-process tests included; its time on 2 cores: README.md)
	$(BIN)/pytest -q --durations=30

test-fast: ## the suite without the tests marked slow
	$(BIN)/pytest -q -m "not slow" --durations=15

sweep-%: ## run sweeps/NAME.toml: sweep-sparsity (T6.1), sweep-amp (T7), sweep-gpus DEVICE=cpu (T10.2), ... (REMEASURE=contended)
	$(HARNESS) sweep $* $(SCALE_OPT) $(WORKER_OPTS) $(foreach r,$(REMEASURE),--remeasure-$(r)) $(overrides) $(STORE)

study-%: ## run or resume sweeps/study_NAME.toml: study-lr-batch, study-sparsity-tradeoff (ARGS=--status)
	$(HARNESS) study $(subst -,_,$*) $(SCALE_OPT) $(STUDY_OPTS) $(overrides) $(STORE)

study-%-calibrate: ## measure a study's target from its tuned baseline ([target]): results/targets/ (resumable)
	$(HARNESS) study $(subst -,_,$*) --calibrate-target $(SCALE_OPT) $(ARGS) $(overrides) $(STORE)

study-%-verify: ## race a study's best trials over seeds in fresh processes against its tuned baseline, then ablate the winner (resumable)
	$(HARNESS) study $(subst -,_,$*) --verify $(SCALE_OPT) $(ARGS) $(overrides) $(STORE)

report-%: ## one sweep's table and plot beside the published figures, at SCALE (reports/NAME-SCALE.*)
	$(HARNESS) report $* $(SCALE_OPT) $(STORE)

report: ## reports/REPRODUCTION.md: every sweep beside the published tables, with verdicts
	$(HARNESS) report $(STORE)

# `harness reproduce` runs every sweep with a [scales.cpu], in the documents' order, giving DATA_DIR to those that
# train on data. A sweep with failed cells (exit 1) does not stop the others; a mistake (2) or Ctrl-C (130) stops
# them all. Run it again to resume: every finished cell is reused, the one cut off runs again.
reproduce-cpu: ## every CPU table at scale cpu on the CIFAR-10 JPEGs in DATA_DIR, then results/cpu-2core/ (MACHINE=); resumable; a clean tree (ARGS=--allow-dirty)
	@if [ -z "$(DATA_DIR)" ]; then echo "make reproduce-cpu needs DATA_DIR=, the folder holding CIFAR-10 as train/ and test/ class folders of images (for example DATA_DIR=../shared/data/cifar10-jpeg)." >&2; exit 2; fi
	$(HARNESS) reproduce --scale cpu --data-dir $(DATA_DIR) --out results/$(MACHINE) $(CPU_STORE) $(CPU_TABLES)$(if $(ARGS), $(ARGS))

reproduce-cpu-report: ## results/cpu-2core/ (MACHINE=) written again from its committed store, measuring nothing (after a change to the report)
	$(HARNESS) report --out results/$(MACHINE) $(CPU_STORE) $(CPU_TABLES)

results-index: ## results/README.md, the first page of results/, written again from the folders (after any change there)
	$(BIN)/python -m harness.report.results_index

# docs/ is a folder too: `docs` is phony, or make would call it up to date.
docs: ## the README's sweeps table and docs/EXPERIMENTS.md's experiments table, written again from the sweep files and descriptors
	$(BIN)/python -m harness.report.docs_tables

sweep-resnet: ## D12.6 ResNet-18 1 vs 2 devices, then each sweep that extends it (the epochs / batch / lr exercises)
	set -e; for s in $(call family,resnet); do $(HARNESS) sweep $$s $(SCALE_OPT) $(overrides) $(STORE); done

report-resnet: ## D12.6 tables; the exercise plots show accuracy and time on two y-axes
	set -e; for s in $(call family,resnet); do $(HARNESS) report $$s $(SCALE_OPT) $(STORE); done

bench-ddp: ## N ranks x t threads against 1 rank x N*t threads on the same cores (ratios)
	$(BIN)/python benchmarks/ddp_vs_threads.py $(ARGS)

ui: ## MLflow UI on http://127.0.0.1:5000 (PORT= to change) over the same store; prints each runs table
	$(HARNESS) ui $(if $(PORT),--port $(PORT)) $(STORE)

dashboard: ## optuna-dashboard on http://127.0.0.1:8080 over the study storage (STORAGE=, PORT= to change)
	$(HARNESS) dashboard $(if $(STORAGE),--storage $(STORAGE)) $(if $(PORT),--port $(PORT)) $(STORE)

peak: ## the measured peaks every run's MFU is taken against, with their kernels (cached per machine; ARGS=--remeasure)
	$(HARNESS) peak $(ARGS)

list: ## experiments, sweeps, studies, models, datasets and config fields (ARGS=sweeps: one group whole)
	$(HARNESS) list $(ARGS)

machine: ## this machine: CPU, usable cores, the dtypes it computes natively and those it emulates, cached peaks, speed index
	$(HARNESS) machine

gpu-check: ## first run on a GPU machine: GPU tests + every GPU sweep at smoke scale, one line each (< 8 min)
	$(BIN)/python benchmarks/gpu_check.py $(ARGS)

bench-overhead: ## harness vs bare training, harness loop vs the notebook's DataLoader loop, system metrics on vs off
	$(BIN)/python benchmarks/overhead.py $(ARGS)

bench-workers: ## the same tiny trials with 1 and 2 workers: trials per minute and the ratio
	$(BIN)/python benchmarks/workers.py $(ARGS)

bench-cells: ## the harness's own seconds per cell outside run(cfg), by part (goal <= 0.3 s on SQLite)
	$(BIN)/python benchmarks/cell_cost.py $(ARGS)

# make airbench-ladder DATA_DIR=...: the airbench sweep's cpu scale (ARGS="--scale cpu-fp32" for true fp32), into
# results/$(MACHINE)/store and results/$(MACHINE)/jpeg-ladder/ (hours); a smoke-sized try is
# `python benchmarks/jpeg_ladder.py --scale smoke ...` with a store and --out of its own.
airbench-ladder: ## airbench94 on CIFAR-10's JPEGs re-encoded at lower qualities, N seeds each: ladder.csv and a fit to raw pixels (DATA_DIR=, ARGS="--seeds 3 --qualities 60,45,30,15 --scale cpu-fp32")
	@if [ -z "$(DATA_DIR)" ]; then echo "make airbench-ladder needs DATA_DIR=, the folder holding CIFAR-10 as train/ and test/ class folders of JPEGs (for example DATA_DIR=../shared/data/cifar10-jpeg)." >&2; exit 2; fi
	$(BIN)/python benchmarks/jpeg_ladder.py --data-dir $(DATA_DIR) --scale cpu \
	    --out results/$(MACHINE)/jpeg-ladder $(CPU_STORE) $(ARGS)

bench-noise: ## A/A noise floor (train_time_s and the median epoch): CV, minimum detectable effect at n=3/5, false "faster" rate (ARGS="--rounds N --variants harness,keep-freed,calibrated"; calibrated: each run also divided by its process's speed_index)
	$(BIN)/python benchmarks/noise.py $(ARGS)

bench-cli: ## a dozen typical mistakes, each in fresh processes: median seconds against `harness --help` and `import torch` (ARGS="--runs N")
	$(BIN)/python benchmarks/cli.py $(ARGS)

bench-calibration: ## the speed index in N fresh processes, 5 calls vs the full budget: CV, range, pairs falsely called drifted (ARGS="--processes N")
	$(BIN)/python benchmarks/calibration.py $(ARGS)

soak: ## 3 sweeps + a 2-worker study on one SQLite store, SIGKILLs every 20-40 s (ARGS="--minutes 2"; default 10; "--busy-loops 2": beside 2 spinning processes)
	$(BIN)/python benchmarks/soak.py $(ARGS)

clean-store: ## delete the default MLflow store (mlruns/) and reports
	rm -rf mlruns reports/*.md reports/*.csv reports/*.png
