// The Host check (docs/contract/16-limits.md): a page served from another
// name can reach a service on 127.0.0.1 through DNS rebinding (its name
// re-resolved to 127.0.0.1), and the browser then sends that name as Host.
// So with authentication off the service answers only to the loopback names
// and ALLOWED_HOSTS; every other Host is 421 before CORS, the explorer or any
// route sees the request. With authentication on, credentials are what
// protects the store, and Host is checked only when ALLOWED_HOSTS is set.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { misdirectedRequest } from "../errors.js";
import { REQUEST_ID, requestIdOf } from "./arrival.js";
import { refuseBeforeBody } from "./front-door.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;
type NodeHandler = (req: Req, res: Res) => void;

/** The names a local service always answers to (any port). */
const LOOPBACK_HOSTS: readonly string[] = ["localhost", "127.0.0.1", "[::1]"];

/**
 * The host entries to accept, or undefined when Host is not checked:
 * authentication off checks always (loopback names plus ALLOWED_HOSTS),
 * authentication on only when ALLOWED_HOSTS is set (then only those).
 */
export function allowedHostsFor(
  authEnabled: boolean,
  configured: readonly string[] | undefined,
): readonly string[] | undefined {
  if (!authEnabled) return [...LOOPBACK_HOSTS, ...(configured ?? [])];
  return configured;
}

/** "name:port" -> ["name", "port"]; "[v6]:port" -> ["[v6]", "port"]; no port -> [host, undefined]. */
function splitHost(host: string): [string, string | undefined] {
  const m = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(host);
  return m === null ? [host, undefined] : [m[1] ?? host, m[2]];
}

/** Whether `host` (a Host header or :authority, as sent) matches an entry: a name alone matches any port. */
function hostAllowed(host: string | undefined, allowed: readonly string[]): boolean {
  if (host === undefined || host === "") return false;
  const lower = host.toLowerCase();
  const [name] = splitHost(lower);
  return allowed.some((entry) => (splitHost(entry)[1] === undefined ? entry === name : entry === lower));
}

/** The Host a request was sent to: HTTP/2's :authority, else the Host header. */
function requestHost(req: Req): string | undefined {
  const authority = req.headers[":authority"];
  if (typeof authority === "string" && authority !== "") return authority;
  return req.headers.host;
}

/** `next` behind the Host check; `next` itself when `allowed` is undefined (nothing to check). */
export function withAllowedHosts(allowed: readonly string[] | undefined, next: NodeHandler): NodeHandler {
  if (allowed === undefined) return next;
  return (req, res) => {
    const host = requestHost(req);
    if (hostAllowed(host, allowed)) return next(req, res);
    const id = req.headers[REQUEST_ID];
    refuseBeforeBody(req, res, misdirectedRequest(host), 421, requestIdOf(typeof id === "string" ? id : undefined));
  };
}
