// Which object paths a caller may reach (docs/contract/18-access.md, object
// storage): a path is answered for only when it is the `path` of a `file` or
// `dataset`, or the `uri` of an `artefact`, that the caller may see now.
import type { Grants } from "../access/index.js";
import type { Queryable } from "./db.js";
import { andVisible, visibleNow } from "./visibility.js";

/**
 * Whether an active resource the caller may see now names `path` (s3://bucket/key)
 * as its file or dataset path or its artefact uri. Containment lets the GIN
 * index on payload find the candidates.
 */
export async function objectPathVisible(db: Queryable, grants: Grants, path: string): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(
    `SELECT EXISTS (
        SELECT 1 FROM resources r
         WHERE NOT r.is_deleted
           AND ((r.payload @> $1::jsonb AND r.payload_type IN ('file', 'dataset'))
             OR (r.payload @> $2::jsonb AND r.payload_type = 'artefact'))${andVisible(visibleNow(grants, "r"))}
     ) AS ok`,
    [JSON.stringify({ path }), JSON.stringify({ uri: path })],
  );
  return rows[0]?.ok === true;
}
