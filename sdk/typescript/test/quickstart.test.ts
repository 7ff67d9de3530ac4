// The README quickstart with the SDK on both sides: the client inserts, the SDK's serve
// (behind Node's http) runs the steps the real server POSTs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { serve, type StepFunction } from "@gendurable/sdk";
import { nodeListener } from "@gendurable/sdk/node";
import { client, listen, register, unique, type Listening } from "./helpers.js";

const greeter: StepFunction<{ name?: string }, { count: number }> = (step) => {
  const count = (step.job.state?.count ?? 0) + 1;
  if (count < 3) return { next: { state: { count } } };
  return { done: { result: { greeting: `hello, ${step.job.input.name ?? "world"}`, steps: count } } };
};

let hook: Listening;
const greeterName = unique("greeter");
const secret = "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0"; // the README's demo secret

before(async () => {
  hook = await listen(nodeListener(serve({ [greeterName]: greeter }, { secret })));
  await register(greeterName, `${hook.url}/steps`, secret);
});
after(() => hook.close());

test("the quickstart: a job runs three steps to done", async () => {
  const job = await client.insertJob({ handler: greeterName, input: { name: "Ada" } });
  assert.equal(job.deduplicated, false);
  assert.equal(job.priority, 5, "the spec's default priority is applied");
  const done = await client.waitForJob(job.id);
  assert.equal(done.status, "done");
  assert.equal(done.step, 3);
  assert.deepEqual(done.result, { greeting: "hello, Ada", steps: 3 });
  const steps = await client.listSteps(job.id);
  assert.deepEqual(steps.map((s) => s.outcome), ["next", "next", "done"]);
  const page = await client.listJobs({ handler: greeterName, status: "done" });
  assert.ok(page.jobs.some((j) => j.id === job.id));
});

test("a batch inserts in request order and a key deduplicates", async () => {
  const key = unique("greet");
  // A paused queue keeps the keyed job live while the second insert of its key is made
  // (with the queue running it could be done by then, and the key free again).
  const queue = unique("batch");
  await client.putQueue(queue, { paused: true });
  const jobs = await client.insertJobs([
    { handler: greeterName, queue, input: { name: "one" }, key },
    { handler: greeterName, queue, input: { name: "two" }, priority: 0 },
  ]);
  assert.equal(jobs.length, 2);
  assert.deepEqual(jobs.map((j) => j.input), [{ name: "one" }, { name: "two" }]);
  const again = await client.insertJob({ handler: greeterName, queue, key });
  assert.equal(again.deduplicated, true);
  assert.equal(again.id, jobs[0]!.id);
  await client.putQueue(queue, { paused: false });
  for (const j of jobs) assert.equal((await client.waitForJob(j.id)).status, "done");
  const byKey = await client.listJobs({ key });
  assert.ok(byKey.jobs.some((j) => j.id === jobs[0]!.id));
});

test("handlers and queues: register, read, list, pause, cancel and retry", async () => {
  const handler = await client.getHandler(greeterName);
  assert.equal(handler.url, `${hook.url}/steps`);
  assert.ok((await client.listHandlers()).some((h) => h.name === greeterName));

  const queue = unique("paused");
  assert.equal((await client.putQueue(queue, { paused: true })).paused, true);
  const job = await client.insertJob({ handler: greeterName, queue, input: { name: "Bo" } });
  assert.equal((await client.getQueue(queue)).counts.runnable, 1);
  assert.ok((await client.listQueues()).some((q) => q.name === queue));

  assert.equal((await client.cancelJob(job.id)).status, "cancelled");
  assert.equal((await client.retryJob(job.id)).status, "runnable");
  await client.putQueue(queue, { paused: false });
  const done = await client.waitForJob(job.id);
  assert.deepEqual(done.result, { greeting: "hello, Bo", steps: 3 });

  const spare = unique("spare");
  await register(spare, `${hook.url}/steps`);
  await client.deleteHandler(spare);
  await assert.rejects(client.getHandler(spare), { name: "ProblemError", status: 404 });
});
