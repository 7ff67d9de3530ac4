import { problemResponse } from "./problem.js";
import { SignatureError, secretProblem, verify } from "./signature.js";
/**
 * accepted, returned by a step function, answers 202: the step becomes asynchronous and
 * must be finished later with ctx.lease.complete (or Client.completeStep), heartbeating
 * before the lease expires.
 */
export const accepted = Symbol.for("gendurable.accepted");
const ANSWERS = ["next", "await", "spawn", "done", "fail", "retry"];
/**
 * serve returns a fetch-style handler, `(request: Request) => Promise<Response>`, for
 * gendurable's step webhook: it verifies the Standard Webhooks signature, decodes the
 * step, runs the step function registered for the job's handler (or the one function
 * given), and answers its result. It drops into Cloudflare Workers, Next.js / Vercel route
 * handlers, Deno and Bun; ./node and ./lambda adapt it to Node's http and AWS Lambda.
 *
 * Answers: 200 with the step's answer; 202 for accepted; and an RFC 9457 problem
 * (`application/problem+json` with type, title, status and detail, as the Python SDK
 * answers) for every error: 405 for a request that is not a POST, 401 for a missing or bad
 * signature or a stale timestamp, 400 for a body that is not a step, 404 for a handler
 * with no function, 500 when the function throws or answers something that is not one
 * answer. The service retries every non-2xx with backoff.
 */
export function serve(steps, options) {
    checkSecrets(options?.secret);
    return async (request) => {
        if (request.method !== "POST") {
            return problemResponse(405, "method-not-allowed", "Step webhooks are POSTed", `a step request is a POST, not ${request.method}`);
        }
        const body = new Uint8Array(await request.arrayBuffer());
        let webhookId;
        try {
            webhookId = await verify(options.secret, request.headers, body, { toleranceSeconds: options.toleranceSeconds });
        }
        catch (error) {
            if (error instanceof SignatureError)
                return problemResponse(401, "webhook-signature", "Bad webhook signature", error.message);
            throw error;
        }
        let step;
        try {
            step = JSON.parse(new TextDecoder().decode(body));
        }
        catch (error) {
            return problemResponse(400, "bad-step-request", "Bad step request", `the body is not JSON: ${messageOf(error)}`);
        }
        if (!step || typeof step !== "object" || !step.job || typeof step.job !== "object" || !step.lease) {
            return problemResponse(400, "bad-step-request", "Bad step request", "a step request is an object with job and lease");
        }
        const fn = typeof steps === "function" ? steps : Object.hasOwn(steps, step.job.handler) ? steps[step.job.handler] : undefined;
        if (!fn) {
            return problemResponse(404, "unknown-handler", "No step function for this handler", `handler ${JSON.stringify(step.job.handler)}`);
        }
        const traceparent = request.headers.get("traceparent") ?? undefined;
        const tracestate = request.headers.get("tracestate") ?? undefined;
        const ctx = { webhookId, request, lease: leaseOf(step, options.client), traceparent, tracestate };
        let answer;
        try {
            answer = await runTraced(step, traceparent, tracestate, () => fn(step, ctx));
            if (answer !== accepted)
                checkAnswer(answer);
        }
        catch (error) {
            options.onError?.(error, step);
            return problemResponse(500, "step-error", "The step function failed", messageOf(error));
        }
        if (answer === accepted)
            return new Response(null, { status: 202 });
        return new Response(JSON.stringify(answer), { status: 200, headers: { "content-type": "application/json" } });
    };
}
// The OpenTelemetry API when the runtime has it (an optional peer: never a dependency of
// this package), imported once; null when it cannot be.
let otelApi;
const OTEL_API = "@opentelemetry/api";
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
/**
 * runTraced runs fn inside a span of the step, child of the step request's traceparent,
 * when the request has one and `@opentelemetry/api` can be imported; else it just runs fn.
 */
async function runTraced(step, traceparent, tracestate, fn) {
    const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
    if (!m || /^0+$/.test(m[1]) || /^0+$/.test(m[2]))
        return fn();
    otelApi ??= import(OTEL_API).catch(() => null);
    const api = await otelApi;
    if (!api?.trace || !api?.context)
        return fn();
    const parent = api.trace.setSpanContext(api.context.active(), {
        traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true,
        ...(tracestate && api.createTraceState ? { traceState: api.createTraceState(tracestate) } : {}),
    });
    const span = api.trace.getTracer("@gendurable/sdk").startSpan(`step ${step.job.handler}`, {
        kind: api.SpanKind?.SERVER ?? 1,
        attributes: { "gendurable.job.id": step.job.id, "gendurable.handler": step.job.handler,
            "gendurable.step": step.job.step, "gendurable.attempt": step.job.attempt },
    }, parent);
    try {
        return await api.context.with(api.trace.setSpan(parent, span), fn);
    }
    catch (error) {
        span.recordException?.(error);
        span.setStatus?.({ code: api.SpanStatusCode?.ERROR ?? 2, message: messageOf(error) });
        throw error;
    }
    finally {
        span.end();
    }
}
/**
 * checkSecrets throws a TypeError naming what is wrong with the secret (or which of the
 * list), so that a malformed secret fails when the handler is built rather than on every
 * request.
 */
function checkSecrets(secret) {
    if (Array.isArray(secret)) {
        if (secret.length === 0)
            throw new TypeError("serve: no signing secret (the secret list is empty)");
        secret.forEach((s, i) => {
            const problem = secretProblem(s);
            if (problem)
                throw new TypeError(`serve: secret[${i}] ${problem}`);
        });
        return;
    }
    const problem = secretProblem(secret);
    if (problem)
        throw new TypeError(`serve: the signing secret ${problem}`);
}
function messageOf(error) {
    return error instanceof Error ? error.message : String(error);
}
function checkAnswer(answer) {
    const keys = answer && typeof answer === "object" ? Object.keys(answer) : [];
    if (keys.length !== 1 || !ANSWERS.includes(keys[0])) {
        throw new TypeError(`a step answers exactly one of ${ANSWERS.join(", ")} (got ${JSON.stringify(keys)})`);
    }
}
function leaseOf(step, client) {
    const need = () => {
        if (!client)
            throw new Error("pass serve({ client }) to heartbeat or complete a step from the handler");
        return client;
    };
    return {
        token: step.lease.token,
        expiresAt: step.lease.expires_at,
        heartbeat: () => need().heartbeat(step.job.id, step.lease.token),
        complete: (answer) => need().completeStep(step.job.id, step.lease.token, answer),
    };
}
