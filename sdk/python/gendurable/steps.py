"""The step handler: verify, decode, dispatch to the user's function, encode the answer.

    steps = Steps(secret="whsec_…")

    @steps.handler("greeter")
    def greeter(step):
        if step.job.step < 2:
            return Next(state={"n": step.job.step + 1})
        return Done(result={"greeting": "hello, " + step.job.input["name"]})

    app = steps.wsgi                 # WSGI (gunicorn, Flask's app.wsgi_app, wsgiref)
    asgi_app = steps.asgi            # ASGI (uvicorn, Starlette mount)
    lambda_handler = steps.lambda_handler   # AWS Lambda function URL / API Gateway v2

A step function takes a ``Step`` and returns an answer (``Next``, ``Await``, ``Spawn``,
``Done``, ``Fail``, ``Retry``, ``Accepted`` or a dict such as ``{"done": {}}``); it may be
``async def``. An exception answers 500, which the server retries with backoff.

Every error is answered as an RFC 9457 problem (``application/problem+json`` with
``type``, ``title``, ``status`` and ``detail``), as the TypeScript SDK's ``serve`` answers:
405 ``method-not-allowed``, 401 ``webhook-signature``, 400 ``bad-step-request``, 413
``too-large``, 404 ``unknown-handler``, 500 ``step-error`` (types under
``urn:gendurable:problem:``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Optional, Union

from . import answers
from .errors import SignatureError
from .signature import DEFAULT_TOLERANCE, Secrets, _keys, _verify

log = logging.getLogger("gendurable")

MAX_REQUEST_BYTES = 1 << 20  # the server's default step request cap


@dataclass
class Job:
    """The job a step belongs to; ``step`` counts completed steps, ``attempt`` starts at 1."""

    id: int
    queue: str
    handler: str
    key: Optional[str]
    step: int
    attempt: int
    max_attempts: int
    input: Any
    state: Any
    created_at: str


@dataclass
class Signal:
    """A delivered, unconsumed signal."""

    id: int
    name: str
    payload: Any
    created_at: str


@dataclass
class ChildResult:
    """A child job and how it ended (sent to the step after a spawn's join)."""

    id: int
    handler: str
    key: Optional[str]
    status: str
    result: Any
    error: Any


@dataclass
class Lease:
    """Authorises ``Client.heartbeat`` and ``Client.complete_step`` until ``expires_at``."""

    token: str
    expires_at: str


@dataclass
class Step:
    """One step request, decoded. ``wake`` is ``"signal"``, ``"children"``, ``"timeout"`` or
    ``None``; ``webhook_id`` is unique per attempt (use it to make side effects idempotent)."""

    job: Job
    signals: list[Signal]
    children: list[ChildResult]
    lease: Lease
    wake: Optional[str] = None
    signals_more: int = 0
    children_more: int = 0
    webhook_id: str = ""
    raw: dict = field(default_factory=dict, repr=False)
    #: The request's W3C trace context (``None`` when the job has none): the service's span
    #: of this attempt, in the trace of the job. When the ``opentelemetry`` API is installed
    #: the step function also runs in a span of the step, child of it (an optional
    #: dependency: a no-op span unless an OpenTelemetry SDK is configured).
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None

    def signal(self, *names: str) -> Optional[Signal]:
        """The oldest signal with one of ``names`` (any name when none given), or ``None``."""
        for s in self.signals:
            if not names or s.name in names:
                return s
        return None


def _pick(cls, d: Mapping[str, Any]):
    return cls(**{f: d.get(f) for f in cls.__dataclass_fields__})


def decode_step(body: Union[bytes, str, Mapping[str, Any]], webhook_id: str = "") -> Step:
    """Decodes a step request body (bytes, text or an already parsed dict)."""
    d = json.loads(body) if isinstance(body, (bytes, str)) else dict(body)
    if not isinstance(d, dict) or not isinstance(d.get("job"), dict) or not isinstance(d.get("lease"), dict):
        raise ValueError("a step request is an object with job and lease")
    return Step(
        job=_pick(Job, d["job"]),
        signals=[_pick(Signal, s) for s in d.get("signals") or []],
        children=[_pick(ChildResult, c) for c in d.get("children") or []],
        lease=_pick(Lease, d["lease"]),
        wake=d.get("wake"),
        signals_more=int(d.get("signals_more") or 0),
        children_more=int(d.get("children_more") or 0),
        webhook_id=webhook_id,
        raw=d,
    )


@dataclass
class Response:
    """An HTTP answer, independent of the framework that sends it."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


# The problems Steps answers, by type: the status and the title, the same for every
# occurrence (RFC 9457) and the same as the TypeScript SDK's serve answers.
_PROBLEMS = {
    "method-not-allowed": (405, "Step webhooks are POSTed"),
    "webhook-signature": (401, "Bad webhook signature"),
    "bad-step-request": (400, "Bad step request"),
    "too-large": (413, "Step request too large"),
    "unknown-handler": (404, "No step function for this handler"),
    "step-error": (500, "The step function failed"),
}


def _problem(kind: str, detail: str) -> Response:
    """An RFC 9457 problem answer: type ``urn:gendurable:problem:<kind>``, its status and
    title, and ``detail`` about this occurrence."""
    status, title = _PROBLEMS[kind]
    doc = {"type": "urn:gendurable:problem:" + kind, "title": title, "status": status, "detail": detail}
    return Response(status, json.dumps(doc).encode(), {"content-type": "application/problem+json"})


StepFunction = Callable[[Step], Union[Any, Awaitable[Any]]]


class Steps:
    """Routes signed step requests to the functions registered per handler (and step)."""

    def __init__(self, secret: Secrets, *, tolerance: float = DEFAULT_TOLERANCE):
        """``secret`` is the handler's ``whsec_…`` secret, or several while you rotate it;
        ``tolerance`` is how many seconds a ``webhook-timestamp`` may be off. A malformed
        secret raises ``ValueError`` here, naming what is wrong (``TypeError`` when it is
        not a string)."""
        self._keys = _keys(secret, "Steps: ")
        self.secrets = [secret] if isinstance(secret, str) else list(secret)
        self.tolerance = tolerance
        self._routes: dict[tuple[str, Optional[int]], StepFunction] = {}

        # The ASGI application is a plain coroutine function, not a bound method: servers
        # tell ASGI 3 from ASGI 2 by inspecting the object, and uvicorn took the bound
        # method for an ASGI 2 application (every request failed with "asgi() missing 2
        # required positional arguments: 'receive' and 'send'").
        async def asgi(scope: dict, receive: Callable, send: Callable) -> None:
            await self._asgi(scope, receive, send)
        asgi.__doc__ = self._asgi.__doc__
        self.asgi = asgi

    def register(self, handler: str, fn: StepFunction, step: Optional[int] = None) -> None:
        """Runs ``fn`` for the steps of jobs of ``handler`` (only step number ``step`` when
        given; such a route wins over the handler's catch-all)."""
        self._routes[(handler, step)] = fn

    def handler(self, name: str, step: Optional[int] = None) -> Callable[[StepFunction], StepFunction]:
        """Decorator form of ``register``."""
        def deco(fn: StepFunction) -> StepFunction:
            self.register(name, fn, step)
            return fn
        return deco

    def _prepare(self, headers: Mapping[str, str], body: bytes):
        """Verifies and decodes; answers (step, function) or the error Response."""
        if len(body) > MAX_REQUEST_BYTES:
            return _problem("too-large", "a step request is at most 1 MiB")
        try:
            msg_id = _verify(self._keys, headers, body, self.tolerance, None)
        except SignatureError as e:
            return _problem("webhook-signature", str(e))
        try:
            step = decode_step(body, msg_id)
        except json.JSONDecodeError as e:
            return _problem("bad-step-request", f"the body is not JSON: {e}")
        except (ValueError, TypeError) as e:
            return _problem("bad-step-request", str(e))
        step.traceparent = _header(headers, "traceparent")
        step.tracestate = _header(headers, "tracestate")
        fn = self._routes.get((step.job.handler, step.job.step)) or self._routes.get((step.job.handler, None))
        if fn is None:
            return _problem("unknown-handler", f"handler {json.dumps(step.job.handler)}")
        return step, fn

    @staticmethod
    def _finish(step: Step, result: Any = None, exc: Optional[BaseException] = None) -> Response:
        if exc is not None:
            log.exception("step %s of job %s failed", step.job.step, step.job.id, exc_info=exc)
            return _problem("step-error", f"{type(exc).__name__}: {exc}")
        if result is answers.Accepted or isinstance(result, answers.Accepted):
            return Response(202, b"")
        try:
            return Response(200, json.dumps(answers.encode(result)).encode())
        except (TypeError, ValueError) as e:
            log.error("step %s of job %s answered %r", step.job.step, step.job.id, result)
            return _problem("step-error", str(e))

    def handle(self, headers: Mapping[str, str], body: bytes) -> Response:
        """Serves one step request; an ``async def`` step function runs to completion in a
        fresh event loop."""
        prepared = self._prepare(headers, body)
        if isinstance(prepared, Response):
            return prepared
        step, fn = prepared
        try:
            with _traced(step):
                result = fn(step)
                if inspect.isawaitable(result):
                    result = asyncio.run(_awaited(result))
        except Exception as e:  # the user's function: answer 500, the server retries
            return self._finish(step, exc=e)
        return self._finish(step, result)

    async def handle_async(self, headers: Mapping[str, str], body: bytes) -> Response:
        """Serves one step request on the running event loop; a plain (sync) step function
        runs in a worker thread so it does not block the loop."""
        prepared = self._prepare(headers, body)
        if isinstance(prepared, Response):
            return prepared
        step, fn = prepared
        try:
            with _traced(step):
                if inspect.iscoroutinefunction(fn):
                    result = await fn(step)
                else:
                    result = await asyncio.to_thread(fn, step)  # copies the context: the span too
                    if inspect.isawaitable(result):
                        result = await result
        except Exception as e:
            return self._finish(step, exc=e)
        return self._finish(step, result)

    # Adapters.

    def wsgi(self, environ: dict, start_response: Callable) -> list[bytes]:
        """The WSGI application: POST a step to any path it is mounted at."""
        if environ.get("REQUEST_METHOD") != "POST":
            resp = _not_post(environ.get("REQUEST_METHOD"))
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            body = environ["wsgi.input"].read(min(length, MAX_REQUEST_BYTES + 1)) if length > 0 else b""
            headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
            resp = self.handle(headers, body)
        start_response(f"{resp.status} {_REASONS.get(resp.status, '')}".rstrip(),
                       [(k, v) for k, v in resp.headers.items()] + [("content-length", str(len(resp.body)))])
        return [resp.body]

    async def _asgi(self, scope: dict, receive: Callable, send: Callable) -> None:
        """The ASGI application, ``steps.asgi`` (HTTP only; a lifespan scope is
        acknowledged)."""
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            raise RuntimeError(f"gendurable.Steps serves HTTP, not {scope['type']}")
        if scope.get("method") != "POST":
            resp = _not_post(scope.get("method"))
        else:
            chunks, size, more = [], 0, True
            while more:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size <= MAX_REQUEST_BYTES + 1:
                    chunks.append(chunk)
                more = msg.get("more_body", False)
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            resp = await self.handle_async(headers, b"".join(chunks))
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(k.encode(), v.encode()) for k, v in resp.headers.items()]})
        await send({"type": "http.response.body", "body": resp.body})

    def lambda_handler(self, event: dict, context: Any = None) -> dict:
        """The AWS Lambda handler for function URL and API Gateway HTTP API (payload 2.0)
        events; answers the same 2.0 response shape."""
        method = (event.get("requestContext", {}).get("http", {}) or {}).get("method", "POST")
        if method != "POST":
            resp = _not_post(method)
        else:
            body = event.get("body") or ""
            raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
            headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
            resp = self.handle(headers, raw)
        return {"statusCode": resp.status, "headers": dict(resp.headers),
                "body": resp.body.decode(), "isBase64Encoded": False}


