// Two clients of the service that saw the same version race
// (docs/contract/19-audit-history.md): one over REST, one over gRPC, each
// with its own token, both naming the version they saw. Exactly one wins;
// the other is refused 409 / aborted VERSION_MISMATCH naming the identifier;
// the history holds exactly the winner's version, under the winner's actor.
// Also an update racing a delete (expected_version against
// expected_versions). On both backends (PGlite runs one statement at a time,
// so there the two are only interleaved; PostgreSQL really races them).
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { reasonOf } from "../../src/errors.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const RACES = 40;
type Outcome = "ok" | { status: number | Code; reason: string | undefined; names: boolean };

const onPostgres = await postgresReachable();

describe.each([
  { backend: "pglite", run: true },
  { backend: "postgres", run: onPostgres },
])("two service clients with the same expected version ($backend)", ({ backend, run }) => {
  let srv: TestServer;
  let db: TestDatabase | undefined;
  const rest = async (path: string, body: unknown, id: string): Promise<Outcome> => {
    const res = await fetch(srv.url + path, {
      method: "POST",
      headers: { authorization: "Bearer tok-ann", "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const json = (await res.json()) as { reason?: string; message?: string };
    return res.status === 200
      ? "ok"
      : { status: res.status, reason: json.reason, names: json.message?.includes(id) === true };
  };
  const grpc = async (call: Promise<unknown>, id: string): Promise<Outcome> => {
    try {
      await call;
      return "ok";
    } catch (err) {
      if (!(err instanceof ConnectError)) throw err;
      return { status: err.code, reason: reasonOf(err), names: err.rawMessage.includes(id) };
    }
  };
  beforeAll(async () => {
    if (!run) return;
    db = backend === "postgres" ? await createTestDatabase() : undefined;
    srv = await startTestServer({
      API_TOKENS: "tok-ann=read,write,actor:ann;tok-bob=read,write,actor:bob",
      ...(db ? { DATABASE_URL: db.url } : {}),
    });
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
    await db?.drop();
  });

  async function createAll(prefix: string): Promise<string[]> {
    const ids = Array.from({ length: RACES }, (_, i) => `${prefix}-${i}`);
    const res = await fetch(`${srv.url}/resources/create`, {
      method: "POST",
      headers: { authorization: "Bearer tok-ann", "content-type": "application/json" },
      body: JSON.stringify({ resources: ids.map((identifier) => ({ identifier, payload_type: "study" })) }),
    });
    expect(res.status).toBe(200);
    return ids;
  }
  const history = async (id: string): Promise<[number, string, string][]> => {
    const res = await fetch(`${srv.url}/resources/history`, {
      method: "POST",
      headers: { authorization: "Bearer tok-ann", "content-type": "application/json" },
      body: JSON.stringify({ identifier: id }),
    });
    const json = (await res.json()) as { versions: { version: number; actor: string; kind: string }[] };
    return json.versions.map((v) => [v.version, v.actor, v.kind]);
  };

  it.runIf(run)(
    "an update over REST and one over gRPC: exactly one wins, the other is VERSION_MISMATCH",
    async () => {
      const client = createClient(ResourceService, createGrpcTransport({ baseUrl: srv.url }));
      const ids = await createAll("upd");
      for (const id of ids) {
        const [a, b] = await Promise.all([
          rest("/resources/update", { updates: { [id]: { license: "ANN", expected_version: 1 } } }, id),
          grpc(
            client.update(
              { updates: { [id]: { license: "BOB", expectedVersion: 1n } } },
              { headers: { authorization: "Bearer tok-bob" } },
            ),
            id,
          ),
        ]);
        expect(
          [a, b].filter((o) => o === "ok"),
          id,
        ).toHaveLength(1);
        const loser = a === "ok" ? b : a;
        expect(loser).toEqual(
          a === "ok"
            ? { status: Code.Aborted, reason: "VERSION_MISMATCH", names: true }
            : { status: 409, reason: "VERSION_MISMATCH", names: true },
        );
        const winner = a === "ok" ? "ann" : "bob";
        expect(await history(id)).toEqual([
          [1, "ann", "created"],
          [2, winner, "updated"],
        ]);
      }
      // Not asserted that both sides won sometimes: which request reaches the database first is the scheduler's choice.
    },
    120_000,
  );

  it.runIf(run)(
    "an update against a delete of the same version: exactly one wins",
    async () => {
      const client = createClient(ResourceService, createGrpcTransport({ baseUrl: srv.url }));
      const ids = await createAll("del");
      for (const id of ids) {
        const [a, b] = await Promise.all([
          rest("/resources/update", { updates: { [id]: { license: "ANN", expected_version: 1 } } }, id),
          grpc(
            client.delete(
              { identifiers: [id], expectedVersions: { [id]: 1n } },
              { headers: { authorization: "Bearer tok-bob" } },
            ),
            id,
          ),
        ]);
        expect(
          [a, b].filter((o) => o === "ok"),
          id,
        ).toHaveLength(1);
        expect(await history(id)).toEqual([
          [1, "ann", "created"],
          a === "ok" ? [2, "ann", "updated"] : [2, "bob", "deleted"],
        ]);
      }
    },
    120_000,
  );
});
