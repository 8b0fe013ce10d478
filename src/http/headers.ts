// A Node request's headers as fetch Headers, the shape the interceptors and
// handlers read. The REST gateway and the unary lane both build them here.
import type { AnyRequest } from "./read-body.js";

/** The request's headers (HTTP/2 pseudo-headers left out), only those `keep` accepts when given. */
export function webHeaders(req: AnyRequest, keep?: (name: string) => boolean): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name.startsWith(":") || (keep !== undefined && !keep(name))) continue;
    for (const v of Array.isArray(value) ? value : [value]) out.append(name, v);
  }
  return out;
}

/** Adds a name to a Vary header value unless it is there already. */
export function addVary(current: unknown, value: string): string {
  const parts = (Array.isArray(current) ? current.join(",") : typeof current === "string" ? current : "")
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "");
  if (!parts.some((p) => p.toLowerCase() === value.toLowerCase())) parts.push(value);
  return parts.join(", ");
}