def _not_post(method: Optional[str]) -> Response:
    return _problem("method-not-allowed", f"a step request is a POST, not {method or 'no method'}")


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 413: "Content Too Large", 500: "Internal Server Error"}


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    """The header ``name`` (any case), or ``None``."""
    v = headers.get(name)
    if v is None:
        for k, val in headers.items():
            if k.lower() == name:
                return val
    return v


_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@contextlib.contextmanager
def _traced(step: Step):
    """Runs the body in a span of the step, child of its traceparent, when the request has
    a valid one and the ``opentelemetry`` API can be imported; else runs it as it is."""
    m = _TRACEPARENT.match(step.traceparent or "")
    if not m or int(m.group(1), 16) == 0 or int(m.group(2), 16) == 0:
        yield
        return
    try:
        from opentelemetry import trace  # optional: never a dependency of this package
    except ImportError:
        yield
        return
    state = None
    if step.tracestate:
        try:
            state = trace.TraceState.from_header([step.tracestate])
        except Exception:  # a malformed tracestate is dropped, as the recommendation says
            state = None
    parent = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
        trace_id=int(m.group(1), 16), span_id=int(m.group(2), 16), is_remote=True,
        trace_flags=trace.TraceFlags(int(m.group(3), 16)), trace_state=state)))
    with trace.get_tracer("gendurable").start_as_current_span(
            f"step {step.job.handler}", context=parent, kind=trace.SpanKind.SERVER,
            attributes={"gendurable.job.id": step.job.id, "gendurable.handler": step.job.handler,
                        "gendurable.step": step.job.step, "gendurable.attempt": step.job.attempt}):
        yield
