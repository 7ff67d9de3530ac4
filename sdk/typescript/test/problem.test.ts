// Bad input answers RFC 9457 problems, which the client throws as ProblemError.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ProblemError } from "@gendurable/sdk";
import { client, idleHandler, unique } from "./helpers.js";

async function problemOf(call: Promise<unknown>): Promise<ProblemError> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof ProblemError, `not a ProblemError: ${error}`);
    return error;
  }
  assert.fail("the call succeeded");
}

test("an out-of-range priority is a 422 naming the field", async () => {
  const p = await problemOf(client.insertJob({ handler: "anything", priority: 42 }));
  assert.equal(p.status, 422);
  assert.equal(p.type, "urn:gendurable:problem:validation");
  assert.ok(p.errors.some((e) => e.field.endsWith("priority")), JSON.stringify(p.errors));
  assert.match(p.message, /./);
});

test("an unregistered handler is a 422 naming the handler", async () => {
  const p = await problemOf(client.insertJob({ handler: unique("unregistered") }));
  assert.equal(p.status, 422);
  assert.deepEqual(p.errors.map((e) => e.field), ["handler"]);
});

test("a batch with one bad job names its index", async () => {
  const p = await problemOf(client.insertJobs([{ handler: "ok" }, { handler: "bad name!" }]));
  assert.equal(p.status, 422);
  assert.ok(p.errors.some((e) => e.field.startsWith("jobs/1")), JSON.stringify(p.errors));
});

test("a missing job, a missing key and a bad lease token", async () => {
  assert.equal((await problemOf(client.getJob(9_000_000_000))).status, 404);
  assert.equal((await problemOf(client.sendSignalByKey(unique("nobody"), "go"))).status, 404);
  const queue = unique("paused");
  await client.putQueue(queue, { paused: true });
  const job = await client.insertJob({ handler: await idleHandler(), queue });
  const lost = await problemOf(client.heartbeat(job.id, "0b5e4c3a-1111-4222-8333-944445555666"));
  assert.equal(lost.status, 409);
  assert.equal(lost.type, "urn:gendurable:problem:lease-lost");
  await client.cancelJob(job.id);
  const finished = await problemOf(client.sendSignal(job.id, "late"));
  assert.equal(finished.status, 409);
});

test("an outcome answer with an unknown field is refused by the schema", async () => {
  const queue = unique("paused");
  await client.putQueue(queue, { paused: true });
  const job = await client.insertJob({ handler: await idleHandler(), queue });
  const p = await problemOf(
    // A cast past the types, as a JavaScript caller could send it.
    client.completeStep(job.id, "0b5e4c3a-1111-4222-8333-944445555666", { done: { reslt: 1 } } as never),
  );
  assert.equal(p.status, 422);
  assert.ok(p.errors.some((e) => e.field.includes("done")), JSON.stringify(p.errors));
});
