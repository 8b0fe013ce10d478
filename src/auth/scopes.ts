// The three scopes (README, "Authentication"; each operation's scope in docs/api.md) and what each grants. Scopes are
// ranked: admin grants write and read, write grants read. A writer has to
// read back what it wrote (registry resolve, read after create), and an
// administrator is trusted with everything; a write-only token would buy no
// safety, since writes answer with what is stored.

export type Scope = "read" | "write" | "admin";

const RANK: Readonly<Record<Scope, number>> = { read: 1, write: 2, admin: 3 };

/** The stricter of two scopes. */
export function stricter(a: Scope, b: Scope): Scope {
  return RANK[b] > RANK[a] ? b : a;
}

export function isScope(value: string): value is Scope {
  return Object.hasOwn(RANK, value);
}

/** Whether holding `held` lets a caller do what needs `needed`. */
export function grants(held: ReadonlySet<Scope>, needed: Scope): boolean {
  for (const s of held) if (RANK[s] >= RANK[needed]) return true;
  return false;
}
