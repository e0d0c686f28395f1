"""Read a vLLM version's contract out of vLLM itself, or check argument vectors with its
own `vllm serve` parser.

Run it with the Python of a venv that has the vLLM to read (never the panel's venv; the
CUDA build imports without a GPU because vLLM's current platform is set to its CPU
platform first):

    var/vllm-0.33.0/bin/python tools/vllm_contract.py write vllm_adapter/contracts/
    var/vllm-0.33.0/bin/python tools/vllm_contract.py check < vectors.json

`write` stores `vllm-<version>.json`: every `vllm serve` option (option strings with the
`--no-` forms, dest, action, nargs, type, choices, default, group, help, deprecated),
the quantization methods, reasoning- and tool-parser names, KV-cache dtypes, load
formats, the Prometheus metric names/types/labels found in vLLM's source, and the format
strings of the log lines the panel reads (vllm_adapter/needles.py). `make contract`
regenerates the committed files.

`check` reads a JSON list of argument vectors (`["vllm", "serve", MODEL, ...]`) on stdin
and prints, for each, whether vLLM's own parser accepts it and, if not, vLLM's own error
line (`vllm serve: error: ...`). Only the standard library and vLLM are imported.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import json
import logging
import os
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vllm_adapter import needles  # noqa: E402  (pure data, stdlib only)

SCHEMA = 1


def _quiet() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.disable(logging.WARNING)


def _cpu_platform() -> None:
    """The CUDA build cannot infer a device here; its CPU platform builds the same parser."""
    from vllm import platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    with contextlib.suppress(Exception):
        platforms.current_platform = platforms._current_platform


def serve_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(the top-level `vllm` parser, its `serve` subparser), built as `vllm` builds them."""
    _cpu_platform()
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    import vllm.entrypoints.cli.serve as serve

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    sub = None
    for cmd in serve.cmd_init():
        sub = cmd.subparser_init(subparsers)
    if sub is None:
        raise RuntimeError("vllm.entrypoints.cli.serve made no serve parser")
    return parser, sub


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and value != value:  # NaN
            return None
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _type_name(t: object) -> str | None:
    if t is None:
        return None
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None)
    if name is None and hasattr(t, "func"):  # functools.partial
        name = getattr(t.func, "__qualname__", repr(t.func))
    return str(name or repr(t))


def _options(sub: argparse.ArgumentParser) -> list[dict]:
    group_of: dict[int, str] = {}
    for group in sub._action_groups:
        for action in group._group_actions:
            group_of[id(action)] = group.title or ""
    registered: dict[int, list[str]] = {}
    for string, action in sub._option_string_actions.items():
        registered.setdefault(id(action), []).append(string)
    out = []
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        help_text = action.help if isinstance(action.help, str) else ""
        with contextlib.suppress(TypeError, ValueError, KeyError):
            help_text = help_text % {"default": action.default, "prog": "vllm serve"}
        hidden = [s for s in registered.get(id(action), []) if s not in action.option_strings]
        entry = {
            "options": list(action.option_strings),
            # Registered but left out of --help (vLLM's --no-enable-x compatibility forms).
            "hidden_options": hidden,
            "dest": action.dest,
            "action": type(action).__name__,
            "nargs": action.nargs,
            "type": _type_name(action.type),
            "choices": [str(c) for c in action.choices] if action.choices is not None else None,
            "default": _jsonable(action.default),
            "const": _jsonable(action.const),
            "required": bool(action.required),
            "group": group_of.get(id(action), ""),
            "help": " ".join(help_text.split())[:600],
            "deprecated": bool(getattr(action, "deprecated", False))
            or "deprecated" in help_text.lower()[:200],
        }
        out.append(entry)
    return out


def _registry_names(modules: tuple[str, ...], manager: str) -> list[str]:
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: S112 - try the next layout
            continue
        cls = getattr(module, manager, None)
        if cls is None:
            continue
        names: set[str] = set()
        for attr in ("list_registered",):
            fn = getattr(cls, attr, None)
            if callable(fn):
                with contextlib.suppress(Exception):
                    names.update(fn())
        for attr in dir(cls):
            value = getattr(cls, attr, None)
            if attr.endswith("parsers") and isinstance(value, dict):
                names.update(str(k) for k in value)
        return sorted(names)
    return []


