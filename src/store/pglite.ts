// The embedded backend: PGlite in this process, in memory or under
// `${dataDir}/pglite`. Statements are never named here (one connection, no
// server to parse them again).
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PGlite, type Transaction } from "@electric-sql/pglite";
import { guard } from "./db-errors.js";
import { asText, KEEP_AS_TEXT, SNAPSHOT_MODE, type Db, type Queryable } from "./db.js";

export async function openPglite(dataDir: string | undefined): Promise<Db> {
  let dir: string | undefined;
  if (dataDir !== undefined) {
    dir = join(dataDir, "pglite");
    await mkdir(dir, { recursive: true });
  }
  const parsers = Object.fromEntries([...KEEP_AS_TEXT].map((oid) => [oid, asText]));
  const lite = await PGlite.create({ ...(dir !== undefined ? { dataDir: dir } : {}), parsers });
  const wrap = (q: Pick<PGlite, "query" | "exec">): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const res = await q.query<R>(sql, params ? [...params] : undefined);
      return { rows: res.rows };
    },
    async exec(sql: string) {
      await q.exec(sql);
    },
  });
  // A transaction can also COPY rows in (restore, dump.ts), from a blob: PGlite's COPY reads the device /dev/blob.
  const wrapTx = (tx: Transaction): Queryable => ({
    ...wrap(tx),
    async copyIn(table, columns, rows) {
      await tx.query(`COPY ${table} (${columns.join(", ")}) FROM '/dev/blob'`, [], { blob: new Blob([rows]) });
    },
  });
  const root = wrap(lite);
  return {
    kind: "pglite",
    capabilities: { streamedBatches: false, listen: true, embedded: true },
    ...(dataDir !== undefined ? { dataDir } : {}),
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    transaction: (fn, options) =>
      guard(() =>
        lite.transaction(async (tx) => {
          if (options?.readOnlySnapshot === true) await tx.query(`SET TRANSACTION ${SNAPSHOT_MODE}`);
          return fn(wrapTx(tx));
        }),
      ),
    ping: () => guard(async () => void (await lite.query("SELECT 1"))),
    // The notification arrives in-process when the writing transaction commits; the connection is never lost.
    listen: async (channel, handlers) => {
      const off = await lite.listen(channel, () => handlers.onNotify());
      return {
        close: async () => {
          if (!lite.closed) await off();
        },
      };
    },
    close: async () => {
      if (!lite.closed) await lite.close();
    },
  };
}
