"""A Hugging Face Hub stand-in for tests: the Hub's HTTP API for model repos, on 127.0.0.1, standard library only.

It plays the part `moto` plays for S3: the real `huggingface_hub` client (and `transformers` through it) talks real
HTTP to it, and it keeps real state: content-addressed files in a folder, commits with parents, branches, pull
requests (`refs/pr/N`), git-LFS uploads, private repos and tokens. The routes and answers follow
`../shared/docs/hub-testing.md` (huggingface_hub 1.x and 2.x with Xet disabled).

Run it alone for a manual session::

    python tests/hub_server.py --port 8765 --token hf_local_writer --user you
    HF_ENDPOINT=http://127.0.0.1:8765 HF_TOKEN=hf_local_writer HF_HUB_DISABLE_XET=1 python scripts/push_to_hub.py ...
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import itertools
import json
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files over 10 MB through git-LFS whatever their name
# what a new model repo's `.gitattributes` holds on the Hub (abridged): these names go through git-LFS at any size
GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.bin",
        "*.ckpt",
        "*.h5",
        "*.msgpack",
        "*.npy",
        "*.onnx",
        "*.pkl",
        "*.pt",
        "*.pth",
        "*.safetensors",
        "*.tar.gz",
        "*.zip",
    )
)
INVALID_TOKEN = "Invalid credentials in Authorization header"  # the Hub's exact words; the client tests for them


@dataclass(frozen=True)
class Entry:
    """A file in a commit: its content lives in the blob store under `sha256`."""

    sha256: str
    size: int
    git_oid: str  # git blob id: of the content, or of the LFS pointer for LFS files
    lfs: bool


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    message: str
    author: str
    date: str
    files: dict[str, Entry]


@dataclass
class Repo:
    repo_id: str
    private: bool
    refs: dict[str, str] = field(default_factory=dict)  # "main", other branches, "refs/pr/N" -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)
    pull_requests: dict[int, dict] = field(default_factory=dict)


class HubError(Exception):
    """An error answer: status, the Hub's `X-Error-Code` (what the client dispatches on) and a message."""

    def __init__(self, status: int, message: str, code: str | None = None, body: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.body = status, message, code, body or {}


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class HubState:
    """All repos of one server; every change happens under one lock and is complete before it is visible."""

    def __init__(self, storage: Path, tokens: dict[str, str]):
        self.blobs = storage / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.tokens = dict(tokens)  # token -> user name (the namespace it may write to)
        self.repos: dict[str, Repo] = {}
        self.lock = threading.RLock()
        self._counter = itertools.count()
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) of every request, for tests
        # (repo_id, path) of every file a client offered to upload (preupload) or committed, for tests that check
        # what was sent rather than what a repo ends up holding
        self.uploads: list[tuple[str, str]] = []

    # -- storage
    def blob_path(self, sha256: str) -> Path:
        return self.blobs / sha256

    def store_blob(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.blob_path(sha256)
        if not path.exists():
            scratch = path.with_suffix(f".tmp{threading.get_ident()}")
            scratch.write_bytes(data)
            scratch.replace(path)
        return sha256

    # -- revisions
    def repo(self, repo_id: str, user: str | None) -> Repo:
        """The repo if `user` may read it; the Hub answers the same for "missing" and "private, not yours"."""
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and user != repo_id.split("/")[0]):
            status = HTTPStatus.UNAUTHORIZED if user is None else HTTPStatus.NOT_FOUND
            raise HubError(status, f"Repository Not Found for {repo_id}", "RepoNotFound")
        return repo

    def writable_repo(self, repo_id: str, user: str | None) -> Repo:
        if user is None:
            raise HubError(HTTPStatus.UNAUTHORIZED, "You must be authenticated to write", "RepoNotFound")
        repo = self.repo(repo_id, user)
        if repo_id.split("/")[0] != user:
            raise HubError(HTTPStatus.FORBIDDEN, f"You don't have the rights to write to {repo_id}")
        return repo

    @staticmethod
    def resolve(repo: Repo, revision: str) -> Commit:
        oid = repo.refs.get(revision) or repo.refs.get(revision.removeprefix("refs/heads/"))
        if oid is None and re.fullmatch(r"[0-9a-f]{40}", revision) and revision in repo.commits:
            oid = revision
        if oid is None:
            raise HubError(HTTPStatus.NOT_FOUND, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[oid]

    def new_commit(self, repo: Repo, parent: Commit | None, header: dict, author: str, files: dict) -> Commit:
        title = header.get("summary") or "Commit"
        message = header.get("description") or ""
        date = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        seed = json.dumps(
            [
                repo.repo_id,
                parent and parent.oid,
                title,
                message,
                date,
                next(self._counter),
                sorted((p, e.git_oid) for p, e in files.items()),
            ]
        )
        oid = hashlib.sha1(seed.encode()).hexdigest()
        commit = Commit(oid, parent and parent.oid, title, message, author, date, files)
        repo.commits[oid] = commit
        return commit

    # -- operations
    def create_repo(self, repo_id: str, private: bool, user: str) -> Repo:
        with self.lock:
            if repo_id in self.repos:
                raise HubError(HTTPStatus.CONFLICT, "You already created this model repo")
            repo = Repo(repo_id, private)
            data = GITATTRIBUTES.encode()
            entry = Entry(self.store_blob(data), len(data), git_blob_oid(data), lfs=False)
            commit = self.new_commit(repo, None, {"summary": "initial commit"}, user, {".gitattributes": entry})
            repo.refs["main"] = commit.oid
            self.repos[repo_id] = repo
            return repo

    def lfs_patterns(self, commit: Commit) -> list[str]:
        entry = commit.files.get(".gitattributes")
        if entry is None:
            return []
        text = self.blob_path(entry.sha256).read_text()
        return [line.split()[0] for line in text.splitlines() if "filter=lfs" in line]

    def upload_mode(self, commit: Commit, path: str, size: int) -> str:
        name = path.rsplit("/", 1)[-1]
        is_lfs = size > LFS_THRESHOLD or any(fnmatch.fnmatch(name, p) for p in self.lfs_patterns(commit))
        return "lfs" if is_lfs and size > 0 else "regular"

    def commit(self, repo: Repo, revision: str, lines: list[dict], user: str, create_pr: bool) -> tuple[Commit, int]:
        """Apply an NDJSON commit; returns the commit and the pull-request number (0 when none). Every operation is
        checked before anything changes, so a failing commit leaves the repo as it was."""
        if not lines or lines[0].get("key") != "header":
            raise HubError(HTTPStatus.BAD_REQUEST, "the first line of a commit must be its header")
        header = lines[0]["value"]
        with self.lock:
            base = self.resolve(repo, revision)
            if header.get("parentCommit") and header["parentCommit"] != base.oid:
                raise HubError(
                    HTTPStatus.PRECONDITION_FAILED, "A commit has happened since. Please refresh and try again."
                )
            files = dict(base.files)
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                path = value.get("path", "")
                if not path or path.startswith("/") or ".." in path.split("/"):
                    raise HubError(HTTPStatus.BAD_REQUEST, f"invalid path {path!r}")
                if key in ("file", "lfsFile"):
                    self.uploads.append((repo.repo_id, path))
                if key == "file":
                    data = base64.b64decode(value["content"])
                    if len(data) > LFS_THRESHOLD:
                        raise HubError(HTTPStatus.BAD_REQUEST, f"{path} is over 10 MB: upload it through git-LFS")
                    files[path] = Entry(self.store_blob(data), len(data), git_blob_oid(data), lfs=False)
                elif key == "lfsFile":
                    sha256, size = value["oid"], value.get("size")
                    blob = self.blob_path(sha256)
                    if not blob.exists():
                        raise HubError(
                            HTTPStatus.UNPROCESSABLE_ENTITY, f"LFS object {sha256} of {path} was never uploaded"
                        )
                    size = blob.stat().st_size if size is None else size
                    files[path] = Entry(sha256, size, git_blob_oid(lfs_pointer(sha256, size)), lfs=True)
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        raise HubError(HTTPStatus.NOT_FOUND, f"{path} does not exist", "EntryNotFound")
                elif key == "deletedFolder":
                    prefix = path.rstrip("/") + "/"
                    files = {p: e for p, e in files.items() if not p.startswith(prefix)}
                else:
                    raise HubError(HTTPStatus.BAD_REQUEST, f"unsupported commit operation {key!r}")
            commit = self.new_commit(repo, base, header, user, files)
            if create_pr:
                number = max(repo.pull_requests, default=0) + 1
                repo.pull_requests[number] = {"num": number, "title": commit.title, "target": revision}
                repo.refs[f"refs/pr/{number}"] = commit.oid
                return commit, number
            repo.refs[revision.removeprefix("refs/heads/")] = commit.oid
            return commit, 0


class HubHandler(BaseHTTPRequestHandler):
    """Routes one request; `self.server.state` holds the repos."""

    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects from the Hub
    server: HubHTTPServer

    # -- plumbing
    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the base class's parameter name)
        pass  # tests read `state.requests` instead of a noisy log

    @property
    def state(self) -> HubState:
        return self.server.state

    @property
    def endpoint(self) -> str:
        return f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"

    def body(self) -> bytes:
        return self._body

    def read_body(self) -> bytes:
        """The whole request body, read before anything can fail: an unread body would be taken for the next
        request on this keep-alive connection."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def json_body(self) -> dict:
        """The body as JSON, or as a form (`paths-info` posts `paths=a&paths=b`: lists stay lists)."""
        data = self.body()
        if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            return parse_qs(data.decode())
        return json.loads(data) if data else {}

    def user(self) -> str | None:
        """The token's user, None when anonymous; an unknown token is refused on every route, as on the Hub."""
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None
        token = auth.removeprefix("Bearer ").strip()
        if token not in self.state.tokens:
            raise HubError(HTTPStatus.UNAUTHORIZED, INVALID_TOKEN)
        return self.state.tokens[token]

    def send(self, status: int, payload=None, headers: dict | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        self.send_response(status)
        if raw is None and payload is not None:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def dispatch(self) -> None:
        status = 500
        self._body = self.read_body()
        try:
            parts = urlsplit(self.path)
            segments = [unquote(s) for s in parts.path.strip("/").split("/")]
            status = self.route(segments, {k: v[-1] for k, v in parse_qs(parts.query).items()}) or 200
        except HubError as error:
            status = error.status
            headers = {"X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            self.send(error.status, {"error": error.message, **error.body}, headers)
        finally:
            self.state.requests.append((self.command, self.path, status))

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = dispatch  # noqa: N815  (names http.server looks up)

    # -- routes
    def route(self, s: list[str], query: dict) -> int | None:
        method = self.command
        if s[:1] == ["api"]:
            return self.route_api(method, s[1:], query)
        if s[:1] == ["_lfs"] and len(s) == 4:  # /_lfs/{ns}/{name}/{oid}: the upload and verify hrefs
            return self.lfs_object(method, f"{s[1]}/{s[2]}", s[3], query)
        if len(s) == 6 and s[1].endswith(".git") and s[2:] == ["info", "lfs", "objects", "batch"] and method == "POST":
            return self.lfs_batch(f"{s[0]}/{s[1].removesuffix('.git')}")
        if len(s) >= 5 and s[2] == "resolve" and method in ("GET", "HEAD"):
            return self.resolve_file(f"{s[0]}/{s[1]}", s[3], "/".join(s[4:]))
        raise HubError(HTTPStatus.NOT_FOUND, f"no route for {method} {self.path}")

    def route_api(self, method: str, s: list[str], query: dict) -> int | None:
        if s == ["whoami-v2"] and method == "GET":
            user = self.user()
            if user is None:
                raise HubError(HTTPStatus.UNAUTHORIZED, "Invalid username or password.")
            return self.send(
                200,
                {
                    "type": "user",
                    "name": user,
                    "orgs": [],
                    "auth": {"type": "access_token", "accessToken": {"role": "write"}},
                },
            )
        if s == ["validate-yaml"] and method == "POST":
            self.user()
            content = self.json_body().get("content", "")
            errors = [] if content.startswith("---\n") else [{"message": "metadata is missing"}]
            return self.send(200 if not errors else 400, {"errors": errors, "warnings": []})
        if s == ["repos", "create"] and method == "POST":
            return self.create_repo()
        if s == ["repos", "delete"] and method == "DELETE":
            return self.delete_repo()
        if len(s) >= 3 and s[0] == "models":
            repo_id, rest = f"{s[1]}/{s[2]}", s[3:]
            if not rest and method == "GET":
                return self.repo_info(repo_id, "main")
            action = rest[0]
            if action == "revision" and len(rest) == 2 and method == "GET":
                return self.repo_info(repo_id, rest[1])
            if action == "tree" and len(rest) >= 2 and method == "GET":
                return self.tree(repo_id, rest[1], "/".join(rest[2:]), query.get("recursive") in ("1", "true", "True"))
            if action == "paths-info" and len(rest) == 2 and method == "POST":
                return self.paths_info(repo_id, rest[1])
            if action == "refs" and method == "GET":
                return self.refs(repo_id, query.get("include_prs") in ("1", "true", "True"))
            if action == "commits" and len(rest) == 2 and method == "GET":
                return self.commits(repo_id, rest[1])
            if action == "branch" and len(rest) == 2 and method in ("POST", "DELETE"):
                return self.branch(repo_id, rest[1], method)
            if action == "preupload" and len(rest) == 2 and method == "POST":
                return self.preupload(repo_id, rest[1])
            if action == "commit" and len(rest) == 2 and method == "POST":
                return self.commit(repo_id, rest[1], query.get("create_pr") == "1")
        raise HubError(HTTPStatus.NOT_FOUND, f"no route for {method} {self.path}")

    def create_repo(self) -> int:
        user = self.user()
        payload = self.json_body()
        if user is None:
            raise HubError(HTTPStatus.UNAUTHORIZED, "You must be authenticated to create a repo")
        if payload.get("type", "model") != "model":
            raise HubError(HTTPStatus.BAD_REQUEST, "this stand-in serves model repos only")
        namespace = payload.get("organization") or user
        repo_id = f"{namespace}/{payload['name']}"
        if namespace != user:
            raise HubError(
                HTTPStatus.FORBIDDEN, f'You don\'t have the rights to create a model under the namespace "{namespace}"'
            )
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        try:
            self.state.create_repo(repo_id, private, user)
        except HubError as error:
            error.body = {"url": f"{self.endpoint}/{repo_id}"}  # the client reads it when exist_ok=True
            raise
        return self.send(200, {"url": f"{self.endpoint}/{repo_id}", "name": repo_id, "id": repo_id})

    def delete_repo(self) -> int:
        user = self.user()
        payload = self.json_body()
        repo_id = f"{payload.get('organization') or user}/{payload['name']}"
        with self.state.lock:
            self.state.writable_repo(repo_id, user)
            del self.state.repos[repo_id]
        return self.send(200, {})

    def repo_info(self, repo_id: str, revision: str) -> int:
        user = self.user()
        repo = self.state.repo(repo_id, user)
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
        info = {
            "_id": repo_id,
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit.oid,
            "lastModified": commit.date,
            "createdAt": repo.commits[repo.refs["main"]].date,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "library_name": "transformers",
            "siblings": [{"rfilename": path} for path in sorted(commit.files)],
        }
        return self.send(200, info)

    def entry_json(self, path: str, entry: Entry) -> dict:
        item = {"type": "file", "oid": entry.git_oid, "size": entry.size, "path": path}
        if entry.lfs:
            item["lfs"] = {
                "oid": entry.sha256,
                "size": entry.size,
                "pointerSize": len(lfs_pointer(entry.sha256, entry.size)),
            }
        return item

    def listing(self, commit: Commit, folder: str, recursive: bool) -> list[dict]:
        prefix = folder.strip("/") + "/" if folder.strip("/") else ""
        items, folders = [], set()
        for path in sorted(commit.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :].split("/")
            for depth in range(1, len(rest)):
                if recursive or depth == 1:
                    folders.add(prefix + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                items.append(self.entry_json(path, commit.files[path]))
        dirs = [
            {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
            for d in sorted(folders)
        ]
        return dirs + items

    def tree(self, repo_id: str, revision: str, folder: str, recursive: bool) -> int:
        repo = self.state.repo(repo_id, self.user())
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
        if folder and not any(p.startswith(folder.rstrip("/") + "/") for p in commit.files):
            raise HubError(HTTPStatus.NOT_FOUND, f"{folder} does not exist at {revision}", "EntryNotFound")
        return self.send(200, self.listing(commit, folder, recursive))

    def paths_info(self, repo_id: str, revision: str) -> int:
        repo = self.state.repo(repo_id, self.user())
        paths = self.json_body().get("paths", [])
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
        found = [self.entry_json(p, commit.files[p]) for p in paths if p in commit.files]
        return self.send(200, found)

    def refs(self, repo_id: str, include_prs: bool) -> int:
        repo = self.state.repo(repo_id, self.user())
        with self.state.lock:
            refs = dict(repo.refs)
        branches = [
            {"name": n, "ref": f"refs/heads/{n}", "targetCommit": o}
            for n, o in refs.items()
            if not n.startswith("refs/")
        ]
        answer = {"branches": branches, "tags": [], "converts": []}
        if include_prs:
            answer["pullRequests"] = [
                {"name": n.rsplit("/", 1)[-1], "ref": n, "targetCommit": o}
                for n, o in refs.items()
                if n.startswith("refs/pr/")
            ]
        return self.send(200, answer)

    def commits(self, repo_id: str, revision: str) -> int:
        repo = self.state.repo(repo_id, self.user())
        history = []
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
            while commit is not None:
                history.append(
                    {
                        "id": commit.oid,
                        "title": commit.title,
                        "message": commit.message,
                        "authors": [{"user": commit.author}],
                        "date": commit.date,
                    }
                )
                commit = repo.commits.get(commit.parent) if commit.parent else None
        return self.send(200, history)

    def branch(self, repo_id: str, name: str, method: str) -> int:
        user = self.user()
        payload = self.json_body() if method == "POST" else {}
        with self.state.lock:
            repo = self.state.writable_repo(repo_id, user)
            if method == "DELETE":
                if name not in repo.refs or name == "main":
                    raise HubError(
                        HTTPStatus.NOT_FOUND if name not in repo.refs else HTTPStatus.FORBIDDEN,
                        f"cannot delete branch {name}",
                    )
                del repo.refs[name]
                return self.send(200, {})
            if name in repo.refs:
                raise HubError(HTTPStatus.CONFLICT, f"Reference already exists: refs/heads/{name}")
            if name.startswith("refs/") or not re.fullmatch(r"[\w.\-/]+", name):
                raise HubError(HTTPStatus.BAD_REQUEST, f"invalid branch name {name!r}")
            start = self.state.resolve(repo, payload.get("startingPoint") or "main")
            repo.refs[name] = start.oid
        return self.send(200, {})

    def preupload(self, repo_id: str, revision: str) -> int:
        user = self.user()
        files = self.json_body().get("files", [])
        with self.state.lock:
            repo = self.state.writable_repo(repo_id, user)
            commit = self.state.resolve(repo, revision)
        answer = []
        for item in files:
            self.state.uploads.append((repo_id, item["path"]))
            mode = self.state.upload_mode(commit, item["path"], item["size"])
            remote = commit.files.get(item["path"])
            oid = None if remote is None else (remote.sha256 if remote.lfs else remote.git_oid)
            answer.append({"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        return self.send(200, {"files": answer, "commitOid": commit.oid})

    def lfs_batch(self, repo_id: str) -> int:
        user = self.user()
        payload = self.json_body()
        with self.state.lock:
            self.state.writable_repo(repo_id, user)
        if payload.get("operation") != "upload":
            raise HubError(HTTPStatus.BAD_REQUEST, "this stand-in takes LFS uploads only; downloads use /resolve")
        objects = []
        for obj in payload.get("objects", []):
            item = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if not self.state.blob_path(obj["oid"]).exists():  # no actions: the object is already stored
                href = f"{self.endpoint}/_lfs/{repo_id}/{obj['oid']}?size={obj['size']}"
                item["actions"] = {"upload": {"href": href}, "verify": {"href": href + "&verify=1"}}
            objects.append(item)
        return self.send(
            200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"}
        )

    def lfs_object(self, method: str, repo_id: str, oid: str, query: dict) -> int:
        """PUT stores the object if its bytes hash to `oid`; POST (verify) checks it is stored with that size."""
        if method == "PUT":
            data = self.body()
            if hashlib.sha256(data).hexdigest() != oid or len(data) != int(query.get("size", len(data))):
                raise HubError(HTTPStatus.BAD_REQUEST, f"the uploaded bytes do not hash to {oid}")
            self.state.store_blob(data)
            return self.send(200, raw=b"")
        if method == "POST" and query.get("verify") == "1":
            user = self.user()
            with self.state.lock:
                self.state.writable_repo(repo_id, user)
            payload = self.json_body()
            blob = self.state.blob_path(oid)
            if not blob.exists() or blob.stat().st_size != payload.get("size"):
                raise HubError(HTTPStatus.NOT_FOUND, f"LFS object {oid} is not stored with size {payload.get('size')}")
            return self.send(200, {})
        raise HubError(HTTPStatus.NOT_FOUND, f"no route for {method} {self.path}")

    def commit(self, repo_id: str, revision: str, create_pr: bool) -> int:
        user = self.user()
        lines = [json.loads(line) for line in self.body().splitlines() if line.strip()]
        with self.state.lock:
            repo = self.state.writable_repo(repo_id, user)
            commit, number = self.state.commit(repo, revision, lines, user, create_pr)
        answer = {
            "success": True,
            "commitOid": commit.oid,
            "commitUrl": f"{self.endpoint}/{repo_id}/commit/{commit.oid}",
        }
        if number:
            answer["pullRequestUrl"] = f"{self.endpoint}/{repo_id}/discussions/{number}"
        return self.send(200, answer)

    def resolve_file(self, repo_id: str, revision: str, path: str) -> int:
        repo = self.state.repo(repo_id, self.user())
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
        entry = commit.files.get(path)
        if entry is None:
            raise HubError(
                HTTPStatus.NOT_FOUND,
                f"{path} does not exist at {revision}",
                "EntryNotFound",
            )
        etag = entry.sha256 if entry.lfs else entry.git_oid
        headers = {
            "ETag": f'"{etag}"',
            "X-Repo-Commit": commit.oid,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": entry.size})
        start, end, status = 0, entry.size - 1, 200
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if match and entry.size:
            first, last = match.groups()
            start = int(first) if first else max(entry.size - int(last), 0)
            end = min(int(last), entry.size - 1) if first and last else entry.size - 1
            if start > end:
                raise HubError(
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, f"range {first}-{last} of {entry.size} bytes"
                )
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        if self.command == "HEAD":
            headers["Content-Length"] = end - start + 1
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, str(value))
            self.end_headers()
            return status
        with open(self.state.blob_path(entry.sha256), "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start + 1)
        self.send(status, headers=headers, raw=data)
        return status


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a client that keeps a connection open must not keep the test session alive
    state: HubState


class LocalHub:
    """The server on 127.0.0.1 in a background thread; `url` is what `HF_ENDPOINT` should be."""

    def __init__(self, tokens: dict[str, str], port: int = 0, storage: str | Path | None = None):
        self._scratch = None if storage else tempfile.mkdtemp(prefix="local-hub-")
        self.storage = Path(storage or self._scratch)
        self.httpd = HubHTTPServer(("127.0.0.1", port), HubHandler)
        self.httpd.state = HubState(self.storage, tokens)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="local-hub", daemon=True)

    @property
    def state(self) -> HubState:
        return self.httpd.state

    def start(self) -> LocalHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default="hf_local_writer", help="the one valid token (write access)")
    parser.add_argument("--user", default="local", help="the token's user: the namespace it may push to")
    parser.add_argument("--storage", help="folder for the stored files (default: a temporary folder)")
    args = parser.parse_args()
    hub = LocalHub({args.token: args.user}, port=args.port, storage=args.storage)
    print(f"Hub stand-in at {hub.url} (user {args.user!r}); stop with Ctrl-C", flush=True)
    try:
        hub.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        hub.httpd.server_close()


if __name__ == "__main__":
    main()
