// Standard Webhooks signing and verification (https://www.standardwebhooks.com/) on Web
// Crypto alone, so that it runs in Node, Deno, Bun, Cloudflare Workers and browsers.
import { base64ToBytes, bytesToBase64 } from "./base64.js";
/** Header names of a Standard Webhooks request. */
export const HEADER_ID = "webhook-id";
export const HEADER_TIMESTAMP = "webhook-timestamp";
export const HEADER_SIGNATURE = "webhook-signature";
/** SECRET_PREFIX starts every signing secret: `whsec_` + base64 of the HMAC key. */
export const SECRET_PREFIX = "whsec_";
/** DEFAULT_TOLERANCE_SECONDS is how far a webhook-timestamp may be from now (5 minutes). */
export const DEFAULT_TOLERANCE_SECONDS = 300;
/** SignatureError is a request whose signature or timestamp does not verify. */
export class SignatureError extends Error {
    constructor(message) {
        super(message);
        this.name = "SignatureError";
    }
}
const encoder = new TextEncoder();
const keys = new Map();
const BASE64 = /^[A-Za-z0-9+/]*=*$/;
/**
 * secretProblem says what is wrong with a signing secret, or returns undefined when it is
 * one Standard Webhooks accepts: an optional `whsec_` prefix, then the HMAC key in
 * standard base64 (padding optional, as atob reads it), at least one byte long. The
 * answer never quotes the secret.
 */
export function secretProblem(secret) {
    if (secret === undefined || secret === null)
        return "is missing";
    if (typeof secret !== "string")
        return `must be a string (got ${typeof secret})`;
    if (secret === "")
        return "is empty";
    const raw = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
    if (/\s/.test(raw))
        return "has whitespace in it (a trailing newline?)";
    if (raw === "")
        return "has an empty key (nothing after whsec_)";
    if (!BASE64.test(raw)) {
        return "is not whsec_ followed by base64 (it has characters outside A-Z, a-z, 0-9, + and /, or = before the end)";
    }
    const data = raw.replace(/=+$/, "");
    const rest = data.length % 4;
    const padding = raw.length - data.length;
    if (rest === 1 || (padding !== 0 && padding !== (4 - rest) % 4)) {
        return "is not whsec_ followed by base64 (its length does not fit base64: cut short, or wrong = padding)";
    }
    return undefined;
}
/** secretBytes decodes a signing secret's HMAC key, throwing TypeError when it is malformed. */
function secretBytes(secret) {
    const problem = secretProblem(secret);
    if (problem)
        throw new TypeError(`the signing secret ${problem}`);
    return base64ToBytes(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret);
}
/** hmacKey imports a secret's key once per secret (a module-wide cache). */
function hmacKey(secret) {
    let key = keys.get(secret);
    if (!key) {
        key = crypto.subtle.importKey("raw", secretBytes(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
        keys.set(secret, key);
    }
    return key;
}
function signedContent(id, timestamp, body) {
    const head = encoder.encode(`${id}.${timestamp}.`);
    const payload = typeof body === "string" ? encoder.encode(body) : body;
    const out = new Uint8Array(head.length + payload.length);
    out.set(head);
    out.set(payload, head.length);
    return out;
}
/** newSecret returns a fresh signing secret: `whsec_` + base64 of 32 random bytes. */
export function newSecret() {
    return SECRET_PREFIX + bytesToBase64(crypto.getRandomValues(new Uint8Array(32)));
}
/** sign returns the `v1,<base64 HMAC-SHA256>` signature of `id.timestamp.body`. */
export async function sign(secret, id, timestamp, body) {
    const mac = await crypto.subtle.sign("HMAC", await hmacKey(secret), signedContent(id, timestamp, body));
    return "v1," + bytesToBase64(new Uint8Array(mac));
}
/**
 * signatureHeaders signs body with every secret given (space-separated signatures, as a
 * sender does during a rotation) and returns the three Standard Webhooks headers.
 */
export async function signatureHeaders(secrets, id, timestamp, body) {
    const list = typeof secrets === "string" ? [secrets] : secrets;
    const signatures = await Promise.all(list.map((s) => sign(s, id, timestamp, body)));
    return { [HEADER_ID]: id, [HEADER_TIMESTAMP]: String(timestamp), [HEADER_SIGNATURE]: signatures.join(" ") };
}
function header(headers, name) {
    if (headers instanceof Headers)
        return headers.get(name) ?? "";
    for (const [k, v] of Object.entries(headers)) {
        if (k.toLowerCase() === name)
            return Array.isArray(v) ? v.join(" ") : (v ?? "");
    }
    return "";
}
/**
 * verify checks a request's Standard Webhooks headers against its raw body: the timestamp
 * must be within the tolerance of now, and one of the space-separated `v1,` signatures
 * must match one of the secrets (several secrets accept a rotation on the receiving side).
 * It returns the webhook-id, and throws SignatureError otherwise.
 */
export async function verify(secrets, headers, body, options = {}) {
    const id = header(headers, HEADER_ID);
    const timestampText = header(headers, HEADER_TIMESTAMP);
    const signatures = header(headers, HEADER_SIGNATURE);
    if (!id || !timestampText || !signatures) {
        throw new SignatureError(`missing ${HEADER_ID}, ${HEADER_TIMESTAMP} or ${HEADER_SIGNATURE} header`);
    }
    if (!/^[0-9]+$/.test(timestampText))
        throw new SignatureError(`bad ${HEADER_TIMESTAMP}`);
    const timestamp = Number(timestampText);
    const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
    const now = options.now ?? Math.floor(Date.now() / 1000);
    if (Math.abs(now - timestamp) > tolerance) {
        throw new SignatureError(`${HEADER_TIMESTAMP} ${timestamp} is outside the tolerance of ${tolerance}s`);
    }
    const content = signedContent(id, timestamp, body);
    const given = [];
    for (const s of signatures.split(" ")) {
        if (!s.startsWith("v1,"))
            continue;
        try {
            given.push(base64ToBytes(s.slice(3)));
        }
        catch {
            // not base64: cannot match
        }
    }
    for (const secret of typeof secrets === "string" ? [secrets] : secrets) {
        const key = await hmacKey(secret);
        for (const mac of given) {
            // crypto.subtle.verify compares in constant time.
            if (await crypto.subtle.verify("HMAC", key, mac, content))
                return id;
        }
    }
    throw new SignatureError("no matching signature");
}
