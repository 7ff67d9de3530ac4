// serve on its own, no server needed: the signing secret is checked when the handler is
// built.
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
