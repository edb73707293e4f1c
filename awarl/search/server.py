"""The retrieval server: a FastAPI app over any `Retriever`, compatible with Search-R1.

``POST /retrieve`` takes Search-R1's request ``{"queries": [...], "topk": k, "return_scores":
true}`` and answers ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``
(without ``return_scores``, each inner list holds the documents alone). ``contents`` is
``"<title>"\\n<text>``, the wiki-18 corpus layout Search-R1 clients split on the first newline;
awarl also adds ``title`` and ``text``. awarl's one extension is ``allowed``: one list of
passage ids per query, the closed scope. ``GET /health`` and ``GET /passages/{id}`` complete it.

Concurrent requests are micro-batched: a single worker drains the queue (up to ``max_batch``
queries, or whatever arrived within ``batch_wait_ms``) and answers them with one call to the
retriever in a worker thread, so the event loop keeps accepting connections under load.
Bad requests get a 4xx JSON body ``{"error": ..., "detail": ...}``.
"""


import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from awarl.search.retriever import Hit, Retriever, SearchError, UnknownPassageError


@dataclass(frozen=True)
class ServerSettings:
    """Limits and batching of the retrieval server."""

    default_topk: int = 3  # used when a request has no "topk"
    max_topk: int = 100  # larger "topk" is a 422
    max_queries: int = 1024  # more queries in one request is a 413
    max_batch: int = 256  # most queries answered by one retriever call
    batch_wait_ms: float = 2.0  # how long the worker waits for more requests before searching

    def __post_init__(self) -> None:
        if not 1 <= self.default_topk <= self.max_topk:
            raise ValueError(f"need 1 <= default_topk <= max_topk, got {self.default_topk} and {self.max_topk}")
        if self.max_queries < 1 or self.max_batch < 1 or self.batch_wait_ms < 0:
            raise ValueError("max_queries and max_batch must be >= 1 and batch_wait_ms >= 0")


@dataclass
class _Job:
    queries: list[str]
    k: int
    allowed: list[list[str]] | None
    future: asyncio.Future = field(repr=False)


class _Batcher:
    """Collects concurrent jobs and answers them with as few retriever calls as possible."""

    def __init__(self, retriever: Retriever, settings: ServerSettings):
        self.retriever = retriever
        self.settings = settings
        self.queue: asyncio.Queue[_Job] = asyncio.Queue()
        self.batches = 0  # retriever calls made (exposed on /health)

    async def submit(self, queries: list[str], k: int, allowed: list[list[str]] | None) -> list[list[Hit]]:
        job = _Job(queries, k, allowed, asyncio.get_running_loop().create_future())
        await self.queue.put(job)
        return await job.future

    async def run(self) -> None:
        while True:
            jobs = [await self.queue.get()]
            if self.settings.batch_wait_ms > 0:  # let concurrent requests join this batch
                await asyncio.sleep(self.settings.batch_wait_ms / 1000)
            size = len(jobs[0].queries)
            while size < self.settings.max_batch and not self.queue.empty():
                jobs.append(self.queue.get_nowait())
                size += len(jobs[-1].queries)
            await self._answer(jobs)

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


def create_app(retriever: Retriever, settings: ServerSettings | None = None) -> Any:
    """The FastAPI app. Run it with uvicorn (`serve`), or in-process with
    ``with fastapi.testclient.TestClient(app) as client`` (the ``with`` starts the batcher)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field

    settings = settings or ServerSettings()
    batcher = _Batcher(retriever, settings)

    class RetrieveRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        queries: list[str]
        topk: int | None = Field(default=None, ge=1, le=settings.max_topk)
        return_scores: bool = False
        allowed: list[list[str]] | None = None

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

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"error": "invalid request body", "detail": detail})

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content={"error": exc.detail})

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=500, content={"error": f"retrieval failed: {type(exc).__name__}: {exc}"})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "kind": getattr(retriever, "kind", type(retriever).__name__), "passages": len(retriever),
                "batches": batcher.batches}

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
            raise HTTPException(400, str(exc)) from None
        if req.return_scores:
            return {"result": [[{"document": document(h), "score": h.score} for h in row] for row in hits]}
        return {"result": [[document(h) for h in row] for row in hits]}

    return app


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, settings: ServerSettings | None = None,
          log_level: str = "info") -> None:
    """Serve until interrupted (the ``awarl search serve`` command)."""
    import uvicorn

    uvicorn.run(create_app(retriever, settings), host=host, port=port, log_level=log_level)


@contextlib.contextmanager
def background_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 0,
                      settings: ServerSettings | None = None, startup_timeout: float = 20.0) -> Iterator[str]:
    """Run a real uvicorn server in a thread of this process; yields its base URL, stops on exit.

    ``port=0`` picks a free port. Used by tests and the benchmark; `serve` is for production.
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
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
