// One HTTP/2 request by hand (for tests that speak a wire below any client
// library): its status, headers and trailers as plain strings, and its body.
import type http2 from "node:http2";

export interface H2Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  trailers: Record<string, string>;
}

export function h2Request(
  session: http2.ClientHttp2Session,
  path: string,
  headers: Record<string, string>,
  body: Uint8Array,
): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    const chunks: Buffer[] = [];
    let head: Record<string, string> = {};
    let trailers: Record<string, string> = {};
    const plain = (h: http2.IncomingHttpHeaders) =>
      Object.fromEntries(Object.entries(h).map(([k, v]) => [k, String(v)]));
    stream.on("response", (h) => (head = plain(h)));
    stream.on("trailers", (t) => (trailers = plain(t)));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () =>
      resolve({ status: Number(head[":status"]), headers: head, body: Buffer.concat(chunks), trailers }),
    );
    stream.on("error", reject);
    stream.end(body);
  });
}
