// The adapter from a fetch-style handler (serve's) to Node's http module and Express.
async function rawBody(req) {
    if (req.body instanceof Uint8Array)
        return req.body;
    if (typeof req.body === "string")
        return new TextEncoder().encode(req.body);
    if (req.body !== undefined && req.body !== null) {
        throw new Error("the request body was already parsed: mount the step handler before express.json(), or use express.raw()");
    }
    const chunks = [];
    let length = 0;
    for await (const chunk of req) {
        const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
        chunks.push(bytes);
        length += bytes.length;
    }
    const out = new Uint8Array(length);
    let at = 0;
    for (const c of chunks) {
        out.set(c, at);
        at += c.length;
    }
    return out;
}
/** toRequest turns a Node request into a web-standard Request (the body read whole). */
export async function toRequest(req) {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
        if (value === undefined)
            continue;
        for (const v of Array.isArray(value) ? value : [value])
            headers.append(name, v);
    }
    const method = req.method ?? "GET";
    const url = new URL(req.url ?? "/", `http://${headers.get("host") ?? "localhost"}`);
    const body = method === "GET" || method === "HEAD" ? undefined : await rawBody(req);
    return new Request(url, { method, headers, body: body });
}
/** writeResponse writes a web-standard Response to a Node response. */
export async function writeResponse(response, res) {
    res.statusCode = response.status;
    response.headers.forEach((value, name) => res.setHeader(name, value));
    res.end(new Uint8Array(await response.arrayBuffer()));
}
/**
 * nodeListener adapts a fetch-style handler to `(req, res)`, for `http.createServer` or
 * an Express route (`app.post("/steps", nodeListener(serve(steps, { secret })))`, mounted
 * before any JSON body parser: the signature covers the raw body).
 */
export function nodeListener(handler) {
    return async (req, res) => {
        let response;
        try {
            response = await handler(await toRequest(req));
        }
        catch (error) {
            const detail = error instanceof Error ? error.message : String(error);
            response = new Response(JSON.stringify({ type: "urn:gendurable:problem:internal", title: "Internal error", status: 500, detail }), {
                status: 500,
                headers: { "content-type": "application/problem+json" },
            });
        }
        await writeResponse(response, res);
    };
}
