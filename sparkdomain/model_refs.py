"""Where a recipe may point vLLM for a model, a tokenizer or a folder it reads: a Hugging
Face Hub id, or a path inside the host's model directories. Pure Python, no Django.

Why (issue 38, finding 9): with `--trust-remote-code` vLLM imports the Python it finds
beside the model and the tokenizer, so a value such as `a/../../../../tmp/evil` or
`/root/.ssh` let whoever wrote a recipe choose code or secrets on the Spark. One function
judges every such value — `model_ref_problem` — for the recipe's model field, the
`--tokenizer` extra argument (forms, the API, YAML and sparkrun import all pass through
them) and, in front of both engines, every path-valued option of the final vector
(`sparkdomain/command.py::assert_safe_argv`).

The value is normalised before it is judged, the way something on the way to vLLM might
read it: %-escapes decoded (`%2e%2e` is `..`), backslashes read as `/`, `//` and `.`
collapsed. What is refused whatever else it says: control characters (NUL, newlines),
`~` (a home directory), any `..` part (a symbolic link makes `..` leave a directory that
`os.path.normpath` would say it stays in, so `..` is never judged by the spelling), and
%-escapes or backslashes in what is stored. Then the value is a Hub id, or an absolute
path inside (or at) one of the host's model directories (`server_model_dirs`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from urllib.parse import unquote

# Where the Docker engine mounts a host's Hugging Face cache (apps/hosts/engines/docker.py):
# the one directory of the Spark a container sees.
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"

# The Hub's own rule, as huggingface_hub 2.x's `validate_repo_id` states it (re-stated
# here: the domain may not import huggingface_hub): each part 1-96 ASCII letters, digits,
# '-', '_' or '.', starting and ending with a letter, digit or '_'; no '--' or '..'
# anywhere; not ending in '.git'. A recipe names `organisation/name` (two parts).
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?!.*(?:--|\.\.))(?!.*\.git\Z){_HUB_PART}/{_HUB_PART}\Z", re.ASCII)
HUB_RULE = (
    "a Hugging Face id is organisation/name: letters, digits, '-', '_' and '.', each part "
    "up to 96 characters, not starting or ending with '-' or '.', no '--' or '..'"
)
# What a Hub id or a local path may be made of: no spaces, quotes, '%', '~' or '\\'.
_CHARACTERS = re.compile(r"[A-Za-z0-9._/-]+\Z", re.ASCII)
_PATH_PART = re.compile(r"[A-Za-z0-9._-]{1,255}\Z", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_hub_id(value: str) -> bool:
    """An `organisation/name` the Hub itself would accept."""
    return isinstance(value, str) and HUB_ID.match(value) is not None


def server_model_dirs(
    hf_cache: str, *, in_container: bool, folders: Iterable[str] = ()
) -> tuple[str, ...]:
    """The model directories of a host, as its model server sees them: the Hugging Face
    cache an admin set (mounted at HF_CACHE_IN_CONTAINER in a container; the server's
    HF_HOME for a local process) and the model folders an admin set (`folders`, entries
    of Host.model_folders: their container path, or their host path for a local process).
    None set: a recipe on that host names Hub ids only."""
    dirs = []
    if hf_cache:
        dirs.append(HF_CACHE_IN_CONTAINER if in_container else _clean_dir(hf_cache))
    for entry in folders:  # a trailing '/': the folder itself is a model too (model_ref_problem)
        source, target = split_model_folder(entry)
        dirs.append((target if in_container else source) + "/")
    return tuple(dirs)


# --- model folders: a host folder of models an admin mounts, read-only, into containers ----
# Never over the image's own system directories (a folder would hide the image's code), and
# never a host system directory (a recipe with --trust-remote-code runs what a model folder
# holds).
SYSTEM_DIRS = frozenset({
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin",
    "srv", "sys", "usr", "var", "opt", "root", "tmp", "snap",
})  # fmt: skip
# A Spark keeps models in /home, /data, /mnt, /opt or /srv; its own system stays out.
HOST_SYSTEM_DIRS = SYSTEM_DIRS - {"tmp", "opt", "srv"}
MAX_MODEL_FOLDERS = 16


def _folder_rule(system: frozenset[str]) -> str:
    return ("an absolute path of letters, digits, '.', '_', '-' and '/', not / itself and not "
            f"under a system directory (/{', /'.join(sorted(system))})")  # fmt: skip


def split_model_folder(entry: str) -> tuple[str, str]:
    """`HOST_FOLDER:CONTAINER_PATH` (or one path for both) as (host folder, container path),
    each cleaned. Judge the entry with `model_folder_problem` first."""
    source, _, target = entry.partition(":")
    return _clean_dir(source), _clean_dir(target or source)


def folder_path_problem(path: object, what: str, *, on_host: bool = False) -> str | None:
    """Why `path` cannot be a model folder's path (in the container, or `on_host`)."""
    system = HOST_SYSTEM_DIRS if on_host else SYSTEM_DIRS
    rule = _folder_rule(system)
    if not isinstance(path, str) or not path:
        return f"{what}: give an absolute path"
    if _CONTROL.search(path) or not _CHARACTERS.match(path) or not path.startswith("/"):
        return f"{what} {path[:120]!r}: {rule}"
    parts = path.strip("/").split("/")
    if ".." in parts or "." in parts or ("" in parts and path != "/"):
        return f"{what} {path[:120]!r}: no empty, '.' or '..' parts ({rule})"
    if path == "/" or parts[0] in system:
        return f"{what} {path[:120]!r}: {rule}"
    if not all(_PATH_PART.match(p) for p in parts):
        return f"{what} {path[:120]!r}: a part of the path is over 255 characters"
    return None


