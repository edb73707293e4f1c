"""The chat server: REST API (FastAPI, OpenAPI schema at /docs) and the web UI at ``/``.

Every error, including bodies FastAPI itself rejects, comes back in one envelope::

    {"error": {"code": "thread_not_found", "message": "no thread 'x'", "details": null}}

with 400 (malformed JSON, bad generator spec), 404 (unknown thread, review, policy or route),
409 (the thread is not waiting for answers; a review already decided), 422 (a body of the wrong
shape or values) or 503 (validate-only mode has no agent to answer with).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from awarl.chat.config import ChatSettings
from awarl.chat.manager import UNSET, ChatError, ThreadManager

log = logging.getLogger(__name__)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(..., description="The user's question.")
    answer: str | None = Field(None, description="An answer to check instead of generating one (validate-only).")


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answers: list[str | None] = Field(default_factory=list, description="One answer per pending question, in order.")
    skipped: bool = Field(False, description="Skip all pending questions.")


class ConfigRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generator: str | None = Field(None, description="Backend spec of the agent; null switches to validate-only.")
    policy: str | None = Field(None, description="Name of a known policy (GET /api/config/policies).")
    max_iterations: int | None = Field(None, ge=0, le=20, description="Rewrites allowed per thread.")


class ReviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: str = Field(..., description="approve, or reject (marks the review's sentence wrong).")
    correction: str | None = Field(None, description="A note for the corrections list (quoted to the model as data).")
    override: bool = Field(False, description="Mark the sentence wrong even though the corpus supports it (needs a reason).")
    reason: str | None = Field(None, description="Why the override is right; audited with the decision.")


def _error(status: int, code: str, message: str, details: Any = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message,
                                                               "details": jsonable_encoder(details)}})


def create_app(settings: ChatSettings, *, generators: Mapping[str, Any] | None = None) -> FastAPI:
    """The app; its ThreadManager starts with the app (lifespan) and stops with it."""
    manager = ThreadManager(settings, generators=generators)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        manager.start()
        try:
            yield
        finally:
            manager.close()

    app = FastAPI(title="awarl chat", description="Verify-and-rewrite chatbot: the trained search agent behind "
                  "automated-reasoning (Z3) and citation checks.", version="1", lifespan=lifespan)
    app.state.manager = manager

    @app.exception_handler(ChatError)
    async def _chat_error(request: Request, exc: ChatError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.details)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        if any(e["type"] == "json_invalid" for e in errors):
            return _error(400, "malformed_json", "the request body is not valid JSON", errors)
        where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in errors)
        return _error(422, "invalid_request", f"{request.method} {request.url.path}: {where}", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}")

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")

    # -- threads ---------------------------------------------------------------------------------
    @app.post("/api/chat", summary="Ask a question (or check a given answer); returns the thread id")
    def chat(body: ChatRequest) -> dict[str, Any]:
        t = manager.submit(body.prompt, body.answer)
        return {"thread_id": t.id, "status": t.status.value}

    @app.get("/api/thread/{thread_id}", summary="A thread: status, final response, warning, every iteration",
             response_class=Response, responses={200: {"content": {"application/json": {}},
                                                       "description": '{"thread": {...}}'}})
    async def thread(thread_id: str) -> Response:
        # The most frequent request (clients poll it): the stored JSON goes out as is, since decoding and
        # re-encoding a thread with its findings cost more than the rest of the request, and it runs on
        # the event loop (one indexed SQLite read, well under a millisecond) instead of queueing for the
        # thread pool behind slower requests.
        return Response(content='{"thread": ' + manager.get_raw(thread_id) + "}", media_type="application/json")

    @app.get("/api/threads", summary="Threads, newest first (summaries)")
    def threads(limit: int = 50, status: str | None = None) -> dict[str, Any]:
        if not 1 <= limit <= 1000:
            raise ChatError(422, "bad_limit", f"limit must be in [1, 1000], got {limit}")
        if status is not None and status not in ("PROCESSING", "AWAITING_INPUT", "COMPLETED", "ERROR"):
            raise ChatError(422, "bad_status", f"unknown status {status!r}")
        return {"threads": manager.store.list_threads(limit, status)}

    @app.post("/api/thread/{thread_id}/answer", summary="Answer (or skip) the thread's clarifying questions")
    def answer(thread_id: str, body: AnswerRequest) -> dict[str, Any]:
        t = manager.answer(thread_id, body.answers, body.skipped)
        return {"thread_id": t.id, "status": t.status.value}

    # -- config and policies ---------------------------------------------------------------------
    @app.get("/api/config", summary="Generator, policy, max iterations, mode")
    def get_config() -> dict[str, Any]:
        return manager.config()

    @app.post("/api/config", summary="Change generator, policy or max iterations (new threads use them)")
    def set_config(body: ConfigRequest) -> dict[str, Any]:
        generator = body.generator if "generator" in body.model_fields_set else UNSET
        return manager.set_config(generator=generator, policy=body.policy, max_iterations=body.max_iterations)

    @app.get("/api/config/policies", summary="The policies this server can check against")
    def policies() -> dict[str, Any]:
        return {"policies": manager.policies()}

    @app.get("/api/policy/{name}/tests", summary="A policy's tests; ?run=true runs them")
    def policy_tests(name: str, run: bool = False) -> dict[str, Any]:
        return manager.policy_tests(name, run)

    # -- reviews ---------------------------------------------------------------------------------
    @app.get("/api/reviews", summary="The review queue")
    def reviews(status: str | None = None) -> dict[str, Any]:
        return {"reviews": manager.reviews(status)}

    @app.post("/api/reviews/{review_id}", summary="Decide a review; a correction joins the corrections list")
    def decide(review_id: int, body: ReviewRequest) -> dict[str, Any]:
        return {"review": manager.decide(review_id, body.verdict, body.correction, override=body.override, reason=body.reason)}

    @app.get("/api/corrections", summary="The corrections list injected into prompts")
    def corrections() -> dict[str, Any]:
        return {"corrections": manager.corrections.records()}

    @app.get("/api/health", summary="Liveness, mode and thread counts")
    def health() -> dict[str, Any]:
        return {"ok": True, "mode": manager.mode, "mode_note": settings.mode_note, "threads": manager.store.count_threads()}

    # -- the web UI ------------------------------------------------------------------------------
    static = resources.files("awarl.chat").joinpath("static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(str(static.joinpath("index.html")))

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app
