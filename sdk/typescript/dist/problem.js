/**
 * ProblemError is a failed API call: the problem document the server answered with
 * (`application/problem+json`), or one made up from the status when the body was not one.
 */
export class ProblemError extends Error {
    /** The problem type, e.g. `urn:gendurable:problem:validation`. */
    type;
    title;
    /** The HTTP status. */
    status;
    detail;
    /** The bad fields of a validation problem (empty otherwise). */
    errors;
    /** The whole problem document as the server sent it. */
    problem;
    constructor(problem) {
        super(problem.detail ? `${problem.title}: ${problem.detail}` : problem.title);
        this.name = "ProblemError";
        this.type = problem.type;
        this.title = problem.title;
        this.status = problem.status;
        this.detail = problem.detail;
        this.errors = problem.errors ?? [];
        this.problem = problem;
    }
    /** fromResponse reads the problem of a failed response (its body is consumed). */
    static async fromResponse(response) {
        const text = await response.text();
        try {
            const body = JSON.parse(text);
            if (body && typeof body.title === "string" && typeof body.type === "string") {
                return new ProblemError({ ...body, type: body.type, title: body.title, status: body.status ?? response.status });
            }
        }
        catch {
            // not JSON: described below
        }
        return new ProblemError({
            type: "about:blank",
            title: response.statusText || `HTTP ${response.status}`,
            status: response.status,
            detail: text.slice(0, 500) || undefined,
        });
    }
}
/**
 * problemResponse answers a problem document with its status: type
 * `urn:gendurable:problem:<type>`, a title fixed per type and a detail about this case.
 */
export function problemResponse(status, type, title, detail) {
    const problem = { type: `urn:gendurable:problem:${type}`, title, status, detail };
    return new Response(JSON.stringify(problem), { status, headers: { "content-type": "application/problem+json" } });
}
