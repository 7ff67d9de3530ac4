// A cross-check with the official standardwebhooks package: it verifies what the server
// sends and what the SDK signs, and the SDK verifies what it signs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Webhook } from "standardwebhooks";
import { newSecret, signatureHeaders, verify } from "@gendurable/sdk";
import { client, listen, register, unique, type Listening } from "./helpers.js";

interface Captured {
  headers: Record<string, string>;
  body: string;
}

const name = unique("captured");
const secret = newSecret();
const captured: Captured[] = [];
let hook: Listening;

before(async () => {
  // A plain recorder: it answers done without verifying, so the checks below see exactly
  // what the server sent.
  hook = await listen(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers[k] = v;
    captured.push({ headers, body });
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ done: { result: { echoed: JSON.parse(body).job.input } } }));
  });
  await register(name, `${hook.url}/steps`, secret);
});
after(() => hook.close());

test("standardwebhooks verifies the server's request, and so does the SDK", async () => {
  const job = await client.insertJob({ handler: name, input: { text: "héllo <&> \u2028" } });
  assert.equal((await client.waitForJob(job.id)).status, "done");
  const request = captured.find((c) => JSON.parse(c.body).job.id === job.id)!;
  assert.ok(request);
  const payload = new Webhook(secret).verify(request.body, request.headers) as { job: { id: number; input: unknown } };
  assert.equal(payload.job.id, job.id);
  assert.deepEqual(payload.job.input, { text: "héllo <&> \u2028" });
  assert.equal(await verify(secret, request.headers, request.body), request.headers["webhook-id"]);
  await assert.rejects(verify(newSecret(), request.headers, request.body), { name: "SignatureError" });
});

test("standardwebhooks verifies the SDK's signatures, the SDK verifies standardwebhooks'", async () => {
  const body = JSON.stringify({ hello: "wörld" });
  const at = Math.floor(Date.now() / 1000);
  const headers = await signatureHeaders(secret, "msg_2xYz", at, body);
  assert.deepEqual(new Webhook(secret).verify(body, headers), { hello: "wörld" });

  const wh = new Webhook(secret);
  const signature = wh.sign("msg_3abc", new Date(at * 1000), body);
  const theirs = { "webhook-id": "msg_3abc", "webhook-timestamp": String(at), "webhook-signature": signature };
  assert.equal(await verify(secret, theirs, body), "msg_3abc");
  // Both refuse the other's signature once the body changes.
  assert.throws(() => wh.verify(body + " ", headers));
  await assert.rejects(verify(secret, theirs, body + " "));
});
