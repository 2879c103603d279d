# Podium: `make run` runs the portal, `make test` runs the checks.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SUPERVISOR := scoring/supervisor/supervise
# The calibration workload (scoring/run/calibration.py), built like the supervisor.
CALIBRATE := scoring/calibrate/calibrate
# The arm64 supervisor, cross-built on any host (Debian: gcc-aarch64-linux-gnu).
SUPERVISOR_AARCH64 := scoring/supervisor/supervise-aarch64
AARCH64_CC ?= aarch64-linux-gnu-gcc

.PHONY: run test host-packages-run host-packages-test host-packages-bench install supervisor calibrate supervisor-aarch64 base-images build-network lint typecheck pytest bench clean

# Builds may reach this machine's own package mirrors (read from its apt and pip
# configuration now), even where those sit inside ranges the build policy blocks.
export PODIUM_BUILD_EGRESS_ALLOW ?= $(shell scripts/mirror-allowlist)

# A development machine: PODIUM_LOCAL=1 lets the portal serve on its public built-in
# secret key (production refuses it; see README, Production).
run: export PODIUM_LOCAL = 1
run: host-packages-run install supervisor calibrate base-images
	$(BIN)/python manage.py migrate --noinput
	-$(MAKE) build-network
	$(BIN)/python manage.py seed_demo
# The demo campaign's baseline: the starter kit, built once (Docker); a failure here
# only leaves the campaign without rounds until it runs again.
	-$(BIN)/python manage.py campaign_baseline demo-campaign
	@echo "make run: a local portal on a public secret key and plain HTTP; not for production (README: Production)"
	$(BIN)/honcho start -f Procfile

# The build network and its firewall rules (root: through sudo when not root). Without
# them the portal still runs, but builds wait until `manage.py build_network --apply` ran.
build-network: install
	@if [ "$$(id -u)" -eq 0 ]; then $(BIN)/python manage.py build_network --apply; \
	elif sudo -n true 2>/dev/null; then \
	  sudo -n --preserve-env=PODIUM_BUILD_EGRESS_ALLOW,PODIUM_DATA_DIR,DATABASE_URL \
	    $(BIN)/python manage.py build_network --apply; \
	else echo "build-network: not root and no sudo: builds will wait until" \
	  "'manage.py build_network --apply' runs as root"; fi

# Tests keep their database and broker files apart from the portal's own (var/).
test: export PODIUM_DATA_DIR ?= $(CURDIR)/var/test
test: host-packages-test install supervisor base-images lint typecheck pytest

# The Debian packages `make run` and `make test` need (scripts/host-packages says which):
# installed when missing, as root or through `sudo -n`; otherwise named, and the target fails.
host-packages-run:
	scripts/host-packages run

host-packages-test:
	scripts/host-packages test

host-packages-bench:
	scripts/host-packages bench

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy .

# The Docker-free tests on every CPU (pytest-xdist), then the Docker, end-to-end and
# serial tests one at a time: they time real containers, share the one engine, or
# measure this machine's idle CPUs.
pytest: install supervisor calibrate
	$(BIN)/pytest -n auto -m "not docker and not e2e and not serial"
	$(BIN)/pytest -m "docker or e2e or serial"
	env -u DATABASE_URL $(BIN)/pytest tests/submissions/test_concurrent_charging.py

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

supervisor: $(SUPERVISOR)

calibrate: $(CALIBRATE)

$(CALIBRATE): scoring/calibrate/calibrate.c
	$(CC) -O2 -static -Wall -Wextra -Werror -o $@ $<

$(SUPERVISOR): scoring/supervisor/supervise.c
	$(CC) -O2 -static -Wall -Wextra -Werror -o $@ $<

supervisor-aarch64: $(SUPERVISOR_AARCH64)

$(SUPERVISOR_AARCH64): scoring/supervisor/supervise.c
	$(AARCH64_CC) -O2 -static -Wall -Wextra -Werror -o $@ $<

# The local base images the starter kit and the tests build on (no registry needed).
base-images:
	scripts/base-images

bench: host-packages-bench install supervisor calibrate base-images
	$(BIN)/python bench/score_overhead.py
	$(BIN)/python bench/build_egress.py
	$(BIN)/python bench/dockerfile_policy.py
	$(BIN)/python bench/estimation.py

clean:
	rm -rf var build $(SUPERVISOR) $(SUPERVISOR_AARCH64) $(CALIBRATE)
