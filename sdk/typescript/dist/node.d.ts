/** NodeRequest is the part of http.IncomingMessage (or an Express request) the adapter reads. */
export interface NodeRequest extends AsyncIterable<Uint8Array | string> {
    method?: string;
    url?: string;
    headers: Record<string, string | string[] | undefined>;
    /** Set by Express body parsers: a Buffer (express.raw) or string is used as the raw body. */
    body?: unknown;
}
/** NodeResponse is the part of http.ServerResponse the adapter writes. */
export interface NodeResponse {
    statusCode: number;
    setHeader(name: string, value: string): unknown;
    end(chunk?: Uint8Array): unknown;
}
/** toRequest turns a Node request into a web-standard Request (the body read whole). */
export declare function toRequest(req: NodeRequest): Promise<Request>;
/** writeResponse writes a web-standard Response to a Node response. */
export declare function writeResponse(response: Response, res: NodeResponse): Promise<void>;
/**
 * nodeListener adapts a fetch-style handler to `(req, res)`, for `http.createServer` or
 * an Express route (`app.post("/steps", nodeListener(serve(steps, { secret })))`, mounted
 * before any JSON body parser: the signature covers the raw body).
 */
export declare function nodeListener(handler: (request: Request) => Promise<Response>): (req: NodeRequest, res: NodeResponse) => Promise<void>;
