// The cursor signing key: the configured one (CURSOR_SECRET), or one
// generated once and kept in the database (secrets) so every service process
// on it signs alike. The first writer wins; everyone reads what it wrote.
// (Unlike the registry's key, it protects nothing the database holds: it
// only keeps clients from forging cursors.)
import { randomBytes } from "node:crypto";
import type { Queryable } from "./db.js";

export async function loadCursorSecret(db: Queryable, configured: string | undefined): Promise<string> {
  if (configured !== undefined && configured !== "") return configured;
  await db.query("INSERT INTO secrets (name, value) VALUES ('cursor', $1) ON CONFLICT (name) DO NOTHING", [
    randomBytes(32).toString("base64url"),
  ]);
  const { rows } = await db.query<{ value: string }>("SELECT value FROM secrets WHERE name = 'cursor'");
  const value = rows[0]?.value;
  if (value === undefined) throw new Error("cursor secret missing");
  return value;
}
