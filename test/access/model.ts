// A small model of docs/contract/18-access.md for the access tests: the tree as a
// plain map per point in time, and what a caller may see, computed from the
// rules alone (never from the store's SQL).
import { maySee, type AccessLevel, type Grants } from "../../src/access/index.js";

export interface Node {
  readonly type: string;
  readonly parent: string | null;
  readonly level: AccessLevel;
  /** A patient's payload datasource_id. */
  readonly ds?: string;
  readonly deleted: boolean;
  /** The stamp of the delete that tombstoned it (cascading restores follow it). */
  readonly deletedBy: string | null;
  readonly createdAt: string;
}

export type State = ReadonlyMap<string, Node>;

/** Section 8 / 18: a patient's datasource_id, a datasource's own identifier, else the nearest patient ancestor's (through tombstones). */
export function attribution(state: State, id: string): string | null {
  const node = state.get(id);
  if (!node) return null;
  if (node.type === "patient") return node.ds ?? null;
  if (node.type === "datasource") return id;
  let cur = node.parent;
  for (let guard = 0; cur !== null && guard < 1000; guard++) {
    const up = state.get(cur);
    if (!up) return null;
    if (up.type === "patient") return up.ds ?? null;
    cur = up.parent;
  }
  return null;
}

function seesIn(state: State, grants: Grants, id: string): boolean {
  const node = state.get(id);
  return node !== undefined && maySee(grants, attribution(state, id), node.level);
}

/** The version of `id` in `then` is visible: as it read then and as the resource reads now (the stricter). */
export function visible(then: State, now: State, grants: Grants, id: string): boolean {
  return seesIn(then, grants, id) && seesIn(now, grants, id);
}

export function active(state: State, id: string): boolean {
  const n = state.get(id);
  return n !== undefined && !n.deleted;
}

/** Active immediate children, oldest first (ties by identifier). */
export function childrenOf(state: State, parent: string | null): string[] {
  return [...state.entries()]
    .filter(([, n]) => !n.deleted && n.parent === parent)
    .sort(([a, x], [b, y]) =>
      x.createdAt < y.createdAt ? -1 : x.createdAt > y.createdAt ? 1 : a < b ? -1 : a > b ? 1 : 0,
    )
    .map(([id]) => id);
}

/** Every active descendant reached through active resources (the full tree's walk). */
export function descendantsOf(state: State, root: string): string[] {
  const out: string[] = [];
  const todo = childrenOf(state, root);
  while (todo.length > 0) {
    const id = todo.shift() as string;
    out.push(id);
    todo.push(...childrenOf(state, id));
  }
  return out;
}

/** Ancestors nearest first (through tombstones), stopping before the first one the caller may not see. */
export function visibleParents(then: State, now: State, grants: Grants, id: string): string[] {
  const out: string[] = [];
  let cur = then.get(id)?.parent ?? null;
  for (let guard = 0; cur !== null && guard < 1000; guard++) {
    if (!then.has(cur) || !visible(then, now, grants, cur)) break;
    out.push(cur);
    cur = then.get(cur)?.parent ?? null;
  }
  return out;
}

/** Statistics attribution: through active resources only, from an active patient down. */
export function statsAttribution(state: State, id: string): string | null {
  let cur: string | null = id;
  for (let guard = 0; cur !== null && guard < 1000; guard++) {
    const n = state.get(cur);
    if (!n || n.deleted) return null;
    if (n.type === "patient") return n.ds ?? null;
    cur = n.parent;
  }
  return null;
}

/** A deterministic generator (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
