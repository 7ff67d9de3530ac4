// Signature checks of serve: bad signatures and stale timestamps are refused, rotations on
// either side accepted; and against the real server, a handler whose secret is rotated.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { newSecret, serve, signatureHeaders, type StepFunction } from "@gendurable/sdk";
import { nodeListener } from "@gendurable/sdk/node";
import { client, listen, unique, type Listening } from "./helpers.js";

const body = JSON.stringify({
  job: { id: 1, queue: "default", handler: "h", key: null, step: 0, attempt: 1, max_attempts: 5, input: {}, state: null, created_at: "2026-01-01T00:00:00Z" },
  signals: [],
  lease: { token: "0b5e4c3a-1111-4222-8333-944445555666", expires_at: "2026-01-01T00:00:30Z" },
});
const done: StepFunction = () => ({ done: { result: "ok" } });
const now = () => Math.floor(Date.now() / 1000);

async function post(handler: (r: Request) => Promise<Response>, headers: Record<string, string>, text = body): Promise<Response> {
  return handler(new Request("http://hook/steps", { method: "POST", headers, body: text }));
}

test("serve answers a correctly signed step", async () => {
  const secret = newSecret();
  const res = await post(serve(done, { secret }), await signatureHeaders(secret, "msg_1", now(), body));
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { done: { result: "ok" } });
});

test("serve refuses a signature made with another secret", async () => {
  const res = await post(serve(done, { secret: newSecret() }), await signatureHeaders(newSecret(), "msg_1", now(), body));
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("content-type"), "application/problem+json");
  const problem = await res.json();
  assert.equal(problem.type, "urn:gendurable:problem:webhook-signature");
  assert.match(problem.detail, /no matching signature/);
});

test("serve refuses a body changed after signing", async () => {
  const secret = newSecret();
  const headers = await signatureHeaders(secret, "msg_1", now(), body);
  assert.equal((await post(serve(done, { secret }), headers, body.replace('"attempt":1', '"attempt":2'))).status, 401);
});

test("serve refuses a timestamp outside the tolerance, either way", async () => {
  const secret = newSecret();
  const handler = serve(done, { secret });
  for (const at of [now() - 360, now() + 360]) {
    const res = await post(handler, await signatureHeaders(secret, "msg_1", at, body));
    assert.equal(res.status, 401);
    assert.match((await res.json()).detail, /outside the tolerance/);
  }
  const lenient = serve(done, { secret, toleranceSeconds: 3600 });
  assert.equal((await post(lenient, await signatureHeaders(secret, "msg_1", now() - 600, body))).status, 200);
});

test("serve refuses missing headers and non-POST requests", async () => {
  const handler = serve(done, { secret: newSecret() });
  assert.equal((await post(handler, { "content-type": "application/json" })).status, 401);
  assert.equal((await handler(new Request("http://hook/steps"))).status, 405);
});

test("rotation: several signatures, one matching, and several secrets on the receiver", async () => {
  const [oldSecret, newer] = [newSecret(), newSecret()];
  const bothSigned = await signatureHeaders([newer, oldSecret], "msg_1", now(), body);
  assert.equal(bothSigned["webhook-signature"]!.split(" ").length, 2);
  assert.equal((await post(serve(done, { secret: oldSecret }), bothSigned)).status, 200);
  assert.equal((await post(serve(done, { secret: newer }), bothSigned)).status, 200);
  const receiver = serve(done, { secret: [newer, oldSecret] });
  assert.equal((await post(receiver, await signatureHeaders(oldSecret, "msg_2", now(), body))).status, 200);
  assert.equal((await post(receiver, await signatureHeaders(newSecret(), "msg_3", now(), body))).status, 401);
});

test("serve answers 404 for a handler without a function, 500 when the function throws", async () => {
  const secret = newSecret();
  const headers = await signatureHeaders(secret, "msg_1", now(), body);
  const missing = await post(serve({ other: done }, { secret }), headers);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).type, "urn:gendurable:problem:unknown-handler");
  const seen: unknown[] = [];
  const throwing = serve(() => { throw new Error("mailer down"); }, { secret, onError: (e) => seen.push(e) });
  const failed = await post(throwing, headers);
  assert.equal(failed.status, 500);
  assert.equal((await failed.json()).detail, "mailer down");
  assert.equal(seen.length, 1);
  const twoAnswers = await post(serve(() => ({ next: {}, done: {} }), { secret }), headers);
  assert.equal(twoAnswers.status, 500);
});

let hook: Listening;
const hookSecret = newSecret();
const rotated = unique("rotated");
before(async () => {
  hook = await listen(nodeListener(serve({ [rotated]: done }, { secret: hookSecret })));
});
after(() => hook.close());

test("the real server: a wrong secret fails the attempt with 401, a rotation to the receiver's secret passes", async () => {
  await client.putHandler(rotated, { url: `${hook.url}/steps`, secret: newSecret(), backoff_base: "10ms", backoff_max: "50ms" });
  const job = await client.insertJob({ handler: rotated, max_attempts: 50 });
  // The first attempt is refused by the handler: the server records the 401.
  for (const deadline = Date.now() + 20_000; ; ) {
    const steps = await client.listSteps(job.id);
    if (steps.some((s) => s.http_status === 401)) break;
    assert.ok(Date.now() < deadline, "no attempt was refused with 401");
    await new Promise((r) => setTimeout(r, 50));
  }
  // Rotate to the secret the handler knows; during the overlap the server signs with both.
  const after = await client.rotateHandlerSecret(rotated, { secret: hookSecret, overlap: "1h" });
  assert.equal(after.secret, hookSecret);
  assert.ok(after.previous_secret_expires_at);
  await client.retryJob(job.id).catch(() => undefined); // in case the attempts ran out
  const finished = await client.waitForJob(job.id, { timeoutMs: 60_000 });
  assert.equal(finished.status, "done");
  assert.equal(finished.result, "ok");
});
