PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow bench browser docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,full,targets]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fedaudit demo

# tests/reports/test_reports.py renders report.html in a real browser. As root, install Debian's chromium;
# otherwise stop with one line saying what to install.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing Debian's chromium for the browser test (apt-get install chromium)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	      { echo "make: apt-get could not install chromium; install it and rerun make test" >&2; exit 1; }; \
	  else \
	    echo "make test needs Chromium for the HTML report test: install it first (Debian/Ubuntu: sudo apt-get install chromium)" >&2; \
	    exit 1; \
	  fi; }

# The suite runs on one pytest-xdist worker per core (at most 4); the Ray tests share one worker
# (tests/conftest.py). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

test: $(STAMP) browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) benchmarks/mechanisms.py

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on any warning.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
