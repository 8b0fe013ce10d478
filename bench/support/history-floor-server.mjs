// The floor of bench history-page (docs/benchmarks/history-and-audit.md, "History page against a floor"): the leanest Node service that
// answers the same gRPC History call. node:http2 (gRPC needs it) and a pg
// pool of one connection; per call it reads the gRPC frame, decodes the
// HistoryRequest (identifier, limit), runs the page's lean statement as a
// named (prepared) statement, builds the HistoryResponse the service builds
// (the same message: stamps as RFC 3339 UTC with microseconds, the payload
// as its typed message) and writes it with the project's planned encoder
// (src/protobuf, the service's own; the same bytes as protobuf-es's
// toBinary), in one gRPC frame, then the trailers. No pipeline, auth,
// validation, cursor, logging or metrics: what the service costs beyond
// this is its own layers, not Node, http2, pg or the encoding.
// Runs the compiled project (dist/, built by `npm run bench`).
// Input: HISTORY_SQL (the statement: $1 the identifier, $2 the page size),
// DATABASE_URL, PG_OPTIONS. Prints {"msg":"listening","port":N}.
import http2 from "node:http2";
import pg from "pg";
import { HistoryRequestSchema, HistoryResponseSchema } from "../../dist/gen/resourcestore/type/v1/resource_pb.js";
import { plannedFromBinary, plannedToBinary } from "../../dist/src/protobuf/index.js";
import { payloadJsonToMessage } from "../../dist/src/schema/payload-json.js";
import { payloadTypeOf } from "../../dist/src/schema/payload-registry.js";

const PATH = "/resourcestore.v2.ResourceService/History";
const DEFAULT_LIMIT = 100;
const statement = { name: "history_floor", text: process.env.HISTORY_SQL };

// int8 and the stamps as the text PostgreSQL writes, as the service's pool keeps them (src/store/db.ts).
const KEEP_AS_TEXT = new Set([20, 1082, 1114, 1184]);
const asText = (x) => x;
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: 1,
  // The stamps in UTC, so they convert by string (the service formats them in SQL with to_char).
  options: `${process.env.PG_OPTIONS ?? ""} -c TimeZone=UTC`,
  types: { getTypeParser: (oid, format) => (KEEP_AS_TEXT.has(oid) ? asText : pg.types.getTypeParser(oid, format)) },
});
pool.on("error", () => {});

/** "2026-11-26 21:45:44.1234+00" -> "2026-11-26T21:45:44.123400Z" (the service's to_char format). */
function rfc3339(text) {
  const dot = text.indexOf(".", 19);
  const frac = dot < 0 ? "" : text.slice(dot + 1, text.length - 3);
  return `${text.slice(0, 10)}T${text.slice(11, 19)}.${frac.padEnd(6, "0")}Z`;
}

function version(r) {
  const type = payloadTypeOf(r.payload_type);
  if (!type) throw new Error(`stored payload_type ${r.payload_type} is unknown`);
  const resource = {
    $typeName: "resourcestore.type.v1.Resource",
    identifier: r.identifier,
    derivedFrom: r.derived_from,
    createdAt: rfc3339(r.created_at),
    updatedAt: rfc3339(r.updated_at),
    version: BigInt(r.version),
    children: [],
    payload: { case: type.name, value: payloadJsonToMessage(type, r.payload) },
    accessLevel: r.access_level,
  };
  if (r.parent_identifier !== null) resource.parentIdentifier = r.parent_identifier;
  if (r.license !== null) resource.license = r.license;
  return {
    $typeName: "resourcestore.type.v1.ResourceVersion",
    version: BigInt(r.version),
    at: rfc3339(r.at),
    actor: r.actor,
    kind: r.kind,
    resource,
  };
}

async function history(body) {
  if (body.length < 5 || body[0] !== 0) throw new Error("expected one uncompressed gRPC frame");
  const req = plannedFromBinary(HistoryRequestSchema, body.subarray(5, 5 + body.readUInt32BE(1)));
  const client = await pool.connect();
  try {
    const { rows } = await client.query({ ...statement, values: [req.identifier, req.limit ?? DEFAULT_LIMIT] });
    const bytes = plannedToBinary(HistoryResponseSchema, {
      $typeName: "resourcestore.type.v1.HistoryResponse",
      versions: rows.map(version),
    });
    const frame = Buffer.allocUnsafe(5 + bytes.length);
    frame[0] = 0;
    frame.writeUInt32BE(bytes.length, 1);
    frame.set(bytes, 5);
    return frame;
  } finally {
    client.release();
  }
}

// The stream API, not the compatibility layer's request and response objects.
const server = http2.createServer();
server.on("stream", (stream, headers) => {
  if (headers[":path"] !== PATH) {
    stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
    return;
  }
  const chunks = [];
  stream.on("data", (c) => chunks.push(c));
  stream.on("end", () => {
    history(Buffer.concat(chunks)).then(
      (frame) => {
        stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
        stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        stream.end(frame);
      },
      (err) => {
        stream.respond(
          {
            ":status": 200,
            "content-type": "application/grpc",
            "grpc-status": "13",
            "grpc-message": encodeURIComponent(String(err)),
          },
          { endStream: true },
        );
      },
    );
  });
});
server.listen(0, "127.0.0.1", () =>
  process.stdout.write(`${JSON.stringify({ msg: "listening", port: server.address().port })}\n`),
);
// The client keeps its http2 session open: stop without waiting for it.
const stop = () => void pool.end().then(() => process.exit(0));
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
