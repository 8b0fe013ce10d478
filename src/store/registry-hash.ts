// How the registry hashes an external uid, and the key chains that say which
// keys a stored hash depends on.
//
// A chain is the list of key ids a row's hash went through, in the order
// they were applied: the first key hashes the uid (with its kind and scope,
// length-prefixed so ("a", "bc") and ("ab", "c") never hash alike), each
// next key hashes the hash before it. A row registered under key p holds
// chain [p]; an online rehash without the uids can only wrap, turning [p]
// into [p, q], so that row still needs p. Only re-deriving the row from its
// uid (which the registry does not keep) moves it off p. Which keys are
// listed, and in what order, changes none of this: the order only names the
// key that hashes new rows.
import { createHmac } from "node:crypto";

/** One HMAC key of the registry and the id the store knows it by. */
export interface RegistryKey {
  readonly id: string;
  readonly secret: Buffer;
}

/** Key ids never hold ">" (config.ts), so a chain's name is its ids joined, and two chains never share a name. */
export function chainName(ids: readonly string[]): string {
  return ids.join(">");
}

export type UidKind = "patient" | "study";

/** The hash of one uid under a chain of keys, applied in order. */
export function chainHash(keys: readonly RegistryKey[], kind: UidKind, scope: string, uid: string): Buffer {
  const [first, ...rest] = keys;
  if (first === undefined) throw new Error("a key chain needs a key");
  const h = createHmac("sha256", first.secret);
  for (const part of [kind, scope, uid]) {
    const bytes = Buffer.from(part, "utf8");
    const len = Buffer.alloc(4);
    len.writeUInt32BE(bytes.length);
    h.update(len).update(bytes);
  }
  let hash: Buffer = h.digest();
  for (const key of rest) hash = wrapHash(key, hash);
  return hash;
}

/** One more link: what an online rehash does to a stored hash. */
export function wrapHash(key: RegistryKey, hash: Buffer): Buffer {
  return createHmac("sha256", key.secret).update(hash).digest();
}

// The fingerprint the store keeps per key id: an HMAC of this fixed label
// under the key. It tells a key from another without revealing either.
const FINGERPRINT_LABEL = "resource-store registry key fingerprint v1";

export function keyFingerprint(key: RegistryKey): Buffer {
  return createHmac("sha256", key.secret).update(FINGERPRINT_LABEL).digest();
}
