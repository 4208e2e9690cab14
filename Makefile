# Two commands on a fresh machine: `make run` and `make test` (each sets up .venv first).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
CHROMIUM ?= /usr/bin/chromium

.PHONY: run test test-fast lint compat-check bench docs docs-images venv clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[test,batch,bench,docs]'
	touch $@

venv: $(VENV)/.installed

## run: local broker + worker (web on 6066) + sample traffic + a live view of the revisions
run: venv
	@$(PY) -m app.dev.run_local

## test: the whole suite, broker tests included (a local broker is started by the tests; the
## image tier installs Debian's docker.io and debootstrap when absent and starts dockerd);
## ARGS="tests/broker/test_views.py -x" passes pytest arguments (a file, -k, -x)
## TEST_JOBS: pytest-xdist workers (most end-to-end tests wait on workers and the broker, so two
## run side by side on 2 cores; docs/contributing/tests.md#the-budget)
ARGS ?=
TEST_JOBS ?= 2
test: venv lint $(CHROMIUM)
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup $(ARGS)

## test-fast: the unit and agent tiers only (no broker, no Spark, no browser): ~27 s on two
## xdist workers (~44 s in one process: the tiers are CPU-bound, so they split over 2 cores)
test-fast: venv
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadgroup -m "unit or agent" -q $(ARGS)

## lint: ruff (lint and format check) on app/, tests/ and bench/, and mypy on app/ (~15 s);
## `make test` runs it first, so a finding fails CI (docs/contributing/checks.md)
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

## compat-check: try another faust-streaming/aiokafka release, e.g. VERSION="aiokafka==0.13.0"
## (a pip requirement list): installs etj with it in a scratch venv ($(COMPAT_VENV)), then checks
## the upstream source each patch was written against (python -m app.compat.upstream_audit) and runs
## the unit and agent tiers (docs/contributing/patches.md)
COMPAT_VENV ?= .venv-compat
compat-check:
	@test -n '$(VERSION)' || { echo 'usage: make compat-check VERSION="aiokafka==0.13.0"'; exit 2; }
	@$(MAKE) --no-print-directory venv
	$(PY) -m app.compat.release_check --venv '$(COMPAT_VENV)' '$(VERSION)'

## bench: benchmarks (print figures, write bench/results/latest.json);
## ARGS="--quick --only throughput" passes options to python -m bench
bench: venv
	$(PY) -m bench $(ARGS)

## docs: serve the documentation site on http://127.0.0.1:8000/ (rebuilt on every save)
docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

## docs-images: regenerate the pictures the docs show (docs/img/timeline.png: the browser test's
## scenario, against a local broker and a real worker; test runs write theirs to a tmp dir)
docs-images: venv $(CHROMIUM)
	ETJ_DOCS_IMAGES=docs/img $(PY) -m pytest -q -p no:cacheprovider \
	  "tests/browser/test_timeline_page.py::test_page_draws_a_consultant_and_shows_a_live_correction"

# the timeline page's browser test drives Debian's chromium (Playwright never downloads one);
# installed only when absent (CI runs as root)
$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
	  || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

clean:
	rm -rf $(VENV) $(COMPAT_VENV) var .pytest_cache .hypothesis
