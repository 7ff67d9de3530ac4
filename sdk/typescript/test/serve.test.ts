// serve on its own, no server needed: the signing secret is checked when the handler is
// built, and every error is answered as an RFC 9457 problem document, in the shape the
// Python SDK answers too (sdk/python/tests/test_steps.py, ProblemsTest).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";
import { newSecret, serve, signatureHeaders, type StepFunction } from "@gendurable/sdk";

const body = JSON.stringify({
  job: { id: 1, queue: "default", handler: "h", key: null, step: 0, attempt: 1, max_attempts: 5, input: {}, state: null, created_at: "2026-01-01T00:00:00Z" },
  signals: [],
  lease: { token: "0b5e4c3a-1111-4222-8333-944445555666", expires_at: "2026-01-01T00:00:30Z" },
});
const done: StepFunction = () => ({ done: { result: "ok" } });
const now = () => Math.floor(Date.now() / 1000);

function post(handler: (r: Request) => Promise<Response>, headers: Record<string, string>, text: string = body): Promise<Response> {
  return handler(new Request("http://hook/steps", { method: "POST", headers, body: text }));
}

test("serve refuses a malformed signing secret when it is built, naming the problem", () => {
  const cases: [string, unknown, RegExp][] = [
    ["not base64", "whsec_!!!", /^serve: the signing secret is not whsec_ followed by base64 \(it has characters outside/],
    ["URL-safe alphabet", "whsec_ab-_", /characters outside/],
    ["cut short", "whsec_YWJjZ", /length/],
    ["misplaced padding", "whsec_YQ=a", /characters outside|length/],
    ["too much padding", "whsec_YQ===", /length/],
    ["a trailing newline", newSecret() + "\n", /whitespace/],
    ["an empty key", "whsec_", /empty key/],
    ["empty", "", /the signing secret is empty/],
    ["not a string", 42, /must be a string \(got number\)/],
    ["missing (an unset environment variable)", undefined, /^serve: the signing secret is missing$/],
    ["an empty list", [], /no signing secret/],
    ["one bad secret in a list", [newSecret(), "whsec_!!!"], /^serve: secret\[1\] is not whsec_ followed by base64/],
  ];
  for (const [name, secret, message] of cases) {
    assert.throws(() => serve(done, { secret } as never), { name: "TypeError", message }, name);
  }
});

test("serve accepts every secret Standard Webhooks accepts, and verifies what it signs", async () => {
  const secrets = [
    newSecret(),
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // the specification's test vector
    "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // the prefix is optional
    "whsec_YQ==", // a one-byte key: no minimum length
    "whsec_YWI=",
  ];
  for (const secret of secrets) {
    const handler = serve(done, { secret });
    const at = now();
    const signature = new Webhook(secret).sign("msg_1", new Date(at * 1000), body);
    const res = await post(handler, { "webhook-id": "msg_1", "webhook-timestamp": String(at), "webhook-signature": signature });
    assert.equal(res.status, 200, secret);
  }
  // atob accepted unpadded base64 before secrets were checked; it stays accepted.
  const unpadded = serve(done, { secret: "whsec_YWJjZA" });
  assert.equal((await post(unpadded, await signatureHeaders("whsec_YWJjZA==", "msg_1", now(), body))).status, 200);
});

// problems lists every error serve answers: what the Python SDK's Steps answers for the
// same case has the same status, type and title.
const problems = {
  "method-not-allowed": { status: 405, title: "Step webhooks are POSTed" },
  "webhook-signature": { status: 401, title: "Bad webhook signature" },
  "bad-step-request": { status: 400, title: "Bad step request" },
  "unknown-handler": { status: 404, title: "No step function for this handler" },
  "step-error": { status: 500, title: "The step function failed" },
} as const;

async function assertProblem(res: Response, type: keyof typeof problems, detail: RegExp): Promise<void> {
  const want = problems[type];
  assert.equal(res.status, want.status);
  assert.equal(res.headers.get("content-type"), "application/problem+json");
  const problem = (await res.json()) as Record<string, unknown>;
  assert.deepEqual(Object.keys(problem).sort(), ["detail", "status", "title", "type"]);
  assert.deepEqual(
    { type: problem.type, title: problem.title, status: problem.status },
    { type: `urn:gendurable:problem:${type}`, title: want.title, status: want.status },
  );
  assert.match(String(problem.detail), detail);
}

test("every error serve answers is a problem document with type, title, status and detail", async () => {
  const secret = newSecret();
  const handler = serve({ h: done }, { secret });
  const signed = (text: string, at = now()) => signatureHeaders(secret, "msg_1", at, text);

  await assertProblem(await handler(new Request("http://hook/steps")), "method-not-allowed", /GET/);
  await assertProblem(await post(handler, {}), "webhook-signature", /missing webhook-id/);
  await assertProblem(await post(handler, await signed(body, now() - 3600)), "webhook-signature", /outside the tolerance/);
  await assertProblem(await post(handler, await signatureHeaders(newSecret(), "msg_1", now(), body)), "webhook-signature", /no matching signature/);
  await assertProblem(await post(handler, await signed("{"), "{"), "bad-step-request", /not JSON/);
  await assertProblem(await post(handler, await signed('{"hello":1}'), '{"hello":1}'), "bad-step-request", /job and lease/);
  const other = body.replace('"handler":"h"', '"handler":"zz"');
  await assertProblem(await post(handler, await signed(other), other), "unknown-handler", /"zz"/);

  const headers = await signed(body);
  const throwing = serve(() => { throw new Error("mailer down"); }, { secret });
  await assertProblem(await post(throwing, headers), "step-error", /^mailer down$/);
  const twoAnswers = serve(() => ({ next: {}, done: {} }), { secret });
  await assertProblem(await post(twoAnswers, headers), "step-error", /exactly one of/);
});

test("serve hands the step function the request's trace context, and none when it has none", async () => {
  const secret = newSecret();
  const seen: (string | undefined)[][] = [];
  const handler = serve((_step, ctx) => {
    seen.push([ctx.traceparent, ctx.tracestate]);
    return { done: { result: "ok" } };
  }, { secret });
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const signed = await signatureHeaders(secret, "msg_1", now(), body);
  assert.equal((await post(handler, { ...signed, traceparent, tracestate: "vendor=abc" })).status, 200);
  assert.equal((await post(handler, await signatureHeaders(secret, "msg_2", now(), body))).status, 200);
  // a malformed traceparent is handed on as it came; no span is made for it
  assert.equal((await post(handler, { ...(await signatureHeaders(secret, "msg_3", now(), body)), traceparent: "junk" })).status, 200);
  assert.deepEqual(seen, [[traceparent, "vendor=abc"], [undefined, undefined], ["junk", undefined]]);
});
