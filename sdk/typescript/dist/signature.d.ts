/** Header names of a Standard Webhooks request. */
export declare const HEADER_ID = "webhook-id";
export declare const HEADER_TIMESTAMP = "webhook-timestamp";
export declare const HEADER_SIGNATURE = "webhook-signature";
/** SECRET_PREFIX starts every signing secret: `whsec_` + base64 of the HMAC key. */
export declare const SECRET_PREFIX = "whsec_";
/** DEFAULT_TOLERANCE_SECONDS is how far a webhook-timestamp may be from now (5 minutes). */
export declare const DEFAULT_TOLERANCE_SECONDS = 300;
/** SignatureError is a request whose signature or timestamp does not verify. */
export declare class SignatureError extends Error {
    constructor(message: string);
}
/**
 * secretProblem says what is wrong with a signing secret, or returns undefined when it is
 * one Standard Webhooks accepts: an optional `whsec_` prefix, then the HMAC key in
 * standard base64 (padding optional, as atob reads it), at least one byte long. The
 * answer never quotes the secret.
 */
export declare function secretProblem(secret: unknown): string | undefined;
/** newSecret returns a fresh signing secret: `whsec_` + base64 of 32 random bytes. */
export declare function newSecret(): string;
/** sign returns the `v1,<base64 HMAC-SHA256>` signature of `id.timestamp.body`. */
export declare function sign(secret: string, id: string, timestamp: number, body: Uint8Array | string): Promise<string>;
/**
 * signatureHeaders signs body with every secret given (space-separated signatures, as a
 * sender does during a rotation) and returns the three Standard Webhooks headers.
 */
export declare function signatureHeaders(secrets: string | string[], id: string, timestamp: number, body: Uint8Array | string): Promise<Record<string, string>>;
/** VerifyOptions tune verify. */
export interface VerifyOptions {
    /** How far the timestamp may be from now, in seconds (default 300). */
    toleranceSeconds?: number;
    /** The current time in unix seconds (default: the clock). */
    now?: number;
}
type HeaderSource = Headers | Record<string, string | string[] | undefined>;
/**
 * verify checks a request's Standard Webhooks headers against its raw body: the timestamp
 * must be within the tolerance of now, and one of the space-separated `v1,` signatures
 * must match one of the secrets (several secrets accept a rotation on the receiving side).
 * It returns the webhook-id, and throws SignatureError otherwise.
 */
export declare function verify(secrets: string | string[], headers: HeaderSource, body: Uint8Array | string, options?: VerifyOptions): Promise<string>;
export {};
