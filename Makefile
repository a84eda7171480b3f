# overlay: everyday targets. `make help` lists them.
PYTHON ?= .venv/bin/python
OVERLAY ?= .venv/bin/overlay

.PHONY: help install run lint test test-real verify-rocm-overlay verify-rocm ci
# After any target that installs, this line says how to put `overlay` on PATH.
ACTIVATE = @echo "overlay is installed in .venv; put it on PATH with:  . .venv/bin/activate"

help:
	@echo "install              create .venv and install overlay with its test extras"
	@echo "run                  install, then assemble the overlay and export it to build/rocm/src"
	@echo "lint                 ruff (format and rules) over overlay/, tests/, benchmarks/; mypy over overlay/"
	@echo "test                 make lint, then the test suite (pytest), without the real-mirror tests"
	@echo "test-real            the tests on the real mirrors (needs OVERLAY_UPSTREAM_URL, OVERLAY_FORK_URL)"
	@echo "verify-rocm-overlay  check every record of the overlay (offline-capable, no GPU)"
	@echo "verify-rocm          verify-rocm-overlay, then build and run the suites (GPU), and without"
	@echo "                     a GPU the race lab's host-model suites (never a GPU result)"
	@echo "ci                   the per-PR gate (overlay ci --only verify,check), reports in build/;"
	@echo "                     requires verify, and check where a toolchain is found or \$$CI is set"
	@echo "  OVERLAY_REQUIRE=\"verify check\"  (ci, verify-rocm) these stages must run and pass"
	@echo "  OVERLAY_CI_STAGES=verify,check,build  (ci) the stages run (default verify,check)"
	@echo "  OVERLAY_STAGES=\"verify host-model\"  (verify-rocm) run only these stages: stages are"
	@echo "                     verify, build (a first one takes many minutes), suites, host-model"
	@echo "  OVERLAY_HOST_MODEL_ARGS=\"--runs 3\"  (verify-rocm) options of the host-model stage;"
	@echo "                     OVERLAY_HOST_MODELS=1 runs it on an AMD host too"
	@echo "then: . .venv/bin/activate   puts overlay on PATH for the commands of the README"

# A plain path entry instead of setuptools' import hook: nothing runs at interpreter start
# (a shorter window where Ctrl-C is Python's, docs/exit-codes.md), and packages added
# since the install are found.
EDITABLE = --config-settings editable_mode=compat

# bin/overlay is copied into .venv/bin at the install (script-files, pyproject.toml):
# an edit of it installs again.
.venv/bin/overlay: bin/overlay
	python3 -m venv .venv
	$(PYTHON) -m pip install -q -e '.[test]' $(EDITABLE)

install: .venv/bin/overlay
	$(ACTIVATE)

run: .venv/bin/overlay
	$(OVERLAY) status
	$(OVERLAY) export build/rocm/src
	$(ACTIVATE)

# A .venv made before ruff and mypy joined the test extra gets them here. Order-only
# (after the |): pip rewrites .venv/bin/overlay on every install, so a normal
# prerequisite would make every `make lint` install again.
.venv/bin/ruff .venv/bin/mypy &: | .venv/bin/overlay
	$(PYTHON) -m pip install -q -e '.[test]' $(EDITABLE)

lint: .venv/bin/ruff .venv/bin/mypy
	.venv/bin/ruff format --check overlay tests benchmarks
	.venv/bin/ruff check overlay tests benchmarks
	.venv/bin/mypy

# test leaves out the tests on the real mirrors (marker real_mirrors), also where
# OVERLAY_UPSTREAM_URL / OVERLAY_FORK_URL are exported for `make run`; test-real runs
# only those, and needs the two variables (README: how long each takes).
test: lint
	$(PYTHON) -m pytest -q -m "not real_mirrors"
	$(ACTIVATE)

test-real: .venv/bin/overlay
	@test -n "$$OVERLAY_UPSTREAM_URL" -a -n "$$OVERLAY_FORK_URL" || { \
		echo "make test-real: set OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL to the real mirrors" >&2; exit 2; }
	$(PYTHON) -m pytest -q -m real_mirrors

verify-rocm-overlay: .venv/bin/overlay
	$(OVERLAY) verify

# OVERLAY_REQUIRE="verify check": stages that must run and pass. A required stage the
# machine cannot run (no toolchain, no GPU) fails instead of being skipped. Read by
# `make ci` (overlay ci --require) and `make verify-rocm` (tools/verify-rocm.sh).
OVERLAY_REQUIRE ?=

# verify-rocm: five stages (tools/verify-rocm.sh, docs/build.md): verify (verify-rocm-overlay),
# behaviour (`overlay drift --behaviour`: the ROCm functors against upstream's CPU ones),
# build (`overlay build --backend rocm`: a first build takes many minutes), suites (GPU),
# host-model (without an AMD GPU, or with OVERLAY_HOST_MODELS=1: the race lab's host-model
# suites, never a GPU result, docs/race-lab.md). Each prints a start line, then passed,
# failed or skipped with the reason.
# OVERLAY_STAGES="verify host-model" runs only those stages (the others say skipped);
# OVERLAY_REQUIRE also takes host-model.
# OVERLAY_BUILD_ARGS="--arch gfx1030" passes options to `overlay build`;
# OVERLAY_HOST_MODEL_ARGS="--runs 3" to `overlay suite run --host-models`.
OVERLAY_STAGES ?=
verify-rocm: .venv/bin/overlay
	@OVERLAY="$(OVERLAY)" MAKE="$(MAKE)" OVERLAY_REQUIRE="$(OVERLAY_REQUIRE)" \
		OVERLAY_STAGES="$(OVERLAY_STAGES)" tools/verify-rocm.sh

# ci: the per-pull-request gate of docs/build.md; reports go to build/ (JUnit, JSON,
# Markdown for the PR body). OVERLAY_CI_STAGES (default verify,check) are the stages run.
# Without OVERLAY_REQUIRE it passes `--require auto`: verify is required, and check where
# a toolchain is found or $$CI is set (a CI runner without one fails); a laptop without a
# toolchain passes with check skipped. OVERLAY_REQUIRE="verify check" requires exactly
# those. OVERLAY_CI_ARGS passes other options (e.g. "--arch gfx1030").
OVERLAY_CI_STAGES ?= verify,check
ci: .venv/bin/overlay
	@mkdir -p build
	$(OVERLAY) ci --only $(OVERLAY_CI_STAGES) --require $(if $(strip $(OVERLAY_REQUIRE)),"$(strip $(OVERLAY_REQUIRE))",auto) $(OVERLAY_CI_ARGS) \
		--junit build/overlay-junit.xml --json build/overlay-ci.json --markdown build/overlay-ci.md
