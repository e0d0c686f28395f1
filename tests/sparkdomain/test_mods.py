"""What a container mod is, bounded (sparkdomain/mods.py)."""

from __future__ import annotations

import io
import tarfile

import pytest

from sparkdomain import mods

RUN = b'#!/bin/sh\nset -e\ncp template.jinja "$WORKSPACE_DIR/t.jinja"\n'


@pytest.mark.parametrize(
    ("ref", "name"),
    [("mods/fix-x", "fix-x"), ("fix-x", "fix-x"), ("@eugr/mods/fix-x", "fix-x"),
     ("mods/fix-qwen3.5-chat-template/", "fix-qwen3.5-chat-template")],
)  # fmt: skip
def test_a_recipes_mod_entry_names_the_folder_as_sparkrun_resolves_it(ref, name) -> None:
    assert mods.mod_name(ref) == name


def test_the_archive_puts_the_files_under_workspace_mods_with_run_sh_executable() -> None:
    bundle = mods.ModBundle("fix-x", {"run.sh": RUN, "template.jinja": b"{{ x }}",
                                      "patches/a.diff": b"--- a\n"})  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(bundle.archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["workspace/mods/fix-x/run.sh"].mode == 0o755
        assert members["workspace/mods/fix-x/template.jinja"].mode == 0o644
        assert members["workspace/mods/fix-x/patches"].isdir()
        assert tar.extractfile("workspace/mods/fix-x/run.sh").read() == RUN
        assert all(m.uid == 0 and not m.issym() and not m.islnk() for m in members.values())


def test_the_digest_and_the_derived_tag_change_with_any_byte() -> None:
    files = {"run.sh": RUN, "a.py": b"x = 1\n"}
    same = mods.bundle_digest(dict(reversed(list(files.items()))))
    assert mods.bundle_digest(files) == same
    changed = mods.bundle_digest({**files, "a.py": b"x = 2\n"})
    assert changed != same
    one = [mods.ModBundle("fix-x", files)]
    assert mods.derived_tag("sha256:a", one) == mods.derived_tag("sha256:a", one)
    assert mods.derived_tag("sha256:a", one) != mods.derived_tag("sha256:b", one)
    assert mods.derived_tag("sha256:a", one) != mods.derived_tag(
        "sha256:a", [mods.ModBundle("fix-x", {**files, "a.py": b"x = 2\n"})]
    )


@pytest.mark.parametrize(
    ("name", "files", "why"),
    [
        ("fix-x", {"setup.sh": RUN}, "has none"),
        ("../x", {"run.sh": RUN}, "a mod's name"),
        ("fix-x", {"run.sh": RUN, "../evil": b""}, "no '..'"),
        ("fix-x", {"run.sh": RUN, "/etc/passwd": b""}, "relative paths"),
        ("fix-x", {"run.sh": RUN, "big": b"x" * (mods.MAX_FILE_BYTES + 1)}, "KiB"),
        ("fix-x", {"run.sh": RUN, **{f"f{i}": b"" for i in range(mods.MAX_FILES)}}, "files"),
    ],
)
def test_a_snapshot_is_bounded(name, files, why) -> None:
    problem = mods.snapshot_problem(name, files)
    assert problem and why in problem
