// What a project that installed @gendurable/sdk does first, compiled by tsc against the
// installed package's types and run by node: import each entry point, and answer a
// signed step with serve (no server needed). install_test.go runs it.
import { Client, newSecret, serve, signatureHeaders, type StepFunction } from "@gendurable/sdk";
import { lambdaHandler } from "@gendurable/sdk/lambda";
import { nodeListener } from "@gendurable/sdk/node";

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`smoke: ${what}`);
}

// The README's typed greeter, as written there.
const greeter: StepFunction<{ name: string }, { steps: number }> = (step) =>
  step.job.step < 2 ? { next: { state: { steps: step.job.step + 1 } } } : { done: { result: { greeting: `hello, ${step.job.input.name}` } } };

const secret = newSecret();
const handler = serve({ greeter }, { secret });
const body = JSON.stringify({
  job: { id: 1, queue: "default", handler: "greeter", key: null, step: 2, attempt: 1, max_attempts: 5,
    input: { name: "Ada" }, state: null, created_at: "2026-01-01T00:00:00Z" },
  signals: [],
  lease: { token: "0b5e4c3a-1111-4222-8333-944445555666", expires_at: "2026-01-01T00:00:30Z" },
});
const headers = await signatureHeaders(secret, "msg_smoke", Math.floor(Date.now() / 1000), body);
const response = await handler(new Request("http://hook/steps", { method: "POST", headers, body }));
const answer = await response.text();
check(response.status === 200, `serve answered ${response.status}: ${answer}`);
check(answer === JSON.stringify({ done: { result: { greeting: "hello, Ada" } } }), `serve answered ${answer}`);

// @opentelemetry/api is no dependency of the SDK: it is not installed here, and a step
// whose request carries a traceparent still runs (no span) and is handed it.
const otelApi: string = "@opentelemetry/api";
const hasOtel = await import(otelApi).then(() => true, () => false);
check(!hasOtel, "@opentelemetry/api is installed beside the SDK: the path without it is not tested");
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
let seen: string | undefined;
const traced = serve((_step, ctx) => { seen = ctx.traceparent; return { done: { result: "traced" } }; }, { secret });
const tracedHeaders = { ...(await signatureHeaders(secret, "msg_traced", Math.floor(Date.now() / 1000), body)), traceparent };
const tracedResponse = await traced(new Request("http://hook/steps", { method: "POST", headers: tracedHeaders, body }));
check(tracedResponse.status === 200 && seen === traceparent, `a traced step without OpenTelemetry: ${tracedResponse.status}, ${seen}`);

check(typeof lambdaHandler(handler) === "function", "lambdaHandler");
check(typeof nodeListener(handler) === "function", "nodeListener");
check(new Client({ baseUrl: "http://127.0.0.1:9" }) instanceof Client, "Client");
console.log("smoke: ok");
