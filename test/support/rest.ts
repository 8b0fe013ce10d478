// A tiny REST caller for wire tests: JSON in, JSON (or parquet bytes) out,
// with the status, so a test can assert on errors as a curl user sees them.
export interface RestAnswer {
  status: number;
  // Parsed JSON of whatever shape the route answers; tests assert on it.
  json: any;
  bytes?: Uint8Array;
}

/** Callers against the server whose base URL `baseUrl()` gives (read at call time, after beforeAll). */
export function restCaller(baseUrl: () => string) {
  const rest = async (method: "GET" | "POST", path: string, body?: unknown): Promise<RestAnswer> => {
    const res = await fetch(baseUrl() + path, {
      method,
      ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
    });
    if (res.headers.get("content-type")?.startsWith("application/octet-stream")) {
      return { status: res.status, json: undefined, bytes: new Uint8Array(await res.arrayBuffer()) };
    }
    return { status: res.status, json: await res.json() };
  };
  return {
    rest,
    get: (path: string) => rest("GET", path),
    post: (path: string, body: unknown) => rest("POST", path, body),
  };
}
