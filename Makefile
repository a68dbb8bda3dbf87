# fedviews: two entry points, see README.md
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: demo test install install-dev data lint typecheck docs

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	@# Debian's Fashion-MNIST (IDX files under /usr/share/datasets/fashion-mnist)
	@if [ ! -d /usr/share/datasets/fashion-mnist ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null; } || \
	  echo "warning: could not install dataset-fashion-mnist (Fashion-MNIST experiments and tests will fail)"; fi
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q "torch>=2.2"
	$(BIN)/pip install -q -e ".[torch,grpc]"

install-dev: install
	@# Debian's headless Chromium: the report tests load report.html in it
	@if ! command -v chromium >/dev/null 2>&1; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q chromium >/dev/null; } || \
	  echo "warning: could not install chromium (the report tests will be skipped)"; fi
	$(BIN)/pip install -q -e ".[torch,grpc,dev,flower,parquet,privacy,docs]"

data: install
	$(BIN)/fedviews datasets fetch handwritten mnist

demo: data
	$(BIN)/fedviews run configs/mmvfl_handwritten.toml $(ARGS)

# the site into site/; NO_MKDOCS_2_WARNING: Material for MkDocs' supported switch for its
# end-of-life banner (colour codes on stderr, nothing a user of this site can act on)
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint:
	$(BIN)/ruff check src tests benchmarks docs/examples
	$(BIN)/ruff format --check src tests benchmarks docs/examples

typecheck:
	$(BIN)/mypy

test: install-dev data lint typecheck
	@# pytest exits 5 when it collects nothing: that is a failure too
	$(BIN)/python -m pytest $(ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected" >&2; exit 1; fi; exit $$rc
