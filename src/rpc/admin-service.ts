// AdminService (resourcestore.v1 only). Admin scope is enforced by the auth
// interceptor, not here.
import { PassThrough } from "node:stream";
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import { RefreshMaterializedViewsResponseSchema } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import type { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { failedPrecondition, invalidArgument } from "../errors.js";
import type { Db } from "../store/index.js";
import { checkSince, DumpError, writeDump } from "../store/index.js";

export interface AdminServiceDeps {
  readonly db: Db;
}

/** The answer of RefreshMaterializedViews: the tree counts are kept by the writes, so there is never anything to refresh. */
const NOTHING_TO_REFRESH = "nothing to refresh: the tree counts are kept by every write in its own transaction";

/** What the header of an online dump names as the service's version (the offline command's too). */
const DUMP_SERVICE_VERSION = "0.1.0";

/**
 * The bytes of a dump file (src/store/dump-writer.ts writeDump, as the offline
 * command writes it) as a stream of chunks, pulled: the dump reads its next
 * rows only when the client has taken what came before (the PassThrough's
 * backpressure holds the cursor). A client that leaves ends the dump's
 * snapshot transaction.
 */
async function* dumpChunks(db: Db, since: string | undefined, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  const out = new PassThrough();
  const written = writeDump(db, out, {
    ...(since !== undefined ? { since } : {}),
    serviceVersion: DUMP_SERVICE_VERSION,
  });
  // Seen below through the stream's end or error; never unhandled.
  written.catch(() => undefined);
  const leave = () => out.destroy(new Error("the client went away"));
  signal.addEventListener("abort", leave);
  try {
    for await (const chunk of out as AsyncIterable<Buffer>) yield chunk;
    await written;
  } catch (err) {
    // The dump's own reason (a since past the last write), else what ended the stream.
    const reason = await written.then(
      () => err,
      (e: unknown) => e,
    );
    if (reason instanceof DumpError) throw failedPrecondition(reason.message);
    throw reason;
  } finally {
    signal.removeEventListener("abort", leave);
    // A consumer that stopped early: the dump's pipeline fails and its transaction ends.
    if (!out.destroyed) out.destroy();
  }
}

export function createAdminService(deps: AdminServiceDeps): ServiceImpl<typeof AdminService> {
  const { db } = deps;
  return {
    // Answers at once on every backend (docs/lineage.md): no view, no refresh.
    refreshMaterializedViews() {
      return Promise.resolve(create(RefreshMaterializedViewsResponseSchema, { message: NOTHING_TO_REFRESH }));
    },
    async *dump(req, ctx) {
      if (req.since !== undefined) {
        try {
          checkSince(req.since);
        } catch (err) {
          throw invalidArgument((err as Error).message);
        }
      }
      for await (const data of dumpChunks(db, req.since, ctx.signal))
        yield create(HttpBodySchema, { contentType: "application/gzip", data });
    },
  };
}
