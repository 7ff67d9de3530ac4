"""The step handler on its own: signatures, decoding, dispatch, answers, and the adapters
called with the request shapes of their runtimes. No server needed."""

from __future__ import annotations

import asyncio
import base64
import datetime
import inspect
import io
import json
import sys
import time
import unittest
import unittest.mock

import gendurable
from gendurable import Await, Child, Done, Next, Retry, SignatureError, Spawn, Steps

import support


def step_body(handler="h", step=0, **extra) -> bytes:
    body = {"job": {"id": 42, "queue": "default", "handler": handler, "key": "user-7", "step": step,
                    "attempt": 1, "max_attempts": 5, "input": {"user": 7}, "state": None,
                    "created_at": "2026-11-29T10:00:00.123456789Z"},
            "signals": [{"id": 9, "name": "approved", "payload": {"by": "ana"}, "created_at": "2026-11-29T10:00:01Z"}],
            "lease": {"token": "0b5e6f3c-7e8a-4c2d-9f3e-1a2b3c4d5e6f", "expires_at": "2026-11-29T10:00:30Z"}}
    body.update(extra)
    return json.dumps(body).encode()


def signed(body: bytes, secret: str = support.SECRET, ts: int = 0, msg_id: str = "job_42_step_0_attempt_1"):
    return gendurable.sign_headers(secret, msg_id, ts or int(time.time()), body)


class SignatureTest(unittest.TestCase):
    def test_standard_webhooks_vector(self):
        # The test vector of the Standard Webhooks specification's reference libraries.
        sig = gendurable.sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                              1614265330, b'{"test": 2432232314}')
        self.assertEqual(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

    def test_accepts_any_matching_signature_and_secret(self):
        body = b'{"a":1}'
        rotating = gendurable.sign_headers([support.OTHER_SECRET, support.SECRET], "m1", 1000, body)
        self.assertEqual(len(rotating["webhook-signature"].split()), 2)
        self.assertEqual(gendurable.verify(support.SECRET, rotating, body, now=1000), "m1")
        one = gendurable.sign_headers(support.SECRET, "m1", 1000, body)
        self.assertEqual(gendurable.verify([support.OTHER_SECRET, support.SECRET], one, body, now=1000), "m1")
        upper = {k.upper(): v for k, v in one.items()}
        self.assertEqual(gendurable.verify(support.SECRET, upper, body, now=1000), "m1")

    def test_rejections(self):
        body = b'{"a":1}'
        good = gendurable.sign_headers(support.SECRET, "m1", 1000, body)
        cases = {
            "wrong secret": (support.OTHER_SECRET, good, body, 1000),
            "tampered body": (support.SECRET, good, b'{"a":2}', 1000),
            "other id": (support.SECRET, {**good, "webhook-id": "m2"}, body, 1000),
            "too old": (support.SECRET, good, body, 1000 + 301),
            "from the future": (support.SECRET, good, body, 1000 - 301),
            "no signature": (support.SECRET, {k: v for k, v in good.items() if k != "webhook-signature"}, body, 1000),
            "bad timestamp": (support.SECRET, {**good, "webhook-timestamp": "soon"}, body, 1000),
            "v2 scheme": (support.SECRET, {**good, "webhook-signature": good["webhook-signature"].replace("v1,", "v2,")},
                          body, 1000),
        }
        for name, (secret, headers, b, now) in cases.items():
            with self.subTest(name):
                with self.assertRaises(SignatureError):
                    gendurable.verify(secret, headers, b, now=now)
        self.assertEqual(gendurable.verify(support.SECRET, good, body, tolerance=400, now=1000 + 301), "m1")

    def test_secrets(self):
        s = gendurable.new_secret()
        self.assertTrue(s.startswith("whsec_"))
        self.assertEqual(len(base64.b64decode(s[6:])), 32)
        with self.assertRaises(ValueError):
            gendurable.sign("whsec_not base64!", "m", 1, b"")


class SecretTest(unittest.TestCase):
    """Steps checks its signing secret when it is built (a malformed one used to raise on
    every request); the same cases as sdk/typescript/test/serve.test.ts."""

    def test_a_malformed_secret_is_refused_when_steps_is_built(self):
        cases = {
            "not base64": ("whsec_!!!", ValueError,
                           r"^Steps: the signing secret is not whsec_ followed by base64 \(it has characters outside"),
            "URL-safe alphabet": ("whsec_ab-_", ValueError, "characters outside"),
            "cut short": ("whsec_YWJjZ", ValueError, "length"),
            "misplaced padding": ("whsec_YQ=a", ValueError, "characters outside"),
            "too much padding": ("whsec_YQ===", ValueError, "length"),
            "a trailing newline": (gendurable.new_secret() + "\n", ValueError, "whitespace"),
            "an empty key": ("whsec_", ValueError, "empty key"),
            "empty": ("", ValueError, "the signing secret is empty"),
            "missing (an unset environment variable)": (None, ValueError, r"^Steps: the signing secret is missing$"),
            "not a string": (b"whsec_YQ==", TypeError, r"must be a string \(got bytes\)"),
            "an empty list": ([], ValueError, "no signing secret"),
            "one bad secret in a list": ([support.SECRET, "whsec_!!!"], ValueError,
                                         r"^Steps: secret\[1\] is not whsec_ followed by base64"),
        }
        for name, (secret, error, message) in cases.items():
            with self.subTest(name):
                with self.assertRaisesRegex(error, message):
                    Steps(secret)

    def test_every_secret_standard_webhooks_accepts_is_accepted(self):
        body = step_body()
        for secret, signer in [
            (gendurable.new_secret(), None),
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", None),  # the specification's test vector
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),  # the prefix is optional
            ("whsec_YQ==", None),  # a one-byte key: no minimum length
            ("whsec_YWI=", None),
            ("whsec_YWJjZA", "whsec_YWJjZA=="),  # padding is optional, as in the TypeScript SDK
        ]:
            with self.subTest(secret):
                steps = Steps(secret)
                steps.register("h", lambda step: Done())
                self.assertEqual(steps.handle(signed(body, signer or secret), body).status, 200)


