// The one-port listener: HTTP/1.1 and prior-knowledge HTTP/2 on the same
// port, and a graceful shutdown that finishes in-flight calls.
import http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { sniffHttp2, startServer, type RequestHandler } from "../../src/server.js";

const echoVersion: RequestHandler = (req, res) => {
  const delay = req.url === "/slow" ? 300 : 0;
  setTimeout(() => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`http/${req.httpVersion}`);
  }, delay);
};

function h2Get(port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", reject);
    const stream = session.request({ ":path": path });
    let body = "";
    stream.setEncoding("utf8");
    stream.on("data", (d: string) => (body += d));
    stream.on("end", () => {
      session.close();
      resolve(body);
    });
    stream.on("error", reject);
  });
}

describe("sniffHttp2", () => {
  it("tells the preface from HTTP/1 and waits on a short prefix", () => {
    expect(sniffHttp2(Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))).toBe(true);
    expect(sniffHttp2(Buffer.from("PRI * HT"))).toBeUndefined();
    expect(sniffHttp2(Buffer.from("POST /x HTTP/1.1\r\n"))).toBe(false);
    expect(sniffHttp2(Buffer.from("G"))).toBe(false);
  });
});

describe("one port, two protocols", () => {
  it("serves HTTP/1.1 and cleartext HTTP/2 on the same port", async () => {
    const srv = await startServer({ port: 0, host: "127.0.0.1", handler: echoVersion });
    try {
      const h1 = await (await fetch(`http://127.0.0.1:${srv.port}/`)).text();
      expect(h1).toBe("http/1.1");
      expect(await h2Get(srv.port, "/")).toBe("http/2.0");
    } finally {
      await srv.close(100);
    }
  });

  it("finishes in-flight calls on close and refuses new connections", async () => {
    const srv = await startServer({ port: 0, host: "127.0.0.1", handler: echoVersion });
    const inflight1 = fetch(`http://127.0.0.1:${srv.port}/slow`).then((r) => r.text());
    const inflight2 = h2Get(srv.port, "/slow");
    await new Promise((r) => setTimeout(r, 100));
    const closed = srv.close(5000);
    expect(await inflight1).toBe("http/1.1");
    expect(await inflight2).toBe("http/2.0");
    await closed;
    await expect(fetch(`http://127.0.0.1:${srv.port}/`)).rejects.toThrow();
  });
});
