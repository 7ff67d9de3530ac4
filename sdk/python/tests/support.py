"""Test support: the server under test, real HTTP webhooks, and the runtimes' event shapes.

The Go test sdk/python/sdk_test.go starts the real server and runs these tests with
GENDURABLE_URL set; by hand: ``make run`` and
``GENDURABLE_URL=http://localhost:8080 PYTHONPATH=. python3 -m unittest discover -s tests``
(the server needs GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true, which ``make run`` sets).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import socketserver
import threading
import time
import unittest
import uuid
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import gendurable

SECRET = "whsec_Z2VuZHVyYWJsZS1weXRob24tc2RrLXRlc3Qtc2VjcmV0"
OTHER_SECRET = "whsec_YW5vdGhlci1zZWNyZXQtdGhhdC1kb2VzLW5vdC1tYXRjaA=="

_names = itertools.count(1)


def unique(prefix: str) -> str:
    """A handler name or key no other test uses (the tests share one server)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def server_url() -> str:
    url = os.environ.get("GENDURABLE_URL")
    if not url:
        raise unittest.SkipTest("GENDURABLE_URL is not set (sdk/python/sdk_test.go sets it)")
    return url


def client() -> gendurable.Client:
    return gendurable.Client(server_url(), timeout=30)


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def serve_wsgi(test: unittest.TestCase, app: Callable) -> str:
    """Serves a WSGI app on a free loopback port (wsgiref, a thread per request) until the
    test ends; answers its base URL."""
    httpd = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join()

    test.addCleanup(stop)
    return f"http://127.0.0.1:{httpd.server_port}"


def _request_of(environ: dict) -> tuple[str, str, dict[str, str], bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = environ["CONTENT_TYPE"]
    return environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/"), headers, body


def function_url_event(method: str, path: str, headers: dict[str, str], body: bytes, base64_body: bool) -> dict:
    """The event AWS Lambda gives a function behind a function URL (payload format 2.0,
    the one API Gateway HTTP APIs send too)."""
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "tc7m3xlhjpbl5jmgr4cnuh5jqe0lvxgc",
            "domainName": "tc7m3xlhjpbl5jmgr4cnuh5jqe0lvxgc.lambda-url.eu-west-1.on.aws",
            "domainPrefix": "tc7m3xlhjpbl5jmgr4cnuh5jqe0lvxgc",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                     "userAgent": headers.get("user-agent", "")},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": base64.b64encode(body).decode() if base64_body else body.decode(),
        "isBase64Encoded": base64_body,
    }


def lambda_bridge(handler: Callable[[dict, Any], dict], base64_body: bool = False) -> Callable:
    """A WSGI app that does what the Lambda service does for a function URL: turns each
    request into a 2.0 event, calls handler(event, context) and turns its result into the
    HTTP answer. ``base64_body`` delivers bodies base64-encoded, as Lambda does for
    binary content types."""
    def app(environ: dict, start_response: Callable) -> list[bytes]:
        method, path, headers, body = _request_of(environ)
        result = handler(function_url_event(method, path, headers, body, base64_body), None)
        out = result.get("body") or ""
        raw = base64.b64decode(out) if result.get("isBase64Encoded") else out.encode()
        start_response(f"{result['statusCode']} -", list((result.get("headers") or {}).items()))
        return [raw]
    return app


def asgi_scope(method: str, path: str, headers: dict[str, str]) -> dict:
    """The scope an ASGI server (uvicorn, hypercorn) gives an HTTP request."""
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
    }


def call_asgi(app: Callable, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict, bytes]:
    """Runs one request through an ASGI app as a server would: the body in two
    ``http.request`` messages, the answer gathered from ``http.response.*`` messages."""
    half = len(body) // 2
    incoming = [{"type": "http.request", "body": body[:half], "more_body": True},
                {"type": "http.request", "body": body[half:], "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(msg: dict) -> None:
        sent.append(msg)

    asyncio.run(app(asgi_scope(method, path, headers), receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, out


def asgi_bridge(app: Callable) -> Callable:
    """A WSGI app that serves each request through an ASGI app (see call_asgi)."""
    def wsgi(environ: dict, start_response: Callable) -> list[bytes]:
        status, headers, body = call_asgi(app, *_request_of(environ))
        start_response(f"{status} -", list(headers.items()))
        return [body]
    return wsgi


def register(test: unittest.TestCase, c: gendurable.Client, name: str, app: Callable,
             secret: str = SECRET) -> str:
    """Serves app as the webhook of handler name (fast backoff, so retries show quickly)."""
    url = serve_wsgi(test, app)
    c.put_handler(name, url + "/steps", secret=secret, backoff_base="10ms", backoff_max="100ms", max_attempts=20)
    return url


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Polls predicate until it answers something truthy (and answers it), or fails."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def outcomes(c: gendurable.Client, job_id: int) -> list[str]:
    return [s["outcome"] for s in c.list_steps(job_id)]