class StepsTest(unittest.TestCase):
    def setUp(self):
        self.steps = Steps(support.SECRET)
        self.seen = []

        @self.steps.handler("h")
        def anything(step):
            self.seen.append(step)
            return Next(state={"n": 1}, delay=datetime.timedelta(seconds=90))

        @self.steps.handler("h", step=3)
        def third(step):
            return Spawn(children=[Child("email", input={"to": "x"}, delay="1s", fairness_key="acme"), {"handler": "sms"}])

    def handle(self, body: bytes, headers=None):
        resp = self.steps.handle(headers if headers is not None else signed(body), body)
        return resp.status, (json.loads(resp.body) if resp.body else None)

    def test_decodes_and_dispatches(self):
        status, answer = self.handle(step_body(wake="signal", signals_more=2, unknown_future_field=1))
        self.assertEqual((status, answer), (200, {"next": {"state": {"n": 1}, "delay": "1m30s"}}))
        step = self.seen[0]
        self.assertEqual((step.job.id, step.job.key, step.job.input, step.job.state), (42, "user-7", {"user": 7}, None))
        self.assertEqual((step.wake, step.signals_more, step.webhook_id), ("signal", 2, "job_42_step_0_attempt_1"))
        self.assertEqual(step.signal("approved").payload, {"by": "ana"})
        self.assertIsNone(step.signal("rejected"))
        self.assertEqual(step.lease.token, "0b5e6f3c-7e8a-4c2d-9f3e-1a2b3c4d5e6f")

    def test_the_step_carries_the_requests_trace_context(self):
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        body = step_body()
        headers = dict(signed(body))
        headers.update({"Traceparent": tp, "tracestate": "vendor=abc"})
        self.assertEqual(self.handle(body, headers)[0], 200)
        self.assertEqual(self.handle(body)[0], 200)
        self.assertEqual([(s.traceparent, s.tracestate) for s in self.seen], [(tp, "vendor=abc"), (None, None)])

    def test_a_traced_step_runs_without_the_opentelemetry_package(self):
        # opentelemetry is never a dependency: with it absent (forced here, whether or not
        # it is installed) a step whose request has a valid traceparent runs as it is.
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        body = step_body()
        headers = dict(signed(body))
        headers["Traceparent"] = tp
        with unittest.mock.patch.dict(sys.modules, {"opentelemetry": None}):
            with self.assertRaises(ImportError):
                import opentelemetry  # noqa: F401
            self.assertEqual(self.handle(body, headers)[0], 200)
        self.assertEqual([s.traceparent for s in self.seen], [tp])

    def test_a_traced_step_runs_in_a_span_of_the_opentelemetry_api(self):
        # The opentelemetry package cannot be installed here (no package index), so this
        # stands in a module with the calls of the opentelemetry-api 1.x trace API that
        # _traced makes (TraceState.from_header, SpanContext, NonRecordingSpan,
        # set_span_in_context, get_tracer().start_as_current_span, SpanKind, TraceFlags),
        # and checks what the step handler asks of it: a SERVER span named after the
        # handler, child of the request's traceparent (remote, its flags and tracestate),
        # with the job's attributes, current while the step function runs.
        import types

        started, inside = [], []

        class SpanContext:
            def __init__(self, trace_id, span_id, is_remote, trace_flags, trace_state):
                self.trace_id, self.span_id, self.is_remote = trace_id, span_id, is_remote
                self.trace_flags, self.trace_state = trace_flags, trace_state

        class TraceState(dict):
            @classmethod
            def from_header(cls, headers):
                return cls(kv.split("=", 1) for h in headers for kv in h.split(","))

        class Tracer:
            def start_as_current_span(self, name, context=None, kind=None, attributes=None):
                started.append({"name": name, "parent": context["span"].context, "kind": kind, "attributes": attributes})

                class Current:
                    def __enter__(self):
                        trace.current = name

                    def __exit__(self, *exc):
                        trace.current = None
                return Current()

        trace = types.ModuleType("opentelemetry.trace")
        trace.current = None
        trace.SpanContext, trace.TraceState = SpanContext, TraceState
        trace.TraceFlags = int
        trace.SpanKind = types.SimpleNamespace(SERVER="server", CLIENT="client", INTERNAL="internal")
        trace.NonRecordingSpan = lambda ctx: types.SimpleNamespace(context=ctx)
        trace.set_span_in_context = lambda span: {"span": span}
        trace.get_tracer = lambda name: Tracer()
        otel = types.ModuleType("opentelemetry")
        otel.trace = trace

        steps = Steps(support.SECRET)
        steps.register("h", lambda step: inside.append(trace.current) or Done())
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        body = step_body()
        headers = dict(signed(body))
        headers.update({"traceparent": tp, "tracestate": "vendor=abc"})
        with unittest.mock.patch.dict(sys.modules, {"opentelemetry": otel, "opentelemetry.trace": trace}):
            self.assertEqual(steps.handle(headers, body).status, 200)
            self.assertEqual(steps.handle(signed(body), body).status, 200)  # no traceparent: no span
        self.assertEqual(inside, ["step h", None])
        self.assertEqual(len(started), 1, started)
        span = started[0]
        parent = span["parent"]
        self.assertEqual((span["name"], span["kind"]), ("step h", "server"))
        self.assertEqual((parent.trace_id, parent.span_id, parent.is_remote, parent.trace_flags, dict(parent.trace_state)),
                         (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, True, 1, {"vendor": "abc"}))
        self.assertEqual(span["attributes"], {"gendurable.job.id": 42, "gendurable.handler": "h",
                                              "gendurable.step": 0, "gendurable.attempt": 1})

    def test_a_step_route_wins_over_the_catch_all(self):
        status, answer = self.handle(step_body(step=3))
        self.assertEqual(status, 200)
        email = {"handler": "email", "input": {"to": "x"}, "delay": "1s", "fairness_key": "acme"}
        self.assertEqual(answer, {"spawn": {"children": [email, {"handler": "sms"}]}})
        self.assertEqual(self.seen, [])

    def test_refusals(self):
        body = step_body()
        cases = {
            "unsigned": (body, {}, 401),
            "wrong secret": (body, signed(body, support.OTHER_SECRET), 401),
            "stale": (body, signed(body, ts=int(time.time()) - 3600), 401),
            "not a step": (b'{"hello": 1}', signed(b'{"hello": 1}'), 400),
            "not json": (b"{", signed(b"{"), 400),
            "unknown handler": (step_body(handler="zz"), signed(step_body(handler="zz")), 404),
            "oversized": (b" " * (1 << 20) + body, signed(b" " * (1 << 20) + body), 413),
        }
        for name, (b, headers, want) in cases.items():
            with self.subTest(name):
                status, answer = self.handle(b, headers)
                self.assertEqual((status, answer["status"]), (want, want), answer)
        self.assertEqual(self.seen, [])

    def test_answers(self):
        cases = [
            (Await(signals=("approved",), timeout=datetime.timedelta(hours=24)), {"await": {"signals": ["approved"], "timeout": "24h0m"}}),
            (Await(), {"await": {}}),
            (Done(result=[1, 2]), {"done": {"result": [1, 2]}}),
            (Retry(error="busy"), {"retry": {"error": "busy"}}),
            ({"fail": {"error": {"code": 7}}}, {"fail": {"error": {"code": 7}}}),
        ]
        for answer, want in cases:
            with self.subTest(want=want):
                self.steps.register("a", lambda step, answer=answer: answer)
                self.assertEqual(self.handle(step_body(handler="a")), (200, want))
        self.steps.register("a", lambda step: gendurable.Accepted())
        self.assertEqual(self.handle(step_body(handler="a")), (202, None))
        for bad in ({"done": {}, "fail": {}}, "done", None):
            with self.subTest(bad=bad):
                self.steps.register("a", lambda step, bad=bad: bad)
                with self.assertLogs("gendurable", "ERROR"):
                    status, answer = self.handle(step_body(handler="a"))
                self.assertEqual(status, 500, answer)

    def test_an_exception_answers_500(self):
        def boom(step):
            raise KeyError("missing")
        self.steps.register("x", boom)
        with self.assertLogs("gendurable", "ERROR"):
            status, answer = self.handle(step_body(handler="x"))
        self.assertEqual(status, 500)
        self.assertIn("KeyError", answer["detail"])


