// serve with a real OpenTelemetry API and SDK in the runtime (devDependencies here, never
// dependencies of the package: testdata/consumer/smoke.ts runs where neither is installed).
// The step function runs inside a span of the step whose parent is the request's
// traceparent, and that span is the active one while it runs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { context, trace, SpanKind, SpanStatusCode, type SpanContext } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { newSecret, serve, signatureHeaders } from "@gendurable/sdk";

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const body = (step: number) => JSON.stringify({
  job: { id: 42, queue: "default", handler: "report", key: null, step, attempt: 2, max_attempts: 5, input: {}, state: null,
    created_at: "2026-01-01T00:00:00Z" },
  signals: [],
  lease: { token: "0b5e4c3a-1111-4222-8333-944445555666", expires_at: "2026-01-01T00:00:30Z" },
});
const now = () => Math.floor(Date.now() / 1000);
const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
const parentId = "00f067aa0ba902b7";
const traceparent = `00-${traceId}-${parentId}-01`;

test("with @opentelemetry/api present, a step runs in a span whose parent is the request's traceparent", async () => {
  exporter.reset();
  const secret = newSecret();
  let active: SpanContext | undefined;
  const handler = serve({
    report: async (step) => {
      await new Promise((r) => setTimeout(r, 1)); // the span stays active across an await
      active = trace.getActiveSpan()?.spanContext();
      if (step.job.step === 1) throw new Error("mailer down");
      return { done: { result: "ok" } };
    },
  }, { secret });
  const send = async (step: number, id: string) => {
    const text = body(step);
    const headers = { ...(await signatureHeaders(secret, id, now(), text)), traceparent, tracestate: "vendor=abc" };
    return handler(new Request("http://hook/steps", { method: "POST", headers, body: text }));
  };

  assert.equal((await send(0, "msg_ok")).status, 200);
  const [span] = exporter.getFinishedSpans();
  assert.ok(span, "no span was exported");
  assert.equal(span.name, "step report");
  assert.equal(span.kind, SpanKind.SERVER);
  assert.equal(span.spanContext().traceId, traceId);
  assert.equal(span.parentSpanContext?.spanId, parentId);
  assert.equal(span.parentSpanContext?.isRemote, true);
  assert.equal(span.parentSpanContext?.traceState?.get("vendor"), "abc");
  assert.deepEqual(span.attributes, { "gendurable.job.id": 42, "gendurable.handler": "report", "gendurable.step": 0, "gendurable.attempt": 2 });
  assert.equal(active?.spanId, span.spanContext().spanId, "the step's span is not the active one in the step function");
  assert.equal(active?.traceId, traceId);

  // A step that throws: its span records the error.
  exporter.reset();
  assert.equal((await send(1, "msg_fail")).status, 500);
  const [failed] = exporter.getFinishedSpans();
  assert.equal(failed?.status.code, SpanStatusCode.ERROR);
  assert.equal(failed?.status.message, "mailer down");
  assert.equal(failed?.events[0]?.name, "exception");
});

test("with @opentelemetry/api present, a step without a valid traceparent makes no span", async () => {
  exporter.reset();
  const secret = newSecret();
  let ran = 0;
  const handler = serve(() => { ran++; return { done: { result: "ok" } }; }, { secret });
  for (const [id, extra] of [["msg_none", {}], ["msg_junk", { traceparent: "junk" }],
    ["msg_zero", { traceparent: `00-${"0".repeat(32)}-${parentId}-01` }]] as const) {
    const text = body(0);
    const headers = { ...(await signatureHeaders(secret, id, now(), text)), ...extra };
    assert.equal((await handler(new Request("http://hook/steps", { method: "POST", headers, body: text }))).status, 200);
  }
  assert.equal(ran, 3);
  assert.deepEqual(exporter.getFinishedSpans(), []);
});
