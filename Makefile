# The two commands: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install the project on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test check bench install clean assets

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ccb demo

test: $(STAMP)
	VENV=$(VENV) scripts/test

check: $(STAMP)
	VENV=$(VENV) scripts/check

bench: $(STAMP)
	$(PY) -m bench

# Front ends: Vue/Vite sources in frontend/, built into the package (only this target needs node;
# the built files are committed, so users and CI never need it).
assets:
	cd frontend/demo-web && npm ci --no-audit --no-fund && npm run build
	cd frontend/dashboard && npm ci --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
