"""hubsim's HTTP API: the Hub endpoints `huggingface_hub` downloads through (a bare ASGI app).

    GET  /api/models/<org>/<name>[/revision/<rev>]   model info (`?blobs=true`: sizes)
    GET  /api/models/<org>/<name>/tree/<rev>[/<dir>] the file tree (`?recursive=true`)
    HEAD|GET /<org>/<name>/resolve/<rev>/<file>      a file: 200 with its ETag (git sha1),
         or, for an LFS file, 302 to the CDN host's /cdn/<sha256> with X-Linked-Etag /
         X-Linked-Size (served from /resolve itself when there is no CDN host);
         X-Repo-Commit always; `Range: bytes=a-b` answered 206
    HEAD|GET /cdn/<sha256>?repo=…&sig=…              an LFS file's bytes (a signed URL)

Access as on huggingface.co: a private repository is "not found" (401 RepoNotFound) to any
token without access; a gated one lists its files to anyone but serves them only with a
token that was granted access — 401 GatedRepo without a token, 403 GatedRepo with
another. An unknown revision is 404 RevisionNotFound, an unknown file 404 EntryNotFound.

For tests: GET /hubsim/requests (what was asked: method, path, Range, status, bytes sent),
DELETE /hubsim/requests, POST /hubsim/faults {"rate": bytes/s, "drop_after": bytes,
"drops": n} (pace every body; cut the next n bodies after that many bytes).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from hubsim import store

CHUNK = 64 * 1024
FAULTS_MAX_BODY = 4096
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Faults:
    rate: float | None = None  # bytes per second for every body, None: as fast as it goes
    drop_after: int | None = None  # cut a body after this many bytes …
    drops: int = 0  # … for this many more bodies


@dataclass
class State:
    root: Path
    secret: bytes = field(default_factory=lambda: os.urandom(16))
    faults: Faults = field(default_factory=Faults)
    requests: list[dict] = field(default_factory=list)


class App:
    """`cdn`: the base URL (another host, as huggingface.co's CDN is) that LFS files are
    redirected to; the client follows a redirect that stays on the Hub's host, so the CDN
    must not be on it. None: LFS files are served from /resolve itself."""

    def __init__(self, root: Path, cdn: str | None = None) -> None:
        self.state = State(root=Path(root))
        self.cdn = cdn.rstrip("/") if cdn else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # served with lifespan off: nothing to start or stop
            return
        record = {"method": scope["method"], "path": scope["path"], "status": None, "sent": 0,
                  "range": _header(scope, b"range")}  # fmt: skip
        try:
            await self._route(scope, receive, send, record)
        except HubError as exc:
            record["status"] = exc.status
            await _send_error(send, exc)
        finally:
            if not scope["path"].startswith("/hubsim/"):
                self.state.requests.append(record)

    async def _route(self, scope, receive, send, record: dict) -> None:
        parts = [urllib.parse.unquote(p) for p in scope["raw_path"].decode().split("/")[1:]]
        method = scope["method"]
        if parts[:1] == ["hubsim"]:
            await self._control(method, parts[1:], receive, send)
        elif parts[:2] == ["api", "models"] and len(parts) >= 4 and method == "GET":
            await self._api(scope, parts[2:], send)
        elif parts[:1] == ["cdn"] and len(parts) == 2 and method in ("GET", "HEAD"):
            await self._cdn(scope, parts[1], send, record)
        elif len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
            await self._resolve(scope, parts, send, record)
        else:
            raise HubError(404, None, f"no such endpoint: {method} {scope['path']}")

    # --- model info and tree ---------------------------------------------------------

    async def _api(self, scope, parts: list[str], send) -> None:
        repo = self._repo(scope, "/".join(parts[:2]), files=False)
        rest, query = parts[2:], urllib.parse.parse_qs(scope["query_string"].decode())
        if not rest or rest[0] == "revision":
            revision = rest[1] if len(rest) >= 2 else "main"
            commit = _commit(repo, revision)
            await _send_json(send, 200, model_info(repo, commit, _flag(query, "blobs")))
        elif rest[0] == "tree" and len(rest) >= 2:
            commit = _commit(repo, rest[1])
            entries = tree(repo, commit, "/".join(rest[2:]), _flag(query, "recursive"))
            await _send_json(send, 200, entries)
        else:
            raise HubError(404, None, f"no such endpoint: {scope['path']}")

    # --- files -------------------------------------------------------------------------

    async def _resolve(self, scope, parts: list[str], send, record: dict) -> None:
        repo = self._repo(scope, "/".join(parts[:2]), files=True)
        commit = _commit(repo, parts[3])
        path = "/".join(parts[4:])
        file = repo.file(commit, path)
        if file is None:
            raise HubError(404, "EntryNotFound", f"{path} does not exist at {commit}")
        headers = {"x-repo-commit": commit, "etag": f'"{file.etag}"'}
        if file.lfs:
            headers |= {"x-linked-etag": f'"{file.sha256}"', "x-linked-size": str(file.size)}
        if file.lfs and self.cdn:
            headers["location"] = self._cdn_url(repo.repo_id, file.sha256)
            record["status"] = 302
            await _start(send, 302, {**headers, "content-length": "0"})
            await send({"type": "http.response.body", "body": b""})
            return
        await self._serve(scope, file.blob, file.size, headers, send, record)

    async def _cdn(self, scope, blob_id: str, send, record: dict) -> None:
        query = urllib.parse.parse_qs(scope["query_string"].decode())
        repo_id, sig = (query.get("repo") or [""])[0], (query.get("sig") or [""])[0]
        if not hmac.compare_digest(sig, self._sign(repo_id, blob_id)):
            raise HubError(403, None, "the signed URL is not valid")
        repo = store.load(self.state.root, repo_id)
        blob = None if repo is None else repo.folder / "blobs" / blob_id
        if blob is None or not re.fullmatch(r"[0-9a-f]{64}", blob_id) or not blob.exists():
            raise HubError(404, None, "no such object")
        await self._serve(scope, blob, blob.stat().st_size, {"etag": f'"{blob_id}"'}, send, record)

    async def _serve(self, scope, blob: Path, size: int, headers: dict, send, record) -> None:
        start, end, status = 0, size, 200
        asked = _header(scope, b"range")
        if asked:
            match = RANGE.match(asked.strip())
            first = int(match.group(1)) if match else size
            if not match or first >= size > 0:
                raise HubError(416, None, f"range {asked!r} not satisfiable for {size} bytes")
            start = first
            end = min(int(match.group(2)) + 1, size) if match.group(2) else size
            status = 206
            headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
        headers |= {"content-length": str(end - start), "accept-ranges": "bytes",
                    "content-type": "application/octet-stream"}  # fmt: skip
        record["status"] = status
        await _start(send, status, headers)
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        await self._body(blob, start, end, send, record)

    async def _body(self, blob: Path, start: int, end: int, send, record: dict) -> None:
        faults = self.state.faults
        cut = None
        if faults.drops > 0 and faults.drop_after is not None:
            faults.drops -= 1
            cut = faults.drop_after
        with open(blob, "rb") as f:
            f.seek(start)
            position = start
            while position < end:
                chunk = f.read(min(CHUNK, end - position))
                if cut is not None and record["sent"] + len(chunk) > cut:
                    chunk = chunk[: max(cut - record["sent"], 0)]
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    record["sent"] += len(chunk)
                    record["dropped"] = True
                    raise ConnectionAbortedError("hubsim: connection cut (fault)")
                position += len(chunk)
                record["sent"] += len(chunk)
                await send({"type": "http.response.body", "body": chunk,
                            "more_body": position < end})  # fmt: skip
                if faults.rate:
                    await asyncio.sleep(len(chunk) / faults.rate)
        if start == end:
            await send({"type": "http.response.body", "body": b""})

    # --- access --------------------------------------------------------------------------

    def _repo(self, scope, repo_id: str, *, files: bool) -> store.Repo:
        repo = store.load(self.state.root, repo_id)
        token = _token(scope)
        if repo is None or (repo.private and token not in repo.tokens):
            raise HubError(401, "RepoNotFound", f"Repository Not Found for {repo_id}.")
        if files and repo.gated and token not in repo.tokens:
            if token is None:
                raise HubError(401, "GatedRepo", f"Access to model {repo_id} is restricted. "
                               "You must have access to it and be authenticated to access it. "
                               "Please log in.")  # fmt: skip
            raise HubError(403, "GatedRepo", f"Access to model {repo_id} is restricted and you "
                           "are not in the authorized list. Visit "
                           f"https://huggingface.co/{repo_id} to ask for access.")  # fmt: skip
        return repo

    def _sign(self, repo_id: str, blob_id: str) -> str:
        message = f"{repo_id}\n{blob_id}".encode()
        return hmac.new(self.state.secret, message, hashlib.sha256).hexdigest()

    def _cdn_url(self, repo_id: str, blob_id: str) -> str:
        query = urllib.parse.urlencode({"repo": repo_id, "sig": self._sign(repo_id, blob_id)})
        return f"{self.cdn}/cdn/{blob_id}?{query}"

    # --- test controls ------------------------------------------------------------------

    async def _control(self, method: str, parts: list[str], receive, send) -> None:
        if parts == ["requests"] and method == "GET":
            await _send_json(send, 200, self.state.requests)
        elif parts == ["requests"] and method == "DELETE":
            self.state.requests.clear()
            await _send_json(send, 200, {"cleared": True})
        elif parts == ["faults"] and method == "POST":
            body = await _read_body(receive, FAULTS_MAX_BODY)
            self.state.faults = _faults(body)
            await _send_json(send, 200, self.state.faults.__dict__)
        else:
            raise HubError(404, None, "no such control")


def model_info(repo: store.Repo, commit: str, blobs: bool) -> dict:
    files = repo.files(commit)
    siblings = []
    for f in files:
        sibling = {"rfilename": f.path}
        if blobs:
            sibling |= {"size": f.size, "blobId": f.git_oid}
            if f.lfs:
                sibling["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
        siblings.append(sibling)
    date = repo.date(commit)
    return {"_id": commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
            "private": repo.private, "gated": repo.gated, "disabled": False, "downloads": 0,
            "likes": 0, "tags": [], "lastModified": date, "createdAt": date,
            "siblings": siblings, "usedStorage": sum(f.size for f in files)}  # fmt: skip


def tree(repo: store.Repo, commit: str, folder: str, recursive: bool) -> list[dict]:
    prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
    entries, folders = [], set()
    for f in repo.files(commit):
        if not f.path.startswith(prefix):
            continue
        rest = f.path[len(prefix) :]
        parts = rest.split("/")
        for depth in range(1, len(parts)):
            if recursive or depth == 1:
                folders.add(prefix + "/".join(parts[:depth]))
        if recursive or len(parts) == 1:
            entry = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            entries.append(entry)
    if prefix and not entries and not folders:
        raise HubError(404, "EntryNotFound", f"{folder} does not exist at {commit}")
    folder_entries = [{"type": "directory", "oid": _oid(p), "size": 0, "path": p}
                      for p in sorted(folders)]  # fmt: skip
    return folder_entries + entries


def _oid(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def _commit(repo: store.Repo, revision: str) -> str:
    commit = repo.resolve(revision)
    if commit is None:
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
    return commit


def _faults(body: bytes) -> Faults:
    try:
        data = json.loads(body or b"{}")
        rate, drop_after = data.get("rate"), data.get("drop_after")
        drops = int(data.get("drops", 1 if drop_after is not None else 0))
        faults = Faults(rate=None if rate is None else float(rate),
                        drop_after=None if drop_after is None else int(drop_after),
                        drops=drops)  # fmt: skip
    except (ValueError, TypeError, AttributeError) as exc:
        raise HubError(400, None, f"faults: {exc}") from None
    if (faults.rate is not None and faults.rate <= 0) or (faults.drop_after or 0) < 0:
        raise HubError(400, None, "faults: rate must be > 0 and drop_after >= 0")
    return faults


def _flag(query: dict, name: str) -> bool:
    return (query.get(name) or ["false"])[0].lower() in ("1", "true")


def _token(scope) -> str | None:
    value = _header(scope, b"authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _start(send, status: int, headers: dict) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})  # fmt: skip


async def _send_json(send, status: int, obj, headers: dict | None = None) -> None:
    body = json.dumps(obj).encode()
    await _start(send, status, {"content-type": "application/json",
                                "content-length": str(len(body)), **(headers or {})})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, exc: HubError) -> None:
    headers = {"x-error-message": exc.message}
    if exc.code:
        headers["x-error-code"] = exc.code
    await _send_json(send, exc.status, {"error": exc.message}, headers)


async def _read_body(receive, limit: int) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            raise HubError(413, None, f"body over {limit} bytes")
        if not message.get("more_body"):
            return body
