# partita: `make demo` and `make test` work on a fresh machine with Python 3.11 and gcc.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install bytecode test fuzz demo bench lint system clean

install: $(STAMP)

# System packages, installed when missing: a C compiler with OpenMP (generated code is C), make
# (exported libraries), PoCL, an OpenCL implementation on the CPU that runs the GPU code, and
# Python's headers (a tuned kernel's call checks its arguments in a small C extension) and
# PostgreSQL, whose server the tests of shared records start (initdb, pg_ctl).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system:
	@missing=""; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc libgomp1"; \
	command -v make >/dev/null 2>&1 || missing="$$missing make"; \
	[ -e /etc/OpenCL/vendors/pocl.icd ] || missing="$$missing pocl-opencl-icd ocl-icd-opencl-dev"; \
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  || missing="$$missing python3-dev"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(STAMP): pyproject.toml | system
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The package's bytecode, compiled ahead (only the files changed since): where the environment
# sets PYTHONDONTWRITEBYTECODE, Python never writes it, and every process partita starts (the
# worker that times kernels, a cluster's workers, each command) compiled the sources again,
# about 0.6 s a process.
bytecode: $(STAMP)
	$(PY) -m compileall -q src >/dev/null

# Two pytest workers: most tests are single-threaded, so on two cores the suite takes less
# time than on one worker. mypy (about 20 s of one core) checks the types beside them at the
# lowest priority, in the time the workers leave idle (waiting on servers, clusters and
# compilers), so that it never slows a test that times code; its report is printed after
# theirs, and the target fails if either fails.
test: bytecode
	$(PY) -m ruff check src tests bench
	nice -n 19 $(PY) -m mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	$(PY) -m pytest -n 2; tests=$$?; \
	wait $$mypy; types=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	[ $$tests -eq 0 ] && [ $$types -eq 0 ]

# The kernel families' fuzz tests at full strength: 100 random implementations per case, on
# the CPU and through OpenCL (PoCL), where `make test` checks 8 (about 15 minutes on 2 cores),
# and the redundant clauses of the larger spaces (every kernel's GPU space, the matmul
# chain's CPU one), which `make test` checks on the tiny matmul and the other CPU spaces only.
fuzz: bytecode
	$(PY) -m pytest -n 2 --fuzz 100 -k random tests/mdh/test_families.py tests/mdh/test_families_opencl.py \
	  tests/gpu/test_fuzz_opencl.py
	$(PY) -m pytest -n 2 --fuzz 100 tests/targets/test_spaces.py -k test_redundant_clauses_lose_no_implementation

# Tunes a matmul for about two minutes, compares it with numpy and writes an HTML report.
# The records go to demo/records.sqlite, so the demo always searches afresh.
demo: bytecode
	rm -rf demo && mkdir -p demo
	$(VENV)/bin/partita tune matmul m=256 n=256 k=32 --budget 2m --db demo/records.sqlite
	$(VENV)/bin/partita report matmul m=256 n=256 k=32 --db demo/records.sqlite --out demo/report
	$(VENV)/bin/partita export matmul m=256 n=256 k=32 --db demo/records.sqlite --out demo/c

# numpy is timed with OpenBLAS's own core detection: the two overrides are unset here only.
# The bench extra brings the libraries the kernel families are compared with (PyTorch) and
# TVM's MetaSchedule, the tuner partita is compared with at equal budget.
bench: bytecode
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) bench/space_bench.py --write BENCHMARKS.md
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/tune_bench.py --budget 300 \
	  --write BENCHMARKS.md
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/call_bench.py --budget 60 \
	  --write BENCHMARKS.md
	$(PY) bench/certificate_bench.py --budget 300 --write BENCHMARKS.md
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/families_bench.py --budget 120 \
	  --write BENCHMARKS.md
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/generic_bench.py --budget 600 \
	  --alone-budget 120 --write BENCHMARKS.md
	$(PY) bench/tvm_bench.py --budget 300 --write BENCHMARKS.md
	$(PY) bench/cluster_bench.py --write BENCHMARKS.md
	$(PY) bench/gpu_bench.py --budget 600 --write BENCHMARKS.md

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis demo
