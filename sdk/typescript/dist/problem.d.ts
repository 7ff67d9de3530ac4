import type { components } from "./api-types.js";
/** Problem is an RFC 9457 problem document, as every gendurable error answers. */
export type Problem = components["schemas"]["Problem"];
/** FieldError names one bad field of a refused request (`jobs/3/priority`). */
export type FieldError = components["schemas"]["FieldError"];
/**
 * ProblemError is a failed API call: the problem document the server answered with
 * (`application/problem+json`), or one made up from the status when the body was not one.
 */
export declare class ProblemError extends Error {
    /** The problem type, e.g. `urn:gendurable:problem:validation`. */
    readonly type: string;
    readonly title: string;
    /** The HTTP status. */
    readonly status: number;
    readonly detail: string | undefined;
    /** The bad fields of a validation problem (empty otherwise). */
    readonly errors: FieldError[];
    /** The whole problem document as the server sent it. */
    readonly problem: Problem;
    constructor(problem: Problem);
    /** fromResponse reads the problem of a failed response (its body is consumed). */
    static fromResponse(response: Response): Promise<ProblemError>;
}
/**
 * problemResponse answers a problem document with its status: type
 * `urn:gendurable:problem:<type>`, a title fixed per type and a detail about this case.
 */
export declare function problemResponse(status: number, type: string, title: string, detail: string): Response;
