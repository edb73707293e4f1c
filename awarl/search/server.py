"""The retrieval server: a FastAPI app over any `Retriever`, compatible with Search-R1.

``POST /retrieve`` takes Search-R1's request ``{"queries": [...], "topk": k, "return_scores":
true}`` and answers ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``
(without ``return_scores``, each inner list holds the documents alone). ``contents`` is
``"<title>"\\n<text>``, the wiki-18 corpus layout Search-R1 clients split on the first newline;
awarl also adds ``title`` and ``text``. awarl's one extension is ``allowed``: one list of
passage ids per query, the closed scope. ``GET /health`` and ``GET /passages/{id}`` complete it.

Concurrent requests are micro-batched: a single worker takes the pending jobs (up to ``max_batch``
queries, or whatever arrived within ``batch_wait_ms``) and answers them with one call to the
retriever in a worker thread, so the event loop keeps accepting connections under load. A
request with more queries than ``max_batch`` is answered a slice at a time, and a batch takes the
smallest requests first, so one big request cannot hold the index for the others: a one-query
request waits for the index call in progress, not for the big request
(``scripts/bench_search_fairness.py``).

Limits (each a 4xx in the JSON envelope ``{"error": ..., "detail": ...}``, never a 500): body
bytes (413, checked before the body is read when Content-Length says so, and while reading
otherwise), queries per request (413), characters per query (422), ``topk`` (422), and strict
JSON types (``"topk": "3"`` or ``true`` is a 422, not a silent 3 or 1).

`serve` with ``workers > 1`` loads the index once, then forks the workers: they share its
memory-mapped pages (no copy per worker) and all serve the very same index even if the folder is
rebuilt meanwhile, since a rebuild swaps in a new folder and never touches mapped files.
"""


import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from awarl.errors import ConfigError
from awarl.search.retriever import Hit, Retriever, SearchError, UnknownPassageError


@dataclass(frozen=True)
class ServerSettings:
    """Limits and batching of the retrieval server."""

    default_topk: int = 3  # used when a request has no "topk"
    max_topk: int = 100  # larger "topk" is a 422
    max_queries: int = 1024  # more queries in one request is a 413
    max_query_chars: int = 2000  # a longer query is a 422 (a question is ~100; a 1 MB one took seconds)
    max_body_bytes: int = 4 * 1024 * 1024  # a larger request body is a 413
    max_batch: int = 64  # most queries answered by one retriever call (a large request goes in slices of this)
    batch_wait_ms: float = 2.0  # how long the worker waits for more requests before searching

    def __post_init__(self) -> None:
        if not 1 <= self.default_topk <= self.max_topk:
            raise ConfigError(f"need 1 <= default_topk <= max_topk, got {self.default_topk} and {self.max_topk}")
        if self.max_queries < 1 or self.max_batch < 1 or self.batch_wait_ms < 0:
            raise ConfigError("max_queries and max_batch must be >= 1 and batch_wait_ms >= 0")
        if self.max_query_chars < 1 or self.max_body_bytes < 1:
            raise ConfigError("max_query_chars and max_body_bytes must be >= 1")


@dataclass
class _Job:
    queries: list[str]
    k: int
    allowed: list[list[str]] | None
    future: asyncio.Future = field(repr=False)
    request_size: int = 0  # queries in the whole request this slice belongs to
    seq: int = 0  # arrival order
    passed_over: int = 0  # batches formed without it


