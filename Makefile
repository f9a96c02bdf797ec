# The README's two commands: `make run` (the app's main job) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# System libraries Qt's offscreen platform needs (the GUI and its tests): installed only when missing, only as root.
QT_DEB_PACKAGES := libegl1 libgl1 libfontconfig1 libxkbcommon0 libglib2.0-0 libdbus-1-3 fonts-dejavu-core

.PHONY: run test lint venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for pkg in $(QT_DEB_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	  if [ -n "$$missing" ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	  fi; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

run: venv
	$(BIN)/python -m app

lint: venv
	$(BIN)/ruff check app tests
	$(BIN)/mypy --strict app

test: lint
	$(BIN)/python -m app backend fetch --version 0.3.35 --version 0.3.36
	$(BIN)/python -m pytest -ra

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
