// The approval flow of docs/protocol.md end to end: spawn a child, await a signal, done.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { serve, type StepFunction } from "@gendurable/sdk";
import { nodeListener } from "@gendurable/sdk/node";
import { client, listen, parkedOnSignals, register, unique, type Listening } from "./helpers.js";

const expenseName = unique("expense");
const notifyName = unique("notify");
const notified: unknown[] = [];
const secret = "whsec_" + btoa("approval-flow-test-secret-32-bytes!");

const waitForDecision = { await: { signals: ["approved", "rejected"], timeout: "72h" } };

const expense: StepFunction<{ amount: number; approver: string }> = (step) => {
  if (step.job.step === 0) {
    return { spawn: { children: [{ handler: notifyName, input: { to: step.job.input.approver } }], state: { asked: true } } };
  }
  if (step.wake === "children") {
    assert.equal(step.children?.length, 1);
    assert.equal(step.children?.[0]?.status, "done");
    return waitForDecision;
  }
  const decision = step.signals.find((s) => s.name === "approved" || s.name === "rejected");
  if (!decision) return waitForDecision;
  return { done: { result: { decision: decision.name, details: decision.payload, state: step.job.state } } };
};

const notify: StepFunction<{ to: string }> = (step) => {
  notified.push(step.job.input);
  return { done: { result: { sent: true } } };
};

let hook: Listening;
before(async () => {
  hook = await listen(nodeListener(serve({ [expenseName]: expense, [notifyName]: notify }, { secret })));
  await register(expenseName, `${hook.url}/steps`, secret);
  await register(notifyName, `${hook.url}/steps`, secret);
});
after(() => hook.close());

test("approval: spawn, await a signal by key, done", async () => {
  const key = unique("expense");
  const job = await client.insertJob({ handler: expenseName, key, input: { amount: 420, approver: "ana@example.com" } });
  const parked = await client.waitForJob(job.id, { until: parkedOnSignals });
  assert.deepEqual(parked.awaiting, ["approved", "rejected"]);
  assert.deepEqual(notified.at(-1), { to: "ana@example.com" });
  const children = await client.listChildren(job.id);
  assert.equal(children.jobs.length, 1);
  assert.equal(children.jobs[0]!.status, "done");

  const sent = await client.sendSignalByKey(key, "approved", { by: "ana" });
  assert.equal(sent.job_id, job.id);
  assert.equal(sent.woke, true);
  const done = await client.waitForJob(job.id);
  assert.equal(done.status, "done");
  assert.deepEqual(done.result, { decision: "approved", details: { by: "ana" }, state: { asked: true } });
  const steps = await client.listSteps(job.id);
  assert.deepEqual(steps.map((s) => s.outcome), ["spawn", "await", "done"]);
  const inbox = await client.listSignals(job.id);
  assert.deepEqual(inbox.map((s) => [s.name, s.consumed]), [["approved", true]]);
});

test("approval: a signal by id that the await does not name leaves it parked", async () => {
  const job = await client.insertJob({ handler: expenseName, input: { amount: 7, approver: "bo@example.com" } });
  await client.waitForJob(job.id, { until: parkedOnSignals });
  const other = await client.sendSignal(job.id, "comment", { text: "why?" });
  assert.equal(other.woke, false);
  const rejected = await client.sendSignal(job.id, "rejected", { by: "bo" });
  assert.equal(rejected.woke, true);
  const done = await client.waitForJob(job.id);
  assert.deepEqual((done.result as { decision: string }).decision, "rejected");
});
