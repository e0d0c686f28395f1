"""Shared fixtures (sim_host, engine_host, qwen, too_long) live in tests/conftest.py."""
