"""The commands pages show (the wizard, a recipe, a run, a job): one option per line, so a
page never breaks a line inside a flag (issue 43), and still one command a shell runs as
the same argument vector."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkdomain.command import docker_run_argv, serve_argv, shell_line, shell_lines
from sparkdomain.presets import RECIPES


def _as_bash_reads_it(command: str) -> list[str]:
    """What bash makes of the command: its words, one per NUL."""
    out = subprocess.run(
        ["bash", "-c", f'set -- {command}\nprintf "%s\\0" "$@"'],
        capture_output=True, check=True, env={"HOME": "/home/sp", "PATH": os.environ["PATH"]},
    )  # fmt: skip
    return out.stdout.decode().split("\0")[:-1]


def _expanded(argv: list[str]) -> list[str]:
    return [a.replace("$HOME/", "/home/sp/", 1) if a.startswith("$HOME/") else a for a in argv]


@pytest.mark.parametrize("preset", RECIPES, ids=lambda p: p["slug"])
def test_every_preset_command_runs_as_the_same_vector_one_option_a_line(preset):
    from apps.recipes.models import Recipe

    recipe = Recipe(
        **{k: v for k, v in preset.items() if k in {f.name for f in Recipe._meta.fields}}
    )
    for argv in (serve_argv(recipe), docker_run_argv(recipe)):
        text = shell_lines(argv)
        assert _as_bash_reads_it(text) == _expanded(argv) == _as_bash_reads_it(shell_line(argv))
        for line in text.splitlines()[1:]:
            assert line.startswith(("  -", "  vllm/", "  nvcr.io/")), line
        # an option and its value share a line: the line never ends inside a flag
        assert "--gpu-memory-utilization " + str(recipe.gpu_memory_utilization) in text


def test_an_option_keeps_one_value_and_the_image_and_its_command_start_a_line():
    argv = ["docker", "run", "--rm", "-v", "$HOME/.cache/hf:/root/.cache/hf", "img:1",
            "vllm", "serve", "org/m", "--max-num-seqs", "-1", "--enable-auto-tool-choice",
            "--chat-template-kwargs", '{"enable_thinking": false}']  # fmt: skip
    assert shell_lines(argv).splitlines() == [
        "docker run \\",
        "  --rm \\",
        "  -v $HOME/.cache/hf:/root/.cache/hf \\",
        "  img:1 vllm serve org/m \\",
        "  --max-num-seqs -1 \\",
        "  --enable-auto-tool-choice \\",
        """  --chat-template-kwargs '{"enable_thinking": false}'""",
    ]
    assert _as_bash_reads_it(shell_lines(argv)) == _expanded(argv)


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"),
                        min_size=1, max_size=12), min_size=1, max_size=12))  # fmt: skip
def test_any_vector_reads_back_the_same(argv):
    argv = [a for a in argv if not a.startswith("$HOME/")]
    if argv:
        assert _as_bash_reads_it(shell_lines(argv)) == argv
