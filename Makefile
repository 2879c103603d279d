# Podium: `make run` runs the portal, `make test` runs the checks.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SUPERVISOR := scoring/supervisor/supervise

.PHONY: run test install supervisor base-images lint typecheck pytest bench clean

run: install supervisor base-images
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	$(BIN)/honcho start -f Procfile

# Tests keep their database and broker files apart from the portal's own (var/).
test: export PODIUM_DATA_DIR ?= $(CURDIR)/var/test
test: install supervisor base-images lint typecheck pytest

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy .

pytest: install supervisor
	$(BIN)/pytest
	env -u DATABASE_URL $(BIN)/pytest tests/submissions/test_concurrent_charging.py

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

supervisor: $(SUPERVISOR)

$(SUPERVISOR): scoring/supervisor/supervise.c
	$(CC) -O2 -static -Wall -Wextra -Werror -o $@ $<

# The local base images the starter kit and the tests build on (no registry needed).
base-images:
	scripts/base-images

bench: install supervisor base-images
	$(BIN)/python bench/score_overhead.py

clean:
	rm -rf var build $(SUPERVISOR)