def _load_formats(options: list[dict]) -> list[str]:
    for entry in options:
        if "--load-format" in entry["options"] and entry["choices"]:
            return entry["choices"]
    with contextlib.suppress(Exception):
        from vllm.model_executor.model_loader import LoadFormats

        return list(typing.get_args(LoadFormats))
    with contextlib.suppress(Exception):
        from vllm.model_executor.model_loader import get_supported_load_formats

        return sorted(get_supported_load_formats())
    return []


def _kv_cache_dtypes(options: list[dict]) -> list[str]:
    for entry in options:
        if "--kv-cache-dtype" in entry["options"] and entry["choices"]:
            return entry["choices"]
    with contextlib.suppress(Exception):
        from vllm.config.cache import CacheDType

        return list(typing.get_args(CacheDType))
    return []


def _source_files() -> list[Path]:
    import vllm

    base = Path(vllm.__file__).resolve().parent
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    import vllm

    return "vllm/" + str(path.relative_to(Path(vllm.__file__).resolve().parent))


def _string_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f"...{x}..." → "...{}..."
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("{}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_of(node.left), _string_of(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _metric_kind(func: ast.AST) -> str | None:
    name = ""
    if isinstance(func, ast.Attribute):
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    lowered = name.lower()
    for kind in ("histogram", "counter", "gauge", "summary", "info"):
        if kind in lowered:
            return kind
    return None


def _metric_table(node: ast.Assign) -> list[dict]:
    """The (name, documentation) pairs of an assignment like `counter_specs = [(…), …]`."""
    target = node.targets[0] if len(node.targets) == 1 else None
    kind = _metric_kind(target) if isinstance(target, ast.Name) else None
    if not kind or not isinstance(node.value, ast.List | ast.Tuple):
        return []
    out = []
    for element in node.value.elts:
        if not (isinstance(element, ast.Tuple) and len(element.elts) == 2):
            continue
        name, doc = (_string_of(e) for e in element.elts)
        if name and name.startswith("vllm:"):
            out.append({"name": name, "type": kind,
                        "documentation": " ".join((doc or "").split())[:300],
                        "labelnames": None})  # fmt: skip
    return out


def _scan_source() -> tuple[list[dict], dict[str, list[dict]]]:
    metrics: dict[str, dict] = {}
    patterns = {key: re.compile(rx) for key, rx in needles.LOG_LINES.items()}
    logs: dict[str, list[dict]] = {key: [] for key in patterns}
    for path in _source_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        where = _rel(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                kind = _metric_kind(node.func)
                for kw in node.keywords:
                    if kw.arg != "name":
                        continue
                    value = _string_of(kw.value)
                    if kind and value and value.startswith("vllm:"):
                        doc = next(
                            (
                                _string_of(k.value)
                                for k in node.keywords
                                if k.arg == "documentation"
                            ),
                            None,
                        )
                        labels = next(
                            (k.value for k in node.keywords if k.arg == "labelnames"), None
                        )
                        label_list = None
                        if isinstance(labels, ast.List | ast.Tuple):
                            label_list = [_string_of(e) for e in labels.elts]
                        metrics.setdefault(
                            value,
                            {
                                "name": value,
                                "type": kind,
                                "documentation": " ".join((doc or "").split())[:300],
                                "labelnames": label_list,
                                "where": f"{where}:{node.lineno}",
                            },
                        )
            if isinstance(node, ast.Assign):
                # A table of (name, documentation) pairs that a loop turns into metrics, as
                # SpecDecodingProm's `counter_specs = [("vllm:spec_decode_num_drafts", …)]`:
                # its kind is in the variable's name.
                for entry in _metric_table(node):
                    entry["where"] = f"{where}:{node.lineno}"
                    metrics.setdefault(entry["name"], entry)
            text = _string_of(node) if isinstance(node, ast.Constant | ast.JoinedStr) else None
            if text is None and isinstance(node, ast.BinOp):
                text = _string_of(node)
            if not text or len(text) > 400:
                continue
            for key, rx in patterns.items():
                if rx.search(text):
                    entry = {"format": text, "where": f"{where}:{node.lineno}"}
                    if entry not in logs[key]:
                        logs[key].append(entry)
    # Drop fragments that are part of a longer matching string for the same key.
    for key, entries in logs.items():
        formats = [e["format"] for e in entries]
        logs[key] = [
            e for e in entries if not any(e["format"] != f and e["format"] in f for f in formats)
        ]
    return sorted(metrics.values(), key=lambda m: m["name"]), logs


def contract() -> dict:
    _quiet()
    import vllm

    _, sub = serve_parser()
    options = _options(sub)
    quant = importlib.import_module(needles.QUANTIZATION_MODULE)
    metrics, logs = _scan_source()
    return {
        "schema": SCHEMA,
        "vllm_version": vllm.__version__,
        "generated_by": "tools/vllm_contract.py",
        "parser": {
            "prog": sub.prog,
            "allow_abbrev": bool(sub.allow_abbrev),
            "class": type(sub).__name__,
            "underscores_as_dashes": True,
        },
        "options": options,
        "quantization_methods": sorted(quant.QUANTIZATION_METHODS),
        "deprecated_quantization_methods": sorted(
            getattr(quant, "DEPRECATED_QUANTIZATION_METHODS", [])
        ),
        "reasoning_parsers": _registry_names(needles.REASONING_MODULES, "ReasoningParserManager"),
        "tool_parsers": _registry_names(needles.TOOL_PARSER_MODULES, "ToolParserManager"),
        "kv_cache_dtypes": _kv_cache_dtypes(options),
        "load_formats": _load_formats(options),
        "metrics": metrics,
        "log_formats": logs,
    }


def check(vectors: list[list[str]], *, namespace: bool = False) -> list[dict]:
    """Parse each vector with vLLM's own parser; never raises for a refused vector.
    `namespace`: also return what the parser read (dest → value, JSON-safe)."""
    _quiet()
    parser, _ = serve_parser()
    results = []
    for argv in vectors:
        err = io.StringIO()
        ok, error, ns = True, "", None
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parsed = parser.parse_args(list(argv[1:]))
            if namespace:
                ns = {
                    k: _jsonable(v) for k, v in vars(parsed).items()
                    if k not in ("subparser", "dispatch_function") and not callable(v)
                }  # fmt: skip
        except SystemExit as exc:
            ok = exc.code in (0, None)
            lines = [line for line in err.getvalue().splitlines() if "error:" in line]
            error = lines[-1] if lines else err.getvalue().strip()[-500:]
        except Exception as exc:  # a validator inside a type= callable
            ok, error = False, f"{type(exc).__name__}: {exc}"
        results.append(
            {"argv": argv, "ok": ok, "error": error, **({"ns": ns} if namespace else {})}
        )
    return results


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = cli.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write vllm-<version>.json into a folder")
    write.add_argument("folder", type=Path)
    check_cmd = sub.add_parser(
        "check", help="check argument vectors (JSON on stdin) with vLLM's parser"
    )
    check_cmd.add_argument(
        "--namespace", action="store_true", help="also print what the parser read, per vector"
    )
    check_cmd.add_argument(
        "--with-options",
        action="store_true",
        help="also print the version and its serve options (to compare with a contract file)",
    )
    args = cli.parse_args(argv)
    if args.command == "write":
        data = contract()
        args.folder.mkdir(parents=True, exist_ok=True)
        target = args.folder / f"vllm-{data['vllm_version']}.json"
        target.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        missing = [k for k, v in data["log_formats"].items() if not v]
        print(
            f"wrote {target}: {len(data['options'])} options, "
            f"{len(data['quantization_methods'])} quantization methods, "
            f"{len(data['metrics'])} metrics; log lines not found: {', '.join(missing) or 'none'}"
        )
        return 0
    vectors = json.load(sys.stdin)
    results: object = check(vectors, namespace=args.namespace)
    if args.with_options:
        import vllm

        results = {
            "vllm_version": vllm.__version__,
            "options": _options(serve_parser()[1]),
            "results": results,
        }
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
