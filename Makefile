# The course's commands. The first two are all a newcomer needs:
#   make lab    set up .venv and open the lessons in JupyterLab
#   make test   set up .venv and run every test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# nbgrader shells out to alembic: the venv's bin/ must be on PATH even when the venv is not activated.
export PATH := $(abspath $(BIN)):$(PATH)
export PYTHONPATH := $(abspath .)
PYTEST_ARGS ?=
# Extra options for `make lab`, e.g. LAB_ARGS="--port=8899 --no-browser" (the browser tests pass port and token).
LAB_ARGS ?=
# JupyterLab refuses to start as root (a container, a cloud machine) unless told --allow-root; `make lab` tells it.
AS_ROOT := $(shell test "$$(id -u)" = 0 && echo yes)
ROOT_NOTE := make lab: you are root, so JupyterLab starts with --allow-root (notebooks run with root's rights)

.PHONY: help venv lab test test-fast lessons check-lessons bench docs mutants clean bundle

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/.installed: requirements.txt
	@# Grading as root isolates each notebook with bubblewrap and refuses to run without it (autograder/kernel/sandbox.py).
	@if [ -n "$(AS_ROOT)" ] && ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing bubblewrap (Debian package): grading as root runs each notebook in its sandbox"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    bubblewrap >/dev/null; fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

venv: $(BIN)/.installed ## create .venv with everything the course and its tests need

lab: venv ## open the lessons in JupyterLab
	$(if $(AS_ROOT),@echo "$(ROOT_NOTE)")
	cd lessons && env -u MPLBACKEND ../$(BIN)/jupyter lab $(if $(AS_ROOT),--allow-root) $(LAB_ARGS)

# The full proof: as root it installs the Debian packages the browser, PostgreSQL and sandbox tests need
# (tests/system_packages.sh; otherwise it fails at once naming them), and a test that skips fails the run.
# MHA_ALLOW_SKIPS=1 make test lets those tests skip instead.
FULL_PROOF := $(if $(MHA_ALLOW_SKIPS),,MHA_FULL_PROOF=1 MHA_REQUIRE_BROWSER=1 AUTOGRADER_REQUIRE_POSTGRES=1)
test: venv ## run the whole test suite, the full proof (what CI runs); prints the 15 slowest tests
	$(if $(MHA_ALLOW_SKIPS),,bash tests/system_packages.sh)
	$(FULL_PROOF) $(PY) -m pytest -n 2 --dist loadfile --durations=15 $(PYTEST_ARGS)

# pytest keeps its rewritten test modules only where Python may write bytecode: from the second run on, each
# worker skips about 5 s of compiling
test-fast: venv ## the inner loop: no kernel, browser or server, a 10-salt sweep (under a minute on 2 cores)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 2 --dist loadfile -m "not grading and not kernel and not browser and not server and not slow" \
		$(PYTEST_ARGS)

lessons: venv ## rebuild lessons/ from solutions/ (the single source)
	$(PY) -m autograder.publish.build

check-lessons: venv ## fail if lessons/ differs from what solutions/ builds
	$(PY) -m autograder.publish.build --check

clean:
	rm -rf build .pytest_cache .hypothesis

bench: venv ## print speed and memory figures (every script in bench/)
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

docs: venv ## rebuild the generated docs: docs/bug-catalog.md, docs/layers.svg and the README's Binder badge
	$(PY) -m autograder.publish.bug_table
	$(PY) -m autograder.publish.learner_env
	$(PY) -m autograder.proofs.layout

# The learner bundle: make bundle [BUNDLE=path.zip]
BUNDLE ?= build/mha-course-lessons.zip
bundle: venv ## write the learner bundle (zip): the student notebooks, the glossary, requirements.txt, a README
	$(PY) -m autograder.publish.bundle --out "$(BUNDLE)"

mutants: venv ## grade every catalogued bug for real and print the mutation score
	$(PY) -m autograder.proofs.mutation

.PHONY: grade formgrader
GRADE_OUT = $(or $(OUT),grading)
# A database password never appears on a command line make echoes: DB (or MHA_GRADEBOOK_URL) reaches the command
# through the environment, and the password may instead live in PGPASSWORD or ~/.pgpass.
grade formgrader: export MHA_GRADEBOOK_URL := $(or $(DB),$(MHA_GRADEBOOK_URL))
grade: venv ## grade a download into the term: make grade SUBMISSIONS=path [OUT=grading] [LESSONS="01 05"] [CLOSE="01"] [WORKERS=n] [DB=postgresql://...] [SCHEDULER=tcp://host:8786] [DUE="01=2026-10-01T23:59"] [CANVAS_ASSIGNMENTS="01=12345"] [GRADE_ARGS=--no-similarity]
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder-or-zip [OUT=grading] [LESSONS=\"01 05\"] [CLOSE=\"01\"] [WORKERS=n] [DB=url] [SCHEDULER=tcp://host:8786] [DUE=\"01=2026-10-01T23:59\"] [CANVAS_ASSIGNMENTS=\"01=12345\"]" >&2; exit 2; }
	$(PY) -m autograder.grade "$(SUBMISSIONS)" --out "$(GRADE_OUT)" $(if $(LESSONS),--lessons $(LESSONS)) $(if $(CLOSE),--close $(CLOSE)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(DUE),--due $(DUE)) $(if $(CANVAS_ASSIGNMENTS),--canvas-assignments $(CANVAS_ASSIGNMENTS)) $(GRADE_ARGS)

formgrader: venv ## mark the written answers (lessons 05 and 08) in nbgrader's formgrader: make formgrader [OUT=grading]
	@test -f "$(GRADE_OUT)/course/nbgrader_config.py" || { echo "no grading course in $(GRADE_OUT)/course: run make grade SUBMISSIONS=... OUT=$(GRADE_OUT) first" >&2; exit 2; }
	@if [ "$$(id -u)" = 0 ]; then echo "running as root: starting JupyterLab with --allow-root"; fi
	cd "$(GRADE_OUT)/course" && env -u MPLBACKEND $(abspath $(BIN))/jupyter lab --ServerApp.root_dir=. \
		--LabApp.default_url=/formgrader $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)
