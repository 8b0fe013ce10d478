// Dump and restore of a whole store (docs/dump-format.md): every version of every
// resource with its period, and the registry's rows and key fingerprints, as
// one gzip stream of NDJSON lines (format version 2 on: each section's columns
// named once, each record an array of values) closed by a trailer with
// counts and a SHA-256. The format, and why this works on the database and
// not over the API, is docs/dump-format.md: change both together.
//
// One job a module:
// - dump-format.ts: the format's name and version, its sections and their
//   columns, the header, a version's kind, the trailer's SHA-256;
// - dump-encoder.ts: the versions section's records from PostgreSQL's binary
//   COPY (read by copy-binary.ts);
// - dump-writer.ts: the writer, in one read-only snapshot;
// - dump-lines.ts: a record's payload text as the line has it;
// - dump-restore.ts: the reader, in one transaction that commits only once
//   the trailer has checked out.
// This module is what the store's index takes of them.
export { DUMP_FORMAT_VERSION, DumpError } from "./dump-format.js";
export { checkSince, writeDump } from "./dump-writer.js";
export { payloadText, elementText } from "./dump-lines.js";
export { restoreDump } from "./dump-restore.js";
