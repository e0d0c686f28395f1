"""`python -m hubsim publish …` and `python -m hubsim serve …` (docs/hubsim.md)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from hubsim import store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hubsim", description="A small local Hugging Face Hub.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the repositories under --root")
    serve.add_argument("--root", type=Path, required=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8900)
    serve.add_argument("--cdn-host", default="127.0.0.2",
                       help="a second address (same port) LFS files are redirected to, as the "
                       "Hub's CDN is another host; '' for none")  # fmt: skip
    publish = sub.add_parser("publish", help="commit a folder's files to a repository")
    publish.add_argument("--root", type=Path, required=True)
    publish.add_argument("repo_id", help="org/name")
    publish.add_argument("source", type=Path, help="a folder: every file in it, recursively")
    publish.add_argument("--branch", default="main")
    publish.add_argument("--private", action="store_true")
    publish.add_argument("--gated", choices=["auto", "manual"])
    publish.add_argument("--token", action="append", default=[],
                         help="a token with access (repeatable)")  # fmt: skip
    publish.add_argument("--sparse", action="append", default=[], metavar="PATH=BYTES",
                         help="add a sparse file of zeros (repeatable)")  # fmt: skip
    return parser


def _sparse(specs: list[str]) -> dict[str, int]:
    files = {}
    for spec in specs:
        path, _, size = spec.partition("=")
        if not path or not size.isdigit():
            raise SystemExit(f"hubsim: --sparse wants PATH=BYTES, not {spec!r}")
        files[path] = int(size)
    return files


def _serve(args) -> int:
    import uvicorn  # only the server needs it

    from hubsim.server import App

    hosts = [args.host] + ([args.cdn_host] if args.cdn_host else [])
    sockets = []
    for host in hosts:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, args.port))
        sockets.append(sock)
    cdn = f"http://{args.cdn_host}:{args.port}" if args.cdn_host else None
    config = uvicorn.Config(App(args.root, cdn=cdn), log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=sockets)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if not args.source.is_dir():
        raise SystemExit(f"hubsim: {args.source} is not a folder")
    files: dict = {
        str(path.relative_to(args.source)): path
        for path in sorted(args.source.rglob("*"))
        if path.is_file()
    }
    files |= _sparse(args.sparse)
    try:
        commit = store.publish(args.root, args.repo_id, files, branch=args.branch,
                               private=args.private or None, gated=args.gated,
                               tokens=args.token or None)  # fmt: skip
    except store.StoreError as exc:
        raise SystemExit(f"hubsim: {exc}") from None
    print(commit)
    return 0
