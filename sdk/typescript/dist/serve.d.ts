import type { components } from "./api-types.js";
import type { Client, LeaseExtended, OutcomeApplied, StepAnswer } from "./client.js";
type Schemas = components["schemas"];
export type StepRequest = Schemas["StepRequest"];
export type StepJob = Schemas["StepJob"];
export type StepSignal = Schemas["StepSignal"];
export type StepChild = Schemas["StepChild"];
/**
 * Step is the decoded step request, with the job's input and state typed as the handler
 * says (`any` when it does not).
 */
export type Step<Input = any, State = any> = Omit<StepRequest, "job"> & {
    job: Omit<StepJob, "input" | "state"> & {
        input: Input;
        state: State | null;
    };
};
/**
 * accepted, returned by a step function, answers 202: the step becomes asynchronous and
 * must be finished later with ctx.lease.complete (or Client.completeStep), heartbeating
 * before the lease expires.
 */
export declare const accepted: unique symbol;
/** Lease is the step's lease, and the asynchronous-step calls it authorises. */
export interface Lease {
    readonly token: string;
    readonly expiresAt: string;
    /** heartbeat extends the lease (needs ServeOptions.client). */
    heartbeat(): Promise<LeaseExtended>;
    /** complete reports the step's answer (needs ServeOptions.client). */
    complete(answer: StepAnswer): Promise<OutcomeApplied>;
}
/** StepContext is what a step function gets beside the step. */
export interface StepContext {
    /** The webhook-id: unique per attempt, a key to make side effects idempotent. */
    readonly webhookId: string;
    readonly request: Request;
    readonly lease: Lease;
    /**
     * The step request's W3C `traceparent` (the service's span of this attempt, in the
     * trace of the job), or undefined when the job has no trace context. When
     * `@opentelemetry/api` can be imported, the step function also runs inside a span of
     * the step, child of that context (a no-op span unless an OpenTelemetry SDK is set up).
     */
    readonly traceparent?: string;
    /** The step request's W3C `tracestate`, when there is one. */
    readonly tracestate?: string;
}
/** StepFunction runs one step and answers exactly one of next, await, spawn, done, fail, retry (or accepted). */
export type StepFunction<Input = any, State = any> = (step: Step<Input, State>, ctx: StepContext) => StepAnswer | typeof accepted | Promise<StepAnswer | typeof accepted>;
/** ServeOptions configure serve. */
export interface ServeOptions {
    /**
     * The handler's signing secret (`whsec_` + base64 of the key); several accept any of
     * them, as during a rotation. serve throws a TypeError naming the problem when one is
     * malformed.
     */
    secret: string | string[];
    /** How far webhook-timestamp may be from now, in seconds (default 300). */
    toleranceSeconds?: number;
    /** The client ctx.lease.heartbeat and ctx.lease.complete call through. */
    client?: Client;
    /** onError sees every error a step function throws (answered 500, so the step is retried). */
    onError?: (error: unknown, step: Step) => void;
}
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
export declare function serve(steps: StepFunction | Record<string, StepFunction>, options: ServeOptions): (request: Request) => Promise<Response>;
export {};
