# overlay: everyday targets. `make help` lists them.
PYTHON ?= .venv/bin/python
OVERLAY ?= .venv/bin/overlay

.PHONY: help install run test verify-rocm-overlay verify-rocm ci

help:
	@echo "install              create .venv and install overlay with its test extras"
	@echo "run                  install, then assemble the overlay and export it to build/rocm/src"
	@echo "test                 run the test suite (pytest)"
	@echo "verify-rocm-overlay  check every record of the overlay (offline-capable, no GPU)"
	@echo "verify-rocm          verify-rocm-overlay, then build and run the suites"

.venv/bin/overlay:
	python3 -m venv .venv
	$(PYTHON) -m pip install -q -e '.[test]'

install: .venv/bin/overlay

run: .venv/bin/overlay
	$(OVERLAY) status
	$(OVERLAY) export build/rocm/src

test: .venv/bin/overlay
	$(PYTHON) -m pytest -q

verify-rocm-overlay: .venv/bin/overlay
	$(OVERLAY) verify
