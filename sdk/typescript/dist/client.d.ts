import type { components, operations } from "./api-types.js";
type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type JobDetail = Schemas["JobDetail"];
export type JobInsert = Schemas["JobInsert"];
export type JobInserted = Schemas["JobInserted"];
export type JobPage = Schemas["JobPage"];
export type JobStatus = Schemas["JobStatus"];
export type StepRecord = Schemas["Step"];
export type Signal = Schemas["Signal"];
export type SignalSent = Schemas["SignalSent"];
export type HandlerPut = Schemas["HandlerPut"];
export type HandlerConfig = Schemas["HandlerConfig"];
export type SecretRotation = Schemas["SecretRotation"];
export type QueuePut = Schemas["QueuePut"];
export type Queue = Schemas["Queue"];
export type StepAnswer = Schemas["StepAnswer"];
export type LeaseExtended = Schemas["LeaseExtended"];
export type OutcomeApplied = Schemas["OutcomeApplied"];
export type ListJobsQuery = NonNullable<operations["listJobs"]["parameters"]["query"]>;
export type ListChildrenQuery = NonNullable<operations["listJobChildren"]["parameters"]["query"]>;
/** ClientOptions configure a Client. */
export interface ClientOptions {
    /** The server's base URL, e.g. `http://localhost:8080` (no `/v1`). */
    baseUrl: string;
    /** A bearer token or API key, when the server runs with GENDURABLE_API_TOKEN. */
    token?: string;
    /** The fetch to use (default: the platform's). */
    fetch?: typeof fetch;
}
/**
 * Client calls gendurable's REST API. Every method answers the decoded body and throws
 * ProblemError for a 4xx or 5xx. It holds no state beyond its options; one per process.
 */
export declare class Client {
    #private;
    readonly baseUrl: string;
    constructor(options: ClientOptions);
    /**
     * request sends one call and decodes its JSON answer (undefined for 204); it throws
     * ProblemError when the status is not 2xx. The typed methods below all use it.
     */
    request<T>(method: string, path: string, body?: unknown, query?: object): Promise<T>;
    /** insertJob inserts one job (a live job holding the same key is answered instead, `deduplicated: true`). */
    insertJob(job: JobInsert): Promise<JobInserted>;
    /** insertJobs inserts up to 10 000 jobs in one statement, answered in request order. */
    insertJobs(jobs: JobInsert[]): Promise<JobInserted[]>;
    /** getJob answers one job with its inbox and children counts. */
    getJob(id: number): Promise<JobDetail>;
    /** listJobs answers one page of jobs, newest first; pass `next_cursor` as `cursor` for the next. */
    listJobs(query?: ListJobsQuery): Promise<JobPage>;
    /** listSteps answers the job's attempt history, oldest first. */
    listSteps(id: number, query?: {
        limit?: number;
    }): Promise<StepRecord[]>;
    /** listSignals answers the job's inbox, oldest first (consumed ones flagged). */
    listSignals(id: number, query?: {
        limit?: number;
    }): Promise<Signal[]>;
    /** listChildren answers one page of the job's children, newest first. */
    listChildren(id: number, query?: ListChildrenQuery): Promise<JobPage>;
    /** cancelJob cancels a live job and its live children (an executing one at its outcome). */
    cancelJob(id: number): Promise<Job>;
    /** retryJob runs a failed or cancelled job again from where it ended, with fresh attempts. */
    retryJob(id: number): Promise<Job>;
    /**
     * waitForJob polls a job until `until` holds for it (by default: its status is one of
     * `statuses`, itself by default a terminal one) and answers it; it throws when
     * `timeoutMs` (default 30 000) passes first.
     */
    waitForJob(id: number, options?: {
        statuses?: readonly JobStatus[];
        until?: (job: JobDetail) => boolean;
        timeoutMs?: number;
        intervalMs?: number;
    }): Promise<JobDetail>;
    /** sendSignal delivers a signal to a job; `woke` says whether it made an awaiting job runnable. */
    sendSignal(id: number, name: string, payload?: unknown): Promise<SignalSent>;
    /** sendSignalByKey delivers a signal to the live job holding `key`. */
    sendSignalByKey(key: string, name: string, payload?: unknown): Promise<SignalSent>;
    /** heartbeat extends the lease of an asynchronous step; ProblemError 409 when the lease is lost. */
    heartbeat(id: number, token: string): Promise<LeaseExtended>;
    /** completeStep reports the answer of an asynchronous step, fenced by its lease token. */
    completeStep(id: number, token: string, answer: StepAnswer): Promise<OutcomeApplied>;
    /** putHandler registers or changes a webhook handler (a new one without `secret` gets a generated one). */
    putHandler(name: string, handler: HandlerPut): Promise<HandlerConfig>;
    getHandler(name: string): Promise<HandlerConfig>;
    listHandlers(): Promise<HandlerConfig[]>;
    deleteHandler(name: string): Promise<void>;
    /** rotateHandlerSecret replaces the signing secret; the old one keeps signing during `overlap`. */
    rotateHandlerSecret(name: string, rotation?: SecretRotation): Promise<HandlerConfig>;
    /** putQueue creates a queue or changes its settings (pause, in-flight cap, batch, retention, fairness). */
    putQueue(name: string, settings: QueuePut): Promise<Queue>;
    getQueue(name: string): Promise<Queue>;
    listQueues(): Promise<Queue[]>;
}
export {};
