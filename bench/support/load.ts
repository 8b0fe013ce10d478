// Loading a database quickly in the store's exact shape: the store's own
// create statements (captured, see capture.ts) replayed through pg, one
// transaction a batch, as the service would write them.
import { createResources, migrate, openDatabase, ts } from "../../src/store/index.js";
import { captureStatements, replay } from "./capture.js";
import { connect } from "./database.js";
import { batchAt } from "./workload.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

export async function migrateDatabase(url: string): Promise<void> {
  const db = await openDatabase({ databaseUrl: url, poolSize: 1 });
  try {
    await migrate(db);
  } finally {
    await db.close();
  }
}

/** Creates `batches` batches of the workload (see workload.ts) with the store's statements. */
export async function loadThroughStoreSql(
  url: string,
  prefix: string,
  batches: number,
  batchSize: number,
): Promise<void> {
  const client = await connect(url);
  try {
    for (let b = 0; b < batches; b++) {
      await replay(
        client,
        await captureStatements((db) => createResources(db, LOCAL_CALLER, batchAt(prefix, b, batchSize))),
      );
    }
  } finally {
    await client.end();
  }
}

/** The database clock: the stamp of the last write, RFC 3339 with microseconds. */
export async function clockNow(url: string): Promise<string> {
  const client = await connect(url);
  try {
    const { rows } = await client.query<{ at: string }>(`SELECT ${ts("last")} AS at FROM clock`);
    return rows[0]!.at;
  } finally {
    await client.end();
  }
}
