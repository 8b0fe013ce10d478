// Which object paths a caller may reach (docs/contract/18-access.md, object
// storage): a path is answered for only when it is the `path` of a `file` or
// `dataset`, or the `uri` of an `artefact`, that the caller may see now, and
// no resource the caller may not see names it, now or in any earlier
// version. Any writer can name any path in a resource of its own: without
// the second rule it could name the object of a resource it may not see
// (another datasource's, or one raised above its clearance) and so reach
// the bytes, or hand them to every caller by naming them at `public`.
import type { Grants } from "../access/index.js";
import type { Queryable } from "./db.js";
import { andVisible, visibleNow } from "./visibility.js";

/** The path a row names (migration 24 indexes it), over a row aliased `r` whose type is one of OBJECT_TYPES. */
const objectPathOf = (r: string) =>
  `(CASE ${r}.payload_type WHEN 'artefact' THEN ${r}.payload->>'uri' ELSE ${r}.payload->>'path' END)`;
const OBJECT_TYPES = `('file', 'dataset', 'artefact')`;

/**
 * Whether an active resource the caller may see now names `path` (s3://bucket/key)
 * as its file or dataset path or its artefact uri, and no resource the
 * caller may not see now names it, in its current row (tombstones too) or
 * in any superseded version. Containment lets the GIN index on payload find
 * the candidates; migration 24's expression indexes find the claimants.
 */
export async function objectPathVisible(db: Queryable, grants: Grants, path: string): Promise<boolean> {
  const now = visibleNow(grants, "h");
  const hidden =
    now === undefined
      ? ""
      : ` AND NOT EXISTS (
        SELECT 1 FROM resources h
         WHERE ${objectPathOf("h")} = $3 AND h.payload_type IN ${OBJECT_TYPES} AND NOT ${now})
      AND NOT EXISTS (
        SELECT 1 FROM resource_versions v JOIN resources h ON h.identifier = v.identifier
         WHERE ${objectPathOf("v")} = $3 AND v.payload_type IN ${OBJECT_TYPES} AND NOT ${now})`;
  const { rows } = await db.query<{ ok: boolean }>(
    `SELECT EXISTS (
        SELECT 1 FROM resources r
         WHERE NOT r.is_deleted
           AND ((r.payload @> $1::jsonb AND r.payload_type IN ('file', 'dataset'))
             OR (r.payload @> $2::jsonb AND r.payload_type = 'artefact'))${andVisible(visibleNow(grants, "r"))}
     )${hidden} AS ok`,
    [JSON.stringify({ path }), JSON.stringify({ uri: path }), ...(now === undefined ? [] : [path])],
  );
  return rows[0]?.ok === true;
}