class _Batcher:
    """Collects concurrent jobs and answers them with as few retriever calls as possible.

    A batch takes the jobs of the smallest requests first, up to ``max_batch`` queries, so a
    one-query request waits only for the index call in progress, never for the slices of a large
    request queued beside it; a job passed over `PATIENCE` times goes first, so a stream of small
    requests cannot starve a large one.
    """

    PATIENCE = 4

    def __init__(self, retriever: Retriever, settings: ServerSettings):
        self.retriever = retriever
        self.settings = settings
        self.pending: list[_Job] = []
        self.arrived = asyncio.Event()
        self.batches = 0  # retriever calls made (exposed on /health)
        self._seq = 0

    async def submit(self, queries: list[str], k: int, allowed: list[list[str]] | None) -> list[list[Hit]]:
        # One slice pending at a time per request: requests that arrive meanwhile get between the
        # slices of a big one instead of waiting for all of it.
        step = self.settings.max_batch
        out: list[list[Hit]] = []
        for i in range(0, max(len(queries), 1), step):
            part = None if allowed is None else allowed[i : i + step]
            self._seq += 1
            job = _Job(queries[i : i + step], k, part, asyncio.get_running_loop().create_future(),
                       request_size=len(queries), seq=self._seq)
            self.pending.append(job)
            self.arrived.set()
            out.extend(await job.future)
        return out

    async def run(self) -> None:
        while True:
            await self.arrived.wait()
            if self.settings.batch_wait_ms > 0:  # let concurrent requests join this batch
                await asyncio.sleep(self.settings.batch_wait_ms / 1000)
            jobs = self.take()
            if not self.pending:
                self.arrived.clear()
            if jobs:
                await self._answer(jobs)

    def take(self) -> list[_Job]:
        """The next batch, removed from the pending jobs: the long-waiting first, then the smallest
        requests, up to ``max_batch`` queries (the first job always goes, whatever its size)."""
        order = sorted(self.pending, key=lambda j: (j.passed_over < self.PATIENCE, j.request_size, j.seq))
        chosen: list[_Job] = []
        size = 0
        for job in order:
            if chosen and size + len(job.queries) > self.settings.max_batch:
                job.passed_over += 1
                continue
            chosen.append(job)
            size += len(job.queries)
        taken = {id(j) for j in chosen}
        self.pending = [j for j in self.pending if id(j) not in taken]
        return chosen

    async def _answer(self, jobs: list[_Job]) -> None:
        # Global and closed-scope queries go in separate calls (allowed is all-or-nothing per call).
        for closed in (False, True):
            group = [j for j in jobs if (j.allowed is not None) == closed and not j.future.done()]
            if not group:
                continue
            queries = [q for j in group for q in j.queries]
            allowed = [a for j in group for a in j.allowed] if closed else None
            k = max(j.k for j in group)
            try:
                hits = await asyncio.to_thread(self.retriever.search, queries, k, allowed) if queries else []
                self.batches += 1
            except Exception as exc:  # one failure answers every job of the call; the worker lives on
                for j in group:
                    if not j.future.done():  # a client that hung up has cancelled its future
                        j.future.set_exception(exc)
                continue
            start = 0
            for j in group:
                if not j.future.done():
                    j.future.set_result([h[: j.k] for h in hits[start : start + len(j.queries)]])
                start += len(j.queries)


def document(hit: Hit) -> dict[str, str]:
    """A passage as Search-R1 clients expect it (``contents``), plus awarl's title/text."""
    p = hit.passage
    return {"id": p.id, "contents": f'"{p.title}"\n{p.text}', "title": p.title, "text": p.text}


def _known(retriever: Retriever, pid: str) -> bool:
    store = getattr(retriever, "store", None)  # in-process indexes: a dict lookup, no passage read
    if store is not None:
        return pid in store.row_of
    try:
        retriever.get_passage(pid)
    except UnknownPassageError:
        return False
    return True