# PROBLEMS lists every error Steps answers: the TypeScript SDK's serve answers the same
# status, type and title for the same case (sdk/typescript/test/serve.test.ts).
PROBLEMS = {
    "method-not-allowed": (405, "Step webhooks are POSTed"),
    "webhook-signature": (401, "Bad webhook signature"),
    "bad-step-request": (400, "Bad step request"),
    "too-large": (413, "Step request too large"),
    "unknown-handler": (404, "No step function for this handler"),
    "step-error": (500, "The step function failed"),
}


class ProblemsTest(unittest.TestCase):
    """Every error is an RFC 9457 problem: application/problem+json with type, title,
    status and detail, whichever adapter answers it."""

    def assertProblem(self, status: int, content_type: str, body: bytes, kind: str, detail: str):
        want_status, title = PROBLEMS[kind]
        self.assertEqual((status, content_type), (want_status, "application/problem+json"), body)
        problem = json.loads(body)
        self.assertEqual(sorted(problem), ["detail", "status", "title", "type"])
        self.assertEqual((problem["type"], problem["title"], problem["status"]),
                         ("urn:gendurable:problem:" + kind, title, want_status))
        self.assertRegex(problem["detail"], detail)

    def test_every_error_steps_answers_is_a_problem(self):
        steps = Steps(support.SECRET)
        steps.register("h", lambda step: Done())

        def boom(step):
            raise KeyError("missing")
        steps.register("boom", boom)
        steps.register("two", lambda step: {"next": {}, "done": {}})
        body = step_body()
        cases = [
            ("missing headers", body, {}, "webhook-signature", "missing webhook-id"),
            ("stale", body, signed(body, ts=int(time.time()) - 3600), "webhook-signature", "outside the tolerance"),
            ("wrong secret", body, signed(body, support.OTHER_SECRET), "webhook-signature", "no matching signature"),
            ("not json", b"{", signed(b"{"), "bad-step-request", "not JSON"),
            ("not a step", b'{"hello": 1}', signed(b'{"hello": 1}'), "bad-step-request", "job and lease"),
            ("oversized", b" " * (1 << 20) + body, signed(b" " * (1 << 20) + body), "too-large", "1 MiB"),
            ("unknown handler", step_body(handler="zz"), signed(step_body(handler="zz")), "unknown-handler", '"zz"'),
            ("exception", step_body(handler="boom"), signed(step_body(handler="boom")), "step-error", "KeyError"),
            ("two answers", step_body(handler="two"), signed(step_body(handler="two")), "step-error", "one of"),
        ]
        for name, b, headers, kind, detail in cases:
            with self.subTest(name):
                if kind == "step-error":  # logged on the gendurable logger
                    with self.assertLogs("gendurable", "ERROR"):
                        resp = steps.handle(headers, b)
                else:
                    resp = steps.handle(headers, b)
                self.assertProblem(resp.status, resp.headers.get("content-type", ""), resp.body, kind, detail)

    def test_each_adapter_answers_problems(self):
        steps = Steps(support.SECRET)
        body = step_body()
        started = []
        out = steps.wsgi({"REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()},
                         lambda status, headers: started.append((int(status.split()[0]), dict(headers))))
        self.assertProblem(started[0][0], started[0][1]["content-type"], b"".join(out), "method-not-allowed", "GET")
        environ = {"REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
        started.clear()
        out = steps.wsgi(environ, lambda status, headers: started.append((int(status.split()[0]), dict(headers))))
        self.assertProblem(started[0][0], started[0][1]["content-type"], b"".join(out), "webhook-signature", "missing")

        status, headers, out = support.call_asgi(steps.asgi, "GET", "/steps", {}, b"")
        self.assertProblem(status, headers["content-type"], out, "method-not-allowed", "GET")
        status, headers, out = support.call_asgi(steps.asgi, "POST", "/steps", {"webhook-id": "x"}, body)
        self.assertProblem(status, headers["content-type"], out, "webhook-signature", "missing")

        event = support.function_url_event("POST", "/", {"content-type": "application/json"}, body, False)
        result = steps.lambda_handler(event, None)
        self.assertProblem(result["statusCode"], result["headers"]["content-type"], result["body"].encode(),
                           "webhook-signature", "missing")
        event["requestContext"]["http"]["method"] = "GET"
        result = steps.lambda_handler(event, None)
        self.assertProblem(result["statusCode"], result["headers"]["content-type"], result["body"].encode(),
                           "method-not-allowed", "GET")


class AdaptersTest(unittest.TestCase):
    def setUp(self):
        self.steps = Steps([support.OTHER_SECRET, support.SECRET])

        @self.steps.handler("h")
        async def finish(step):
            return Done(result={"job": step.job.id})

    def test_asgi_is_taken_for_asgi3(self):
        # How uvicorn (and other servers) tell an ASGI 3 application from an ASGI 2 class:
        # a function that is a coroutine function. The bound method it was failed every
        # request under uvicorn; examples_test.go runs the real uvicorn.
        self.assertTrue(inspect.isfunction(self.steps.asgi))
        self.assertTrue(asyncio.iscoroutinefunction(self.steps.asgi))

    def test_wsgi(self):
        body = step_body()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/steps", "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
                   **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in signed(body).items()}}
        started = []
        out = self.steps.wsgi(environ, lambda status, headers: started.append((status, dict(headers))))
        self.assertEqual(started[0][0], "200 OK")
        self.assertEqual(started[0][1]["content-type"], "application/json")
        self.assertEqual(json.loads(b"".join(out)), {"done": {"result": {"job": 42}}})
        started.clear()
        self.steps.wsgi({"REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}, lambda s, h: started.append(s))
        self.assertEqual(started, ["405 Method Not Allowed"])

    def test_asgi(self):
        body = step_body()
        status, headers, out = support.call_asgi(self.steps.asgi, "POST", "/steps",
                                                 {"content-type": "application/json", **signed(body)}, body)
        self.assertEqual((status, headers["content-type"]), (200, "application/json"))
        self.assertEqual(json.loads(out), {"done": {"result": {"job": 42}}})
        status, _, out = support.call_asgi(self.steps.asgi, "POST", "/steps", {"webhook-id": "x"}, body)
        self.assertEqual(status, 401)
        status, _, _ = support.call_asgi(self.steps.asgi, "GET", "/steps", {}, b"")
        self.assertEqual(status, 405)

    def test_lambda_function_url_and_api_gateway_v2_events(self):
        body = step_body()
        for base64_body in (False, True):
            with self.subTest(base64_body=base64_body):
                event = support.function_url_event("POST", "/", {"content-type": "application/json", **signed(body)},
                                                   body, base64_body)
                result = self.steps.lambda_handler(event, None)
                self.assertEqual(result["statusCode"], 200, result)
                self.assertFalse(result["isBase64Encoded"])
                self.assertEqual(json.loads(result["body"]), {"done": {"result": {"job": 42}}})
        event = support.function_url_event("POST", "/", {"content-type": "application/json",
                                                         **signed(body, support.SECRET, ts=1000)}, body, False)
        self.assertEqual(self.steps.lambda_handler(event, None)["statusCode"], 401)
        event["requestContext"]["http"]["method"] = "GET"
        self.assertEqual(self.steps.lambda_handler(event, None)["statusCode"], 405)


class DurationTest(unittest.TestCase):
    def test_go_durations(self):
        td = datetime.timedelta
        for d, want in [(td(milliseconds=500), "500ms"), (td(seconds=30), "30s"), (td(hours=1, minutes=30), "1h30m"),
                        (td(microseconds=1500), "1500us"), (td(0), "0ms"), (td(seconds=61.25), "1m1.25s"), ("10s", "10s")]:
            with self.subTest(want=want):
                self.assertEqual(gendurable.go_duration(d), want)
        with self.assertRaises(ValueError):
            gendurable.go_duration(td(seconds=-1))


if __name__ == "__main__":
    unittest.main()
