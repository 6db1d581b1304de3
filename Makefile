# Two entry points (see README): `make cpu` runs the CPU demo, `make test` runs the tests.
# Both create .venv and install the pinned requirements on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.install-stamp
CORES ?= 2

.PHONY: install system-deps cpu calibrate rehearsal rehearsal-scale gpu-check smoke test lint lock clean-results

install: $(STAMP)

# pyproject.toml lists what the project needs; constraints.txt (tools/lock.py) the exact versions it is tested with
EXTRAS ?= test,slurm,hub,demo

$(STAMP): constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	$(BIN)/pip check
	touch $(STAMP)

# Debian packages for the real-Slurm test (tests/test_slurm.py) and the browser tests of generated
# pages (chromium); needs root. Optional: without them those tests are skipped with the reason.
system-deps:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge chromium

# The CPU profile: real GLUE data and the installed all-MiniLM-L6-v2. With the local copy configs/cpu.yaml names
# (../shared/data), offline; without it, GLUE from the Hugging Face Hub and UD EWT from its release
# (configs/cpu_online_data.yaml), which needs the internet.
LOCAL_DATA ?= ../shared/data/glue
ifeq ($(wildcard $(LOCAL_DATA)),)
CPU_CONFIGS := configs/cpu.yaml configs/cpu_online_data.yaml
CPU_ENV :=
else
CPU_CONFIGS := configs/cpu.yaml
CPU_ENV := HF_HUB_OFFLINE=1
endif

# each config file checked as YAML first: Snakemake reads a --configfile before the workflow, and its message for
# invalid YAML names neither the file nor the line
cpu: install
	$(BIN)/python -m bertology_core.workflow.configuration config.yaml $(CPU_CONFIGS)
	$(CPU_ENV) $(BIN)/snakemake --profile profiles/cpu --cores $(CORES) --configfile $(CPU_CONFIGS)

# Time the passes of a config's model on this machine's device (about 4 minutes), then estimate a run from them:
#   make calibrate CALIBRATION_CONFIGS=configs/cpu.yaml; python tools/estimate_runtime.py --help
CALIBRATION_CONFIGS ?= $(CPU_CONFIGS)
calibrate: install
	$(BIN)/python tools/calibrate.py --configfile $(CALIBRATION_CONFIGS)

# The scale rehearsal: BERT-base's geometry with random weights (tools/random_model.py) on the full dev sets and the
# full UD EWT (configs/rehearsal.yaml), in build/rehearsal; then every job's peak memory and time against what its
# rule's fitted line asks for (tools/fit_needs.py check, exit 1 when a job was above its request;
# bertology_core/jobs/needs.py). Hours on 2 CPUs; a measurement, not a test.
REHEARSAL_MODEL := build/bert-base-random
$(REHEARSAL_MODEL): | install
	$(BIN)/python tools/random_model.py $@
rehearsal: install $(REHEARSAL_MODEL)
	$(BIN)/python -m bertology_core.workflow.configuration config.yaml configs/rehearsal.yaml
	HF_HUB_OFFLINE=1 $(BIN)/snakemake --profile profiles/cpu --cores $(CORES) --directory build/rehearsal \
		--configfile configs/rehearsal.yaml
	$(BIN)/python tools/fit_needs.py measure --run build/rehearsal --configfile configs/rehearsal.yaml --out build/rehearsal/needs.parquet
	$(BIN)/python tools/fit_needs.py check build/rehearsal/needs.parquet

# The size rehearsal: the default's largest tasks at their published sizes (benchmarks/glue_scale.py: MNLI, QQP, QNLI,
# synthetic where this machine lacks them) through every rule but the treebank's, on an encoder of BERT-base's layers,
# heads and vocabulary with a narrow hidden size (configs/rehearsal_scale.yaml), and the token files of their whole
# training splits (configs/rehearsal_scale_tokens.yaml); then each job against its request, as above. About two hours
# on 2 CPUs; a measurement, not a test.
SCALE_MODEL := build/bert-base-narrow
$(SCALE_MODEL): | install
	$(BIN)/python tools/random_model.py $@ --geometry base --hidden 48 --intermediate 192
build/glue_scale/plan.yaml: | install
	$(BIN)/python benchmarks/glue_scale.py build/glue_scale
SCALE_TOKENS := $(foreach task,MNLI QQP QNLI,results/data/$(task)/tokens/bert-base-narrow.max128.parquet)
rehearsal-scale: install $(SCALE_MODEL) build/glue_scale/plan.yaml
	$(BIN)/python -m bertology_core.workflow.configuration config.yaml configs/rehearsal_scale.yaml configs/rehearsal_scale_tokens.yaml
	HF_HUB_OFFLINE=1 $(BIN)/snakemake $(SCALE_TOKENS) --profile profiles/cpu --cores $(CORES) \
		--directory build/rehearsal_scale_tokens --configfile configs/rehearsal_scale.yaml configs/rehearsal_scale_tokens.yaml
	HF_HUB_OFFLINE=1 $(BIN)/snakemake --profile profiles/cpu --cores $(CORES) --directory build/rehearsal_scale \
		--configfile configs/rehearsal_scale.yaml
	$(BIN)/python tools/fit_needs.py measure --run build/rehearsal_scale_tokens --configfile configs/rehearsal_scale.yaml \
		configs/rehearsal_scale_tokens.yaml --out build/rehearsal_scale_tokens/needs.parquet
	$(BIN)/python tools/fit_needs.py measure --run build/rehearsal_scale --configfile configs/rehearsal_scale.yaml \
		--out build/rehearsal_scale/needs.parquet
	$(BIN)/python tools/fit_needs.py check build/rehearsal_scale_tokens/needs.parquet build/rehearsal_scale/needs.parquet

# The first command on a new GPU machine (under 8 minutes): every comparison PASS or FAIL against its tolerance, exit 1
# on a FAIL; results/gpu_check/report.json and report.md. Without CUDA: a message; DRY=1 runs its steps small on a CPU
gpu-check: install
	$(BIN)/python tools/gpu_check.py $(if $(DRY),--dry)

# The tiny smoke config, end to end (seconds per job, about a minute in all).
smoke: install
	$(BIN)/python -m bertology_core.workflow.configuration config.yaml configs/smoke.yaml
	HF_HUB_OFFLINE=1 $(BIN)/snakemake --profile profiles/smoke

test: install
	$(BIN)/pip check
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -ra --durations=40
	HF_HUB_OFFLINE=1 $(BIN)/snakemake --lint --configfile configs/smoke.yaml

# Re-pin after changing a range in pyproject.toml: the newest versions the ranges admit, installed in a scratch
# venv, written to constraints.txt and envs/*.yaml (tools/lock.py); review the diff, then make test
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e ".[$(EXTRAS)]"
	.lock-venv/bin/pip check
	.lock-venv/bin/python tools/lock.py
	rm -rf .lock-venv

clean-results:
	rm -rf results logs .snakemake