def model_folder_problem(entry: object) -> str | None:
    """Why `entry` is not a model folder (`HOST_FOLDER:CONTAINER_PATH`, or one path)."""
    if not isinstance(entry, str) or not entry or len(entry) > 600:
        return "a model folder is HOST_FOLDER:CONTAINER_PATH (or one path for both)"
    source, sep, target = entry.partition(":")
    if sep and ":" in target:
        return f"{entry[:120]!r}: a model folder is HOST_FOLDER:CONTAINER_PATH, always read-only"
    return folder_path_problem(source, "host folder", on_host=True) or (
        folder_path_problem(target or "", "container path")
        if sep
        else folder_path_problem(source, "container path")
    )


def model_folders_problem(entries: object) -> str | None:
    """Why a host's list of model folders is wrong, or None."""
    if not isinstance(entries, list):
        return "a list of HOST_FOLDER:CONTAINER_PATH entries"
    if len(entries) > MAX_MODEL_FOLDERS:
        return f"at most {MAX_MODEL_FOLDERS} model folders"
    targets: list[str] = []
    for entry in entries:
        problem = model_folder_problem(entry)
        if problem:
            return problem
        target = split_model_folder(entry)[1]  # never over the cache's mount: /root is out
        if any(t == target or t.startswith(target + "/") or target.startswith(t + "/")
               for t in targets):  # fmt: skip
            return f"{target}: two model folders overlap"
        targets.append(target)
    return None


def _clean_dir(path: str) -> str:
    return "/" + "/".join(p for p in posixpath.normpath(path).split("/") if p)


def _decoded(value: str) -> str:
    """What a %-escaping, backslash-reading layer could make of the value (escapes decoded
    until nothing changes, at most three rounds: `%252e` is `%2e` is `.`)."""
    text = value
    for _ in range(3):
        decoded = unquote(text, errors="strict") if "%" in text else text
        if decoded == text:
            break
        text = decoded
    return text.replace("\\", "/")


def model_ref_problem(value: object, *, field: str, model_dirs: Iterable[str] | None) -> str | None:
    """None when `value` may name a model, tokenizer or folder for vLLM; else why not, with
    the field and the rule. `model_dirs=None`: the host is not known yet, so a clean
    absolute path passes and the host's own check judges where it lies."""
    rule = f"{HUB_RULE}; a path must lie inside the host's model directory (its Hugging Face cache)"
    if not isinstance(value, str) or not value:
        return f"{field}: give a Hugging Face id or a path ({rule})."
    shown = repr(value if len(value) <= 120 else value[:120] + "…")
    if _CONTROL.search(value):
        return f"{field}: {shown} contains a control character (NUL, newline, …)."
    try:
        decoded = _decoded(value)
    except UnicodeDecodeError:
        return f"{field}: {shown} holds %-escapes that are not text."
    reads = f" (it reads as {decoded!r})" if decoded != value else ""
    if _CONTROL.search(decoded):
        return f"{field}: {shown} hides a control character{reads}."
    if decoded.startswith("~"):
        return f"{field}: {shown} names a home directory ('~'){reads}; {rule}."
    parts = decoded.split("/")
    if ".." in parts:
        return f"{field}: {shown} climbs out of a directory ('..'){reads}; {rule}."
    if decoded != value:
        return f"{field}: {shown} uses %-escapes or backslashes{reads}; {rule}."
    if not _CHARACTERS.match(value):
        return f"{field}: {shown} may only contain letters, digits, '.', '_', '-' and '/'."
    if is_hub_id(value):
        return None
    if not value.startswith("/"):
        return f"{field}: {shown} is neither a Hugging Face id nor an absolute path; {rule}."
    path = _clean_dir(value)
    if not all(_PATH_PART.match(p) for p in path.split("/")[1:]):
        return f"{field}: {shown} has a part of the path that is empty or over 255 characters."
    if model_dirs is None:
        return None
    dirs = sorted({_clean_dir(d) for d in model_dirs if d and d.startswith("/")})
    # Strictly inside a directory; a model folder (given with a trailing '/') is itself a
    # model too (/drafter), the Hugging Face cache's root is not.
    whole = {_clean_dir(d) for d in model_dirs if d and d.startswith("/") and d.endswith("/")}
    if path in whole or any(path.startswith(d.rstrip("/") + "/") for d in dirs):
        return None
    if not dirs:
        return (
            f"{field}: {shown} is a path, and there is no model directory for it (an admin "
            "sets a host's Hugging Face cache): use a Hugging Face id."
        )
    return (
        f"{field}: {shown} is outside the model directories ({', '.join(dirs)}): a local "
        "model, tokenizer or folder must lie inside one of them."
    )


def recipe_folders_problem(value: object) -> str | None:
    """Why a recipe's `folders` (the container folders it reads, each with the host folder
    its source mounted there: [{"path": "/drafter", "source": "~/models/x"}]) are wrong."""
    if not isinstance(value, list) or len(value) > MAX_MODEL_FOLDERS:
        return f"a list of at most {MAX_MODEL_FOLDERS} {{path, source}} entries"
    for item in value:
        if not isinstance(item, dict) or set(item) - {"path", "source"}:
            return "each folder is {path, source}"
        problem = folder_path_problem(item.get("path"), "folder")
        if problem:
            return problem
        source = item.get("source", "")
        if not isinstance(source, str) or len(source) > 300 or _CONTROL.search(source):
            return "a folder's source is the host folder its recipe named (text, 300 characters)"
    return None
