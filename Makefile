# The README's two commands: `make run` (the app's main job) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test lint venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

run: venv
	$(BIN)/python -m app quickstart

lint: venv
	$(BIN)/ruff check app tests
	$(BIN)/mypy --strict app

test: lint
	$(BIN)/python -m app backend fetch --version 0.3.35 --version 0.3.36
	$(BIN)/python -m pytest -ra

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