def _add_error_handlers(app: Any) -> None:
    """Every error leaves as JSON ``{"error": …}``: a body that does not validate or decode as 422
    (with the fields at fault), an HTTP error with its status, anything else as 500."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"error": "invalid request body", "detail": detail})

    @app.exception_handler(StarletteHTTPException)  # FastAPI's own (a body it cannot decode) and ours
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI: "There was an error parsing the body" (e.g. not UTF-8)
            return JSONResponse(status_code=422, content={"error": "invalid request body", "detail": [{"loc": ["body"],
                                "msg": str(exc.detail)}]})
        return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)})

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=500, content={"error": f"retrieval failed: {type(exc).__name__}: {exc}"})


def create_app(retriever: Retriever, settings: ServerSettings | None = None) -> Any:
    """The FastAPI app. Run it with uvicorn (`serve`), or in-process with
    ``with fastapi.testclient.TestClient(app) as client`` (the ``with`` starts the batcher)."""
    from fastapi import FastAPI, HTTPException
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, StringConstraints

    settings = settings or ServerSettings()
    batcher = _Batcher(retriever, settings)
    Query = Annotated[StrictStr, StringConstraints(max_length=settings.max_query_chars)]

    class RetrieveRequest(BaseModel):
        """Search-R1's request, plus awarl's ``allowed`` (closed scope). Types are strict."""

        model_config = ConfigDict(extra="forbid", strict=True)
        queries: list[Query]
        topk: StrictInt | None = Field(default=None, ge=1, le=settings.max_topk)
        return_scores: StrictBool = False
        allowed: list[list[StrictStr]] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        worker = asyncio.create_task(batcher.run())
        try:
            yield
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    app = FastAPI(title="awarl retrieval", lifespan=lifespan)
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)

    _add_error_handlers(app)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "kind": getattr(retriever, "kind", type(retriever).__name__), "passages": len(retriever),
                "batches": batcher.batches, "worker": os.getpid()}

    @app.get("/passages/{pid}")
    def passage(pid: str) -> dict[str, str]:
        try:
            return retriever.get_passage(pid).to_dict()
        except UnknownPassageError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> dict[str, Any]:
        if len(req.queries) > settings.max_queries:
            raise HTTPException(413, f"{len(req.queries)} queries in one request; the limit is {settings.max_queries}")
        if req.allowed is not None:
            if len(req.allowed) != len(req.queries):
                raise HTTPException(422, f"'allowed' has {len(req.allowed)} lists for {len(req.queries)} queries")
            for i, ids in enumerate(req.allowed):
                for pid in ids:
                    if not _known(retriever, pid):
                        raise HTTPException(422, f"allowed[{i}]: unknown passage id {pid!r}")
        k = req.topk or settings.default_topk
        try:
            hits = await batcher.submit(req.queries, k, req.allowed)
        except SearchError as exc:
            raise HTTPException(422, str(exc)) from None
        if req.return_scores:
            return {"result": [[{"document": document(h), "score": h.score} for h in row] for row in hits]}
        return {"result": [[document(h) for h in row] for row in hits]}

    return app


class _BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is a 413 in the JSON envelope. The
    declared Content-Length is checked before reading; a body without one (chunked) is read here,
    counting, up to the limit, then handed on (the app would buffer it whole anyway)."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.max_bytes:
                await self._reject(send)
                return
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._reject(send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, send: Any) -> None:
        import json

        body = json.dumps({"error": f"request body over the limit of {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, settings: ServerSettings | None = None,
          log_level: str = "info", workers: int = 1) -> None:
    """Serve until interrupted (the ``awarl search serve`` command). With ``workers > 1`` the
    processes are forked from this one after the index is loaded, so they share its pages and
    all serve the same index; they accept connections from one listening socket."""
    import uvicorn

    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    sock = bind(host, port)
    config = uvicorn.Config(create_app(retriever, settings), log_level=log_level, lifespan="on")
    if workers == 1:
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sock.close()
        return
    children: set[int] = set()
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def spawn() -> None:
        pid = os.fork()
        if pid == 0:  # the worker: default signal handling, serve, never return into the parent's code
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = 0
            try:
                uvicorn.Server(config).run(sockets=[sock])
            except BaseException:  # noqa: BLE001 - a worker must exit, whatever happened
                code = 1
            os._exit(code)
        children.add(pid)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for _ in range(workers):
            spawn()
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            children.discard(pid)
            if not stopping:  # a worker died (e.g. killed): replace it, from the same loaded index
                spawn()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; a port out of range is a `ConfigError`, an address that cannot be bound
    (in use, not this machine's) a `SearchError`, each saying why."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"port {port} is out of range: use 1-65535 (0 picks a free port)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise SearchError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def background_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 0,
                      settings: ServerSettings | None = None, startup_timeout: float = 20.0) -> Iterator[str]:
    """Run a real uvicorn server in a thread of this process; yields its base URL, stops on exit.

    ``port=0`` picks a free port. Used by tests and the benchmark; `serve` is for production.
    """
    import uvicorn

    sock = bind(host, port)
    config = uvicorn.Config(create_app(retriever, settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"retrieval server on {host}:{sock.getsockname()[1]} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
