import { ProblemError } from "./problem.js";
const TERMINAL = ["done", "failed", "cancelled"];
/**
 * Client calls gendurable's REST API. Every method answers the decoded body and throws
 * ProblemError for a 4xx or 5xx. It holds no state beyond its options; one per process.
 */
export class Client {
    baseUrl;
    #token;
    #fetch;
    constructor(options) {
        this.baseUrl = options.baseUrl.replace(/\/+$/, "");
        this.#token = options.token;
        this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    }
    /**
     * request sends one call and decodes its JSON answer (undefined for 204); it throws
     * ProblemError when the status is not 2xx. The typed methods below all use it.
     */
    async request(method, path, body, query) {
        let url = this.baseUrl + path;
        const params = new URLSearchParams();
        for (const [k, v] of Object.entries(query ?? {})) {
            if (v !== undefined && v !== null)
                params.set(k, String(v));
        }
        const queryString = params.toString();
        if (queryString)
            url += "?" + queryString;
        const headers = { accept: "application/json" };
        if (body !== undefined)
            headers["content-type"] = "application/json";
        if (this.#token)
            headers["authorization"] = `Bearer ${this.#token}`;
        const response = await this.#fetch(url, {
            method,
            headers,
            body: body === undefined ? undefined : JSON.stringify(body),
        });
        if (!response.ok)
            throw await ProblemError.fromResponse(response);
        if (response.status === 204)
            return undefined;
        return (await response.json());
    }
    // Jobs.
    /** insertJob inserts one job (a live job holding the same key is answered instead, `deduplicated: true`). */
    insertJob(job) {
        return this.request("POST", "/v1/jobs", job);
    }
    /** insertJobs inserts up to 10 000 jobs in one statement, answered in request order. */
    async insertJobs(jobs) {
        return (await this.request("POST", "/v1/jobs/batch", { jobs })).jobs;
    }
    /** getJob answers one job with its inbox and children counts. */
    getJob(id) {
        return this.request("GET", `/v1/jobs/${id}`);
    }
    /** listJobs answers one page of jobs, newest first; pass `next_cursor` as `cursor` for the next. */
    listJobs(query = {}) {
        return this.request("GET", "/v1/jobs", undefined, query);
    }
    /** listSteps answers the job's attempt history, oldest first. */
    async listSteps(id, query = {}) {
        return (await this.request("GET", `/v1/jobs/${id}/steps`, undefined, query)).steps;
    }
    /** listSignals answers the job's inbox, oldest first (consumed ones flagged). */
    async listSignals(id, query = {}) {
        return (await this.request("GET", `/v1/jobs/${id}/signals`, undefined, query)).signals;
    }
    /** listChildren answers one page of the job's children, newest first. */
    listChildren(id, query = {}) {
        return this.request("GET", `/v1/jobs/${id}/children`, undefined, query);
    }
    /** cancelJob cancels a live job and its live children (an executing one at its outcome). */
    cancelJob(id) {
        return this.request("POST", `/v1/jobs/${id}/cancel`);
    }
    /** retryJob runs a failed or cancelled job again from where it ended, with fresh attempts. */
    retryJob(id) {
        return this.request("POST", `/v1/jobs/${id}/retry`);
    }
    /**
     * waitForJob polls a job until `until` holds for it (by default: its status is one of
     * `statuses`, itself by default a terminal one) and answers it; it throws when
     * `timeoutMs` (default 30 000) passes first.
     */
    async waitForJob(id, options = {}) {
        const statuses = options.statuses ?? TERMINAL;
        const until = options.until ?? ((job) => statuses.includes(job.status));
        const timeoutMs = options.timeoutMs ?? 30_000;
        const deadline = Date.now() + timeoutMs;
        for (;;) {
            const job = await this.getJob(id);
            if (until(job))
                return job;
            if (Date.now() > deadline)
                throw new Error(`job ${id} (${job.status}) did not get there within ${timeoutMs}ms`);
            await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
        }
    }
    // Signals.
    /** sendSignal delivers a signal to a job; `woke` says whether it made an awaiting job runnable. */
    sendSignal(id, name, payload) {
        return this.request("POST", `/v1/jobs/${id}/signals`, { name, payload });
    }
    /** sendSignalByKey delivers a signal to the live job holding `key`. */
    sendSignalByKey(key, name, payload) {
        return this.request("POST", "/v1/signals", { key, name, payload });
    }
    // Asynchronous steps (a step webhook that answered 202).
    /** heartbeat extends the lease of an asynchronous step; ProblemError 409 when the lease is lost. */
    heartbeat(id, token) {
        return this.request("POST", `/v1/jobs/${id}/heartbeat`, { token });
    }
    /** completeStep reports the answer of an asynchronous step, fenced by its lease token. */
    completeStep(id, token, answer) {
        return this.request("POST", `/v1/jobs/${id}/outcome`, { token, ...answer });
    }
    // Handlers.
    /** putHandler registers or changes a webhook handler (a new one without `secret` gets a generated one). */
    putHandler(name, handler) {
        return this.request("PUT", `/v1/handlers/${encodeURIComponent(name)}`, handler);
    }
    getHandler(name) {
        return this.request("GET", `/v1/handlers/${encodeURIComponent(name)}`);
    }
    async listHandlers() {
        return (await this.request("GET", "/v1/handlers")).handlers;
    }
    deleteHandler(name) {
        return this.request("DELETE", `/v1/handlers/${encodeURIComponent(name)}`);
    }
    /** rotateHandlerSecret replaces the signing secret; the old one keeps signing during `overlap`. */
    rotateHandlerSecret(name, rotation = {}) {
        return this.request("POST", `/v1/handlers/${encodeURIComponent(name)}/rotate-secret`, rotation);
    }
    // Queues.
    /** putQueue creates a queue or changes its settings (pause, in-flight cap, batch, retention, fairness). */
    putQueue(name, settings) {
        return this.request("PUT", `/v1/queues/${encodeURIComponent(name)}`, settings);
    }
    getQueue(name) {
        return this.request("GET", `/v1/queues/${encodeURIComponent(name)}`);
    }
    async listQueues() {
        return (await this.request("GET", "/v1/queues")).queues;
    }
}
