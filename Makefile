# sglang-spec-optimizer. Two set-up commands: `make optimize` and `make test` (each installs what it needs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

STUDY    ?= demo
TRIALS   ?= 30
SPACE    ?= search_spaces/demo.yaml
PROFILE  ?= kimi-k2.5-8x-rtxpro6000
SEED     ?= 0
HOSTS    ?=
EXECUTOR ?= ray
ARGS     ?=
JOBS     ?=
PORT     ?= 8080
# A demo-sized benchmark per trial (the simulator boots a 12-minute profile in ~2 s); override for real runs.
# TRIALS is a ceiling: the search stops itself once another launch is expected to gain less than 2 %
# (budget.stop_below_gain_pct). The demo ends with a sequential confirmation: up to 3 rounds of the baseline and the
# 2 best, each round relaunching only what is still in question, stopping once the verdict is decided.
DEMO_ARGS ?= --max-tokens 64 --chunks 4 --requests-per-chunk 2 --boot-timeout 30 --confirm-rounds 3 --confirm-top 2

.PHONY: install optimize confirm test lint bench bench-quick dashboard report export status clean system-deps help

help:
	@echo "make optimize   run a demo study on the bundled simulator (STUDY= TRIALS= SPACE= PROFILE= SEED= HOSTS=)"
	@echo "make test       run the test suite (installs openssh-server and chromium if missing)"
	@echo "make bench      efficiency benchmark: prints a table, writes studies/bench/results.json (JOBS= processes, default all cores)"
	@echo "make bench-quick the default sampler's restarts on the scenarios and every landscape family, fewer seeds"
	@echo "make dashboard  optuna-dashboard for STUDY on 127.0.0.1:$(PORT)"
	@echo "make confirm    relaunch STUDY's best configurations and the baseline; export the confirmed best"
	@echo "make report     studies/STUDY/report.html (offline plotly report)"
	@echo "make export     rewrite studies/STUDY/best.yaml, best.env and summary.json from storage"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests use for real parts: an OpenSSH server on loopback and a headless Chromium.
system-deps:
	@missing=""; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

optimize: $(STAMP)
	$(BIN)/python -m optimizer optimize --study $(STUDY) --trials $(TRIALS) --space $(SPACE) \
	  --profile $(PROFILE) --seed $(SEED) --executor $(EXECUTOR) $(if $(HOSTS),--hosts $(HOSTS)) $(DEMO_ARGS) $(ARGS)

test: $(STAMP) system-deps lint
	$(BIN)/python -m pytest -q $(ARGS)

# ruff (configured in pyproject.toml): lint and formatting, checked before the tests.
lint: $(STAMP)
	$(BIN)/ruff check optimizer benchmarks tests tools
	$(BIN)/ruff format --check optimizer benchmarks tests tools

# Independent runs go to JOBS worker processes (default: one per core); the figures are the same for any JOBS.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(if $(JOBS),--jobs $(JOBS)) $(ARGS)

# The check for every search change: the default sampler's restarts, four scenarios x 10 seeds and every family
# (benchmarks/run.py FAMILIES); writes studies/bench/quick.json.
bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.run --quick $(if $(JOBS),--jobs $(JOBS)) $(ARGS)

dashboard: $(STAMP)
	$(BIN)/python -m optimizer dashboard --study $(STUDY) --host 127.0.0.1 --port $(PORT)

# Relaunch a study's best configurations and the baseline (up to 3 rounds, fewer once decided) and export the
# confirmed best; ARGS="--confirm-rounds 4" after 3 adds one more round to the runs already made.
confirm: $(STAMP)
	$(BIN)/python -m optimizer confirm --study $(STUDY) --space $(SPACE) --profile $(PROFILE) --executor $(EXECUTOR) \
	  $(if $(HOSTS),--hosts $(HOSTS)) $(DEMO_ARGS) $(ARGS)

report: $(STAMP)
	$(BIN)/python -m optimizer report --study $(STUDY)

export: $(STAMP)
	$(BIN)/python -m optimizer export --study $(STUDY)

status: $(STAMP)
	$(BIN)/python -m optimizer status --study $(STUDY)

clean:
	rm -rf $(VENV) *.egg-info
