# The two commands of the README: `make run` (service + demo model, embedded) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install promtool run test test-unit bench openapi lint typecheck clean

# torch==2.13.0 first: it comes from the machine's local CPU wheel. A bare torch requirement with no
# torch installed would pull gigabytes of CUDA packages; pyproject's range is satisfied by 2.13.0.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) promtool

# promtool checks and tests the alert rules (tests/unit/test_alert_rules.py); prometheus scrapes a real
# deployment in tests/integration/test_observability.py and `python -m bench.observability`. Where either
# is not on PATH, Debian's prometheus package is unpacked into the virtualenv: no root, no server started.
# Where that fails, one line says so and the install goes on (those tests skip, or fail under CI where
# apt has the package).
promtool: $(STAMP)
	@if { command -v promtool && command -v prometheus; } >/dev/null 2>&1 \
	    || [ -x $(VENV)/bin/promtool -a -x $(VENV)/bin/prometheus ]; then :; \
	elif tmp=$$(mktemp -d) && (cd $$tmp && apt-get download prometheus && dpkg-deb -x prometheus_*.deb root \
	    && install -m 0755 root/usr/bin/promtool root/usr/bin/prometheus $(CURDIR)/$(VENV)/bin/) >/dev/null 2>&1; then \
	  rm -rf $$tmp; echo "install: $$($(VENV)/bin/prometheus --version 2>&1 | head -n1) and promtool unpacked into $(VENV)/bin"; \
	else \
	  rm -rf $$tmp; echo "install: prometheus and promtool not installed (no apt, or apt-get download prometheus failed); put Prometheus 2.42+ on PATH"; \
	fi

run: install
	$(PY) -m service

# The linter and the type checker first (about 30 s): a type error fails CI like a failing test.
test: install
	$(PY) -m ruff check unlearning service workers lethe_cli bench tests
	$(PY) -m mypy
	bash ops/ensure-services.sh
	$(PY) -m pytest

test-unit: install
	$(PY) -m pytest tests/unit

bench: install
	$(PY) -m bench.hessian_free --quick

openapi: install
	$(PY) -m service.openapi > openapi.yaml

lint: install
	$(PY) -m ruff check unlearning service workers lethe_cli bench tests

typecheck: install
	$(PY) -m mypy  # the packages in pyproject's [tool.mypy]: unlearning, service, workers, bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache
