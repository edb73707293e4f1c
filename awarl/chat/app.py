"""The chat server: REST API (FastAPI, OpenAPI schema at /docs) and the web UI at ``/``.

Who may call what is `awarl.chat.auth` (admin token, reviewer tokens, per-thread capabilities, the
``Host`` check); docs/security.md is the threat model. Every error, including bodies FastAPI itself
rejects, comes back in one envelope, never with exception text::

    {"error": {"code": "thread_not_found", "message": "no thread 'x'", "details": null}}

with 400 (malformed JSON, invalid Unicode, no Host), 401 (a token is needed), 403 (the token does
not allow it, a Host not served, a generator not on the allow-list), 404 (unknown thread, review,
policy or route), 409 (the thread is not waiting for answers; a review already decided; a supported
sentence rejected without override), 413 (a body over 1 MB), 422 (a body of the wrong shape or
values), 500 (a bug: a reference to look up in the log) or 503 (validate-only mode has no agent;
the database is unavailable).
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException as StarletteHTTPException

from awarl.chat.auth import Auth, Principal
from awarl.chat.config import ChatSettings
from awarl.chat.errors import (BadInput, ChatError, Conflict, Forbidden, Invalid, NotAuthenticated, NotFound,
                               Unavailable)
from awarl.chat.manager import UNSET, ThreadManager

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000

STATUS: dict[type[ChatError], int] = {
    BadInput: 400,
    NotAuthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    Unavailable: 503,
}
"""The one map from the chat's errors (`awarl.chat.errors`) to HTTP statuses."""


def _chat_response(exc: ChatError) -> JSONResponse:
    status = next(code for kind, code in STATUS.items() if isinstance(exc, kind))
    return _error(status, exc.code, exc.message, exc.details)


def _strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


class Body(BaseModel):
    """A request body: no unknown fields, and every string valid Unicode (JSON's ``\\ud800`` escapes can
    carry lone surrogates, which no UTF-8 store or log can hold)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _unicode(self) -> "Body":
        for name in type(self).model_fields:
            for text in _strings(getattr(self, name)):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise PydanticCustomError("invalid_unicode", f"{name} is not valid Unicode (a lone surrogate)") from None
        return self


class ChatRequest(Body):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(..., description="The user's question.")
    answer: str | None = Field(None, description="An answer to check instead of generating one (validate-only).")


class AnswerRequest(Body):
    answers: list[str | None] = Field(default_factory=list, description="One answer per pending question, in order.")
    skipped: bool = Field(False, description="Skip all pending questions.")


class ConfigRequest(Body):
    generator: str | None = Field(None, description="Backend spec of the agent; null switches to validate-only.")
    policy: str | None = Field(None, description="Name of a known policy (GET /api/config/policies).")
    max_iterations: int | None = Field(None, ge=0, le=20, description="Rewrites allowed per thread.")


class ReviewRequest(Body):
    verdict: str = Field(..., description="approve, or reject (marks the review's sentence wrong).")
    correction: str | None = Field(None, description="A note for the corrections list (quoted to the model as data).")
    override: bool = Field(False, description="Mark the sentence wrong even though the corpus supports it (needs a reason).")
    reason: str | None = Field(None, description="Why the override is right; audited with the decision.")


def _error(status: int, code: str, message: str, details: Any = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message,
                                                               "details": jsonable_encoder(details)}})


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware in front of every route: the ``Host`` check, then the body limit (declared or
    streamed: a chunked body is counted as it arrives)."""

    def __init__(self, app: Any, auth: Auth, max_body: int = MAX_BODY_BYTES):
        self.app, self.auth, self.max_body = app, auth, max_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        try:
            self.auth.check_host(headers.get(b"host", b"").decode("latin-1") or None)
            declared = headers.get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
                if not declared.isdigit():
                    raise BadInput("bad_content_length", "Content-Length is not a number")
                raise _TooLarge
        except ChatError as exc:
            return await _send(send, _chat_response(exc))
        except _TooLarge:
            return await _send(send, _too_large(self.max_body))
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise _TooLarge
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> JSONResponse:
    return _error(413, "body_too_large", f"the request body is over {limit:,} bytes")


async def _send(send: Any, response: JSONResponse) -> None:
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


@dataclass
class Caller:
    """What a route needs of the app: the manager, the access rules, who is calling, the request."""

    manager: ThreadManager
    auth: Auth
    who: Principal
    request: Request

    def may_read(self, thread_id: str) -> None:
        self.auth.require_thread(self.who, self.manager.store.thread_token(thread_id),
                                 self.request.headers.get("x-thread-token"))


def caller(request: Request) -> Caller:
    auth: Auth = request.app.state.auth
    return Caller(request.app.state.manager, auth, auth.principal(request.headers.get("authorization")), request)


# The credential checks are dependencies, so FastAPI runs them before it validates a route's path, query and
# body: a caller without the right token gets 401 / 403 whatever it sent, never a 422 describing the route.
def anyone(c: Caller = Depends(caller)) -> Caller:
    c.auth.require_any(c.who)
    return c


def staff(c: Caller = Depends(caller)) -> Caller:
    c.auth.require_staff(c.who)
    return c


def admin(c: Caller = Depends(caller)) -> Caller:
    c.auth.require_admin(c.who)
    return c


def thread_reader(thread_id: str, c: Caller = Depends(caller)) -> Caller:
    c.may_read(thread_id)
    return c


router = APIRouter(prefix="/api")


# -- threads ---------------------------------------------------------------------------------------
@router.post("/chat", summary="Ask a question (or check a given answer); returns the thread id and its token")
def chat(body: ChatRequest, c: Caller = Depends(anyone)) -> dict[str, Any]:
    t, token = c.manager.submit_with_token(body.prompt, body.answer)
    return {"thread_id": t.id, "status": t.status.value, "token": token}


@router.get("/thread/{thread_id}", summary="A thread: status, final response, warning, every iteration",
            response_class=Response, responses={200: {"content": {"application/json": {}}, "description": '{"thread": {...}}'}})
async def thread(thread_id: str, c: Caller = Depends(caller)) -> Response:
    # The most frequent request (clients poll it): the stored JSON goes out as is, since decoding and
    # re-encoding a thread with its findings cost more than the rest of the request, and it runs on
    # the event loop (one indexed SQLite read, well under a millisecond) instead of queueing for the
    # thread pool behind slower requests.
    c.may_read(thread_id)
    return Response(content='{"thread": ' + c.manager.get_raw(thread_id) + "}", media_type="application/json")


@router.get("/threads", summary="Threads, newest first (summaries)")
def threads(limit: int = 50, status: str | None = None, c: Caller = Depends(staff)) -> dict[str, Any]:
    if not 1 <= limit <= 1000:
        raise Invalid("bad_limit", f"limit must be in [1, 1000], got {limit}")
    if status is not None and status not in ("PROCESSING", "AWAITING_INPUT", "COMPLETED", "ERROR"):
        raise Invalid("bad_status", f"unknown status {status!r}")
    return {"threads": c.manager.store.list_threads(limit, status)}


@router.post("/thread/{thread_id}/answer", summary="Answer (or skip) the thread's clarifying questions")
def answer(thread_id: str, body: AnswerRequest, c: Caller = Depends(thread_reader)) -> dict[str, Any]:
    t = c.manager.answer(thread_id, body.answers, body.skipped)
    return {"thread_id": t.id, "status": t.status.value}


# -- config and policies ---------------------------------------------------------------------------
@router.get("/config", summary="Generator, policy, max iterations, mode")
def get_config(c: Caller = Depends(anyone)) -> dict[str, Any]:
    return c.manager.config()


@router.post("/config", summary="Change generator (within the allow-list), policy or max iterations (admin)")
def set_config(body: ConfigRequest, c: Caller = Depends(admin)) -> dict[str, Any]:
    generator = body.generator if "generator" in body.model_fields_set else UNSET
    return c.manager.set_config(generator=generator, policy=body.policy, max_iterations=body.max_iterations)


@router.get("/config/policies", summary="The policies this server can check against")
def policies(c: Caller = Depends(anyone)) -> dict[str, Any]:
    return {"policies": c.manager.policies()}


@router.get("/policy/{name}/tests", summary="A policy's tests; ?run=true runs them")
def policy_tests(name: str, run: bool = False, c: Caller = Depends(anyone)) -> dict[str, Any]:
    return c.manager.policy_tests(name, run)


# -- reviews ---------------------------------------------------------------------------------------
@router.get("/reviews", summary="The review queue (reviewers and the admin)")
def reviews(status: str | None = None, c: Caller = Depends(staff)) -> dict[str, Any]:
    return {"reviews": [{**r, "thread": _served(c.manager, r["thread_id"])} for r in c.manager.reviews(status)]}


def _served(manager: ThreadManager, thread_id: str | None) -> dict[str, Any] | None:
    """What a review's thread served (its answer and badge), for the review page."""
    try:
        t = manager.get(thread_id) if thread_id else None
    except NotFound:
        return None
    return t and {k: t.get(k) for k in ("id", "status", "badge", "badge_label", "badge_style", "final_response", "warning")}


@router.post("/reviews/{review_id}", summary="Decide a review (reviewers and the admin); recorded under the caller's name")
def decide(review_id: int, body: ReviewRequest, c: Caller = Depends(staff)) -> dict[str, Any]:
    return {"review": c.manager.decide(review_id, body.verdict, body.correction, reviewer=c.who.name,
                                       override=body.override, reason=body.reason)}


@router.get("/corrections", summary="The corrections on record (quoted to the model as data)")
def corrections(c: Caller = Depends(anyone)) -> dict[str, Any]:
    return {"corrections": c.manager.corrections.records()}


@router.get("/health", summary="Mode, the database's state, thread counts")
def health(c: Caller = Depends(anyone)) -> dict[str, Any]:
    return c.manager.health()


# -- errors: every one in the envelope -------------------------------------------------------------
async def on_chat_error(request: Request, exc: ChatError) -> JSONResponse:
    return _chat_response(exc)


async def on_database_error(request: Request, exc: sqlite3.Error) -> JSONResponse:
    log.error("%s %s: database error: %s", request.method, request.url.path, exc)
    return _error(503, "database_unavailable", "the database is unavailable (locked, full or missing); try again "
                  "shortly (GET /api/health shows its state)")


async def on_too_large(request: Request, exc: _TooLarge) -> JSONResponse:
    return _too_large(MAX_BODY_BYTES)


async def on_invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        return _error(400, "malformed_json", "the request body is not valid JSON", errors)
    if any(e["type"] == "invalid_unicode" for e in errors):
        return _error(400, "invalid_unicode", "; ".join(e["msg"] for e in errors if e["type"] == "invalid_unicode"), errors)
    where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in errors)
    return _error(422, "invalid_request", f"{request.method} {request.url.path}: {where}", errors)


async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc.__cause__, _TooLarge):  # FastAPI wraps what the body reader raised
        return _too_large(MAX_BODY_BYTES)
    # FastAPI raises a 400 only when it cannot decode the body (bytes that are not UTF-8 JSON)
    code = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}")


async def on_crash(request: Request, exc: Exception) -> JSONResponse:
    # The exception text stays in the log (it may hold paths, SQL or data); the client gets a reference.
    ref = uuid.uuid4().hex[:12]
    log.exception("%s %s failed (ref %s)", request.method, request.url.path, ref)
    return _error(500, "internal_error", f"the server failed on this request (reference {ref} in its log)",
                  {"reference": ref})


HANDLERS: dict[Any, Any] = {ChatError: on_chat_error, sqlite3.Error: on_database_error, _TooLarge: on_too_large,
                            RequestValidationError: on_invalid_request, StarletteHTTPException: on_http_error,
                            Exception: on_crash}


def create_app(settings: ChatSettings, *, generators: Mapping[str, Any] | None = None) -> FastAPI:
    """The app; its ThreadManager starts with the app (lifespan) and stops with it."""
    manager = ThreadManager(settings, generators=generators)
    try:
        auth = Auth(settings)
    except BaseException:
        manager.close()
        raise

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        manager.start()
        try:
            yield
        finally:
            manager.close()

    app = FastAPI(title="awarl chat", description="Verify-and-rewrite chatbot: the trained search agent behind "
                  "automated-reasoning (Z3) and citation checks.", version="1", lifespan=lifespan,
                  exception_handlers=HANDLERS, redoc_url=None, swagger_ui_oauth2_redirect_url=None)
    app.state.manager, app.state.auth = manager, auth
    app.add_middleware(Guard, auth=auth)
    app.include_router(router)
    static = resources.files("awarl.chat").joinpath("static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(str(static.joinpath("index.html")))

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app
