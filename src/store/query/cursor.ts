// Opaque page cursors: base64url(JSON) "." base64url(HMAC-SHA256). The
// signature makes a cursor unforgeable, the query hash ties it to the query
// that made it, and the pinned read point keeps later pages on the snapshot
// of the first one.
import { createHmac, timingSafeEqual } from "node:crypto";
import { invalidArgument } from "../../errors.js";
import type { Keyset } from "./compile.js";

export interface CursorState {
  /** The pinned read point (RFC 3339 UTC with microseconds, or -infinity). */
  readonly at: string;
  readonly after: Keyset;
  /** QueryPlan.hash of the query that made it. */
  readonly hash: string;
  /** The as_of the first page was asked at (it may lie after the point it pinned). */
  readonly asOf?: string | undefined;
}

export interface CursorCodec {
  encode(state: CursorState): string;
  /** Throws invalid_argument on anything but a cursor of this query exactly as encode wrote it. */
  decode(token: string, hash: string): CursorState;
}

export function createCursorCodec(secret: string | Uint8Array): CursorCodec {
  const key = typeof secret === "string" ? Buffer.from(secret, "utf8") : Buffer.from(secret);
  const sign = (body: string) => createHmac("sha256", key).update(body).digest();
  const bad = () => invalidArgument("cursor is invalid", "INVALID_CURSOR");
  return {
    encode(state) {
      const body = Buffer.from(
        JSON.stringify([1, state.at, state.after.value, state.after.identifier, state.hash, state.asOf ?? null]),
      ).toString("base64url");
      return `${body}.${sign(body).toString("base64url")}`;
    },
    decode(token, hash) {
      const dot = token.indexOf(".");
      if (dot <= 0 || token.length > 4096) throw bad();
      const body = token.slice(0, dot);
      // Compared as text: decoding first would accept other spellings of the
      // same bytes (unused low bits, padding, stray characters).
      const mac = Buffer.from(token.slice(dot + 1), "utf8");
      const want = Buffer.from(sign(body).toString("base64url"), "utf8");
      if (mac.length !== want.length || !timingSafeEqual(mac, want)) throw bad();
      let parsed: unknown;
      try {
        parsed = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
      } catch {
        throw bad();
      }
      if (!Array.isArray(parsed) || parsed.length !== 6 || parsed[0] !== 1) throw bad();
      const [, at, value, identifier, h, asOf] = parsed as [number, unknown, unknown, unknown, unknown, unknown];
      if (typeof at !== "string" || typeof identifier !== "string" || typeof h !== "string") throw bad();
      if (value !== null && typeof value !== "string") throw bad();
      if (asOf !== null && typeof asOf !== "string") throw bad();
      if (h !== hash) throw invalidArgument("cursor belongs to another query", "INVALID_CURSOR");
      return { at, after: { value, identifier }, hash: h, ...(asOf !== null ? { asOf } : {}) };
    },
  };
}
