# SparkPanel — the two commands that matter are `make run` and `make test`.
.PHONY: run test bench lint format setup clean help

help:
	@echo "make run    set everything up and serve the panel (http://127.0.0.1:8000)"
	@echo "make test   set everything up and run lint + the whole test suite"
	@echo "make bench  measure sparksim and the benchmark harness (see docs/BENCHMARKS.md)"
	@echo "make lint   ruff check + format check only"
	@echo "make format apply ruff's formatting and safe fixes"

run:
	@bash tools/run.sh

test:
	@bash tools/test.sh

setup:
	@bash tools/bootstrap.sh

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format: setup
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

clean:
	rm -rf .venv var .pytest_cache .ruff_cache

# Measured figures for docs/BENCHMARKS.md (ratios, medians and spreads; not part of make test).
bench:
	@bash tools/bootstrap.sh redis-server
	.venv/bin/python -m bench.sparksim_calibration
	.venv/bin/python -m bench.sparksim_capacity
	.venv/bin/python -m bench.harness_accuracy
	.venv/bin/python -m bench.telemetry_fanout
	.venv/bin/python -m bench.chat_relay
