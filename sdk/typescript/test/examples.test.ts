// The examples, each driven in its runtime's request/response shape against the real
// server: a Worker's fetch(request, env), a Next.js route's POST(request), and a Lambda
// handler given function-URL and API Gateway v2 events.
import assert from "node:assert/strict";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, test } from "node:test";
import { newSecret } from "@gendurable/sdk";
import { nodeListener, toRequest } from "@gendurable/sdk/node";
import type { LambdaHttpEvent } from "@gendurable/sdk/lambda";
import { client, listen, parkedOnSignals, register, unique, type Listening } from "./helpers.js";

const closers: Listening[] = [];
after(() => Promise.all(closers.map((c) => c.close())));

async function serveWith(listener: (req: IncomingMessage, res: ServerResponse) => unknown): Promise<string> {
  const l = await listen(listener);
  closers.push(l);
  return l.url;
}

test("examples/cloudflare-worker: the quickstart greeter through the Worker's fetch(request, env)", async () => {
  const { default: worker } = await import("../../../examples/cloudflare-worker/src/index.js");
  const secret = newSecret();
  const env = { GENDURABLE_SECRET: secret };
  // The Workers runtime hands fetch a Request and sends back its Response.
  const url = await serveWith(nodeListener((request) => worker.fetch(request, env)));
  await register("greeter", url, secret);
  const job = await client.insertJob({ handler: "greeter", input: { name: "Ada" } });
  const done = await client.waitForJob(job.id);
  assert.equal(done.status, "done");
  assert.deepEqual((done.result as { greeting: string }).greeting, "hello, Ada");
  assert.equal(done.step, 3);
});

test("examples/nextjs-route: the approval flow through the route's POST(request)", async () => {
  const secret = newSecret();
  process.env.GENDURABLE_SECRET = secret;
  const route = await import("../../../examples/nextjs-route/app/api/steps/route.js");
  const url = await serveWith(nodeListener((request) => route.POST(request)));
  await register("expense", `${url}/api/steps`, secret);
  await register("notify", `${url}/api/steps`, secret);
  const key = unique("expense");
  const job = await client.insertJob({ handler: "expense", key, input: { amount: 420, approver: "ana@example.com" } });
  await client.waitForJob(job.id, { until: parkedOnSignals });
  assert.equal((await client.sendSignalByKey(key, "approved", { by: "ana" })).woke, true);
  const done = await client.waitForJob(job.id);
  assert.deepEqual(done.result, { decision: "approved", details: { by: "ana" } });
  assert.deepEqual((await client.listSteps(job.id)).map((s) => s.outcome), ["spawn", "await", "done"]);
});

// lambdaGateway plays a function URL (or an HTTP API): each request becomes a payload
// format 2.0 event for the handler, and its result becomes the response.
function lambdaGateway(
  handler: (event: LambdaHttpEvent) => Promise<{ statusCode: number; headers: Record<string, string>; body: string; isBase64Encoded: boolean }>,
  shape: "function-url" | "api-gateway-v2",
) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const request = await toRequest(req);
    const url = new URL(request.url);
    const bytes = new Uint8Array(await request.arrayBuffer());
    const headers: Record<string, string> = {};
    request.headers.forEach((v, k) => (headers[k] = v));
    const event: LambdaHttpEvent = {
      version: "2.0",
      routeKey: shape === "function-url" ? "$default" : "POST /steps",
      rawPath: url.pathname,
      rawQueryString: url.search.slice(1),
      headers,
      // Function URLs base64 binary-looking bodies; send one shape of each.
      body: shape === "function-url" ? Buffer.from(bytes).toString("base64") : Buffer.from(bytes).toString("utf8"),
      isBase64Encoded: shape === "function-url",
      requestContext: { domainName: url.host, http: { method: request.method, path: url.pathname } },
    };
    const result = await handler(event);
    res.statusCode = result.statusCode;
    for (const [k, v] of Object.entries(result.headers)) res.setHeader(k, v);
    res.end(result.isBase64Encoded ? Buffer.from(result.body, "base64") : result.body);
  };
}

test("examples/lambda: the welcome email through function-URL and API Gateway v2 events", async () => {
  const secret = newSecret();
  process.env.GENDURABLE_SECRET = secret;
  const { handler } = await import("../../../examples/lambda/src/index.js");
  for (const shape of ["function-url", "api-gateway-v2"] as const) {
    const url = await serveWith(lambdaGateway(handler, shape));
    await register("welcome", `${url}/steps`, secret);
    const job = await client.insertJob({ handler: "welcome", input: { email: `${shape}@example.com` } });
    const done = await client.waitForJob(job.id);
    assert.deepEqual(done.result, { sent: true, to: `${shape}@example.com`, subject: `Welcome, ${shape}@example.com` }, shape);
  }
});
