// What the tests share: the server under test (started by sdk_test.go) and real HTTP
// servers for the step handlers.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Client, newSecret, type JobDetail } from "@gendurable/sdk";

export const serverUrl = process.env.GENDURABLE_URL ?? "";
if (!serverUrl) throw new Error("GENDURABLE_URL is not set: run these tests through go test ./sdk/typescript/");

export const client = new Client({ baseUrl: serverUrl });

let counter = 0;
/** unique returns a name no other test uses (handlers, keys, queues). */
export function unique(prefix: string): string {
  counter++;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}

export interface Listening {
  url: string;
  close(): Promise<void>;
}

/** listen serves a Node request listener on 127.0.0.1 and answers its base URL. */
export async function listen(listener: (req: IncomingMessage, res: ServerResponse) => unknown): Promise<Listening> {
  const server = createServer((req, res) => void listener(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** register puts a handler pointing at url with a fresh secret and answers the secret. */
export async function register(name: string, url: string, secret = newSecret()): Promise<string> {
  await client.putHandler(name, { url, secret });
  return secret;
}

/** parkedOnSignals is true for a job awaiting signals (not children: a spawn parks as awaiting too). */
export const parkedOnSignals = (job: JobDetail): boolean => job.status === "awaiting" && (job.awaiting?.length ?? 0) > 0;

/** idleHandler registers a handler whose URL nothing serves, for jobs that must not run. */
export async function idleHandler(): Promise<string> {
  const name = unique("idle");
  await client.putHandler(name, { url: "http://127.0.0.1:9/never" });
  return name;
}
