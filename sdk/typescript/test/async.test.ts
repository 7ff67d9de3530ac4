// An asynchronous step: the step function answers accepted (202), then heartbeats and
// completes the step through the lease helpers, fenced by the lease token.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { accepted, newSecret, ProblemError, serve, type Lease, type StepFunction } from "@gendurable/sdk";
import { nodeListener } from "@gendurable/sdk/node";
import { client, listen, register, unique, type Listening } from "./helpers.js";

const name = unique("async");
const leases: Lease[] = [];
let leaseArrived: () => void;
const arrived = new Promise<void>((resolve) => (leaseArrived = resolve));

const slow: StepFunction = (_step, ctx) => {
  leases.push(ctx.lease);
  leaseArrived();
  return accepted;
};

let hook: Listening;
before(async () => {
  const secret = newSecret();
  hook = await listen(nodeListener(serve({ [name]: slow }, { secret, client })));
  await register(name, `${hook.url}/steps`, secret);
});
after(() => hook.close());

test("accepted, heartbeat, complete with the lease token", async () => {
  const job = await client.insertJob({ handler: name, input: { size: 3 } });
  await arrived;
  const lease = leases[0]!;
  assert.equal((await client.getJob(job.id)).status, "executing");
  const extended = await lease.heartbeat();
  assert.ok(Date.parse(extended.lease_expires_at) >= Date.parse(lease.expiresAt));
  const applied = await lease.complete({ done: { result: { resized: true } } });
  assert.equal(applied.status, "done");
  assert.deepEqual((await client.getJob(job.id)).result, { resized: true });
  // The token is spent: a second outcome is fenced off.
  await assert.rejects(lease.complete({ done: {} }), (e) => e instanceof ProblemError && e.status === 409);
});
