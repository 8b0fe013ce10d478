// The model behind the leak suite (docs/contract/18-access.md): a history of
// writes replayed in memory, so that what each caller may see at each read
// point is computed from the rules alone, never from the service's answers.
import type { AccessLevel, Grants } from "../../src/access/index.js";
import { accessRank, ALL_GRANTS, maySee } from "../../src/access/index.js";

export type PayloadType =
  "datasource" | "patient" | "study" | "series" | "file" | "annotation" | "artefact" | "dataset";

export interface Node {
  readonly id: string;
  readonly type: PayloadType;
  parent: string | null;
  level: AccessLevel;
  /** A patient's datasource_id. */
  datasourceId?: string;
  /** A file's path or an artefact's uri (an object the suite uploads before the create). */
  object?: string;
  /** An artefact's repository path and status (`/artefacts/latest` looks them up). */
  artefact?: { path: string; status: "succeeded" | "failed" };
  deleted: boolean;
  /** The stamp of the delete that tombstoned it (null when active): a cascading restore brings back the tombstones of the same stamp. */
  deletedBy: number | null;
  /** Order of first creation: `children` and `/children` list oldest first. */
  readonly seq: number;
}

export type State = ReadonlyMap<string, Readonly<Node>>;

/** A write in REST terms, and how it changes the model. */
export type Op =
  | {
      kind: "create";
      node: Omit<Node, "deleted" | "deletedBy" | "seq">;
      /** Over a tombstone of the same identifier. */ over?: true;
    }
  | { kind: "level"; id: string; level: AccessLevel }
  | { kind: "move"; id: string; parent: string }
  | { kind: "patient-ds"; id: string; datasourceId: string }
  | { kind: "delete"; id: string }
  | { kind: "restore"; id: string };

export const DATASOURCES = ["ds-1", "ds-2", "ds-3"] as const;
export const LEVELS: readonly AccessLevel[] = ["public", "internal", "restricted"];

/** The datasource a node is attributed to: section 8 (a patient's own, else its nearest patient ancestor's; a datasource its own id). */
export function attribution(state: State, id: string): string | null {
  let at = state.get(id);
  const seen = new Set<string>();
  while (at !== undefined && !seen.has(at.id)) {
    seen.add(at.id);
    if (at.type === "patient") return at.datasourceId ?? null;
    if (at.type === "datasource" && at.id === id) return at.id;
    at = at.parent === null ? undefined : state.get(at.parent);
  }
  return null;
}

/** Whether the grants may see `id` at a read point whose state is `then`, the current state being `now` (the stricter of both). */
export function visible(grants: Grants, then: State, now: State, id: string): boolean {
  const t = then.get(id);
  const n = now.get(id);
  if (t === undefined || t.deleted || n === undefined) return false;
  return maySee(grants, attribution(then, id), t.level) && maySee(grants, attribution(now, id), n.level);
}

/** Whether the grants may see a version whose state is `then` (a tombstone included: history and events show deletes), the current state being `now`. */
export function versionVisible(grants: Grants, then: State, now: State, id: string): boolean {
  const t = then.get(id);
  const n = now.get(id);
  if (t === undefined || n === undefined) return false;
  return maySee(grants, attribution(then, id), t.level) && maySee(grants, attribution(now, id), n.level);
}

export interface Model {
  /** The state after each applied op (index 0: before any). */
  readonly states: State[];
}

export function newModel(): Model {
  return { states: [new Map()] };
}

export function current(model: Model): State {
  return model.states[model.states.length - 1] as State;
}

function clone(state: State): Map<string, Node> {
  return new Map([...state].map(([k, v]) => [k, { ...v }]));
}

function isAncestor(state: State, maybeAncestor: string, of: string): boolean {
  let at = state.get(of)?.parent ?? null;
  const seen = new Set<string>();
  while (at !== null && !seen.has(at)) {
    if (at === maybeAncestor) return true;
    seen.add(at);
    at = state.get(at)?.parent ?? null;
  }
  return false;
}

/** Whether the op is one the service accepts in this state (the generator only sends those). */
export function valid(state: State, op: Op): boolean {
  const activeNode = (id: string) => state.get(id) !== undefined && state.get(id)?.deleted === false;
  switch (op.kind) {
    case "create":
      if (op.over === true) {
        // Over a tombstone, under an active parent that is not below it (that would close a cycle).
        return (
          state.get(op.node.id)?.deleted === true &&
          op.node.parent !== null &&
          activeNode(op.node.parent) &&
          op.node.parent !== op.node.id &&
          !isAncestor(state, op.node.id, op.node.parent)
        );
      }
      return !state.has(op.node.id) && (op.node.parent === null || activeNode(op.node.parent));
    case "level":
    case "patient-ds":
      return activeNode(op.id);
    case "move":
      return activeNode(op.id) && activeNode(op.parent) && op.parent !== op.id && !isAncestor(state, op.id, op.parent);
    case "delete":
      return activeNode(op.id);
    case "restore": {
      const n = state.get(op.id);
      // Restored under an active parent only, so the model needs no rule for orphans.
      return n !== undefined && n.deleted && (n.parent === null || activeNode(n.parent));
    }
  }
}

/**
 * What an op sent by a writer with these grants does (docs/access.md,
 * Writes; docs/contract/18-access.md), for a writer that may see everything too:
 * - create: a parent it may not see is a missing one (400 DANGLING_PARENT);
 *   a resource outside its grants afterwards is 403 OUTSIDE_GRANTS;
 * - level, move, patient-ds (updates): an identifier it may not see is
 *   unknown (400 UNKNOWN_IDENTIFIER); a new parent it may not see is a
 *   missing one (400 DANGLING_PARENT; the current parent named again is no
 *   new parent: nothing changes); a resource outside its grants afterwards
 *   (a level above the clearance, a datasource not granted) is 403, and so
 *   is one that takes any resource below it from a datasource to none (or
 *   from or to a datasource not granted), for a writer without every
 *   datasource; and, for a writer below `restricted`, one that takes a
 *   resource above its clearance (one it cannot see, below the one written)
 *   to another datasource or to none, whatever datasources it holds (docs/contract/18-access.md);
 * - create over a tombstone: as a create, and as a move for what lies below
 *   the tombstone (the tombstone itself is replaced, not moved: a hidden one
 *   answers as a never-used identifier);
 * - delete and restore always answer 200: what it may not see is skipped
 *   (see tombstonedBy, restoredBy).
 * Refused ops write nothing; the others are applied with applyAs.
 */
export function writeOutcome(
  state: State,
  grants: Grants,
  op: Op,
): { status: 200 } | { status: 400 | 403; reason: string } {
  const sees = (id: string) => visible(grants, state, state, id);
  const refused = (reason: string) => ({
    status: reason === "OUTSIDE_GRANTS" ? (403 as const) : (400 as const),
    reason,
  });
  const after = clone(state);
  switch (op.kind) {
    case "create": {
      if (op.node.parent !== null && !sees(op.node.parent)) return refused("DANGLING_PARENT");
      after.set(op.node.id, { ...op.node, deleted: false, deletedBy: null, seq: nextSeq(after) });
      if (op.over === true && movesOutOfGrants(grants, state, after, op.node.id)) return refused("OUTSIDE_GRANTS");
      return visible(grants, after, after, op.node.id) ? { status: 200 } : refused("OUTSIDE_GRANTS");
    }
    case "level":
    case "patient-ds":
    case "move": {
      if (!sees(op.id)) return refused("UNKNOWN_IDENTIFIER");
      const n = after.get(op.id) as Node;
      if (op.kind === "level") n.level = op.level;
      if (op.kind === "patient-ds") n.datasourceId = op.datasourceId;
      if (op.kind === "move" && op.parent !== n.parent) {
        if (!sees(op.parent)) return refused("DANGLING_PARENT");
        n.parent = op.parent;
      }
      if (movesOutOfGrants(grants, state, after)) return refused("OUTSIDE_GRANTS");
      return visible(grants, after, after, op.id) ? { status: 200 } : refused("OUTSIDE_GRANTS");
    }
    case "delete":
    case "restore":
      return { status: 200 };
  }
}

/**
 * Whether a write by these grants takes any resource (seen or not, active or
 * tombstoned; `replaced`, a tombstone created over, aside) from a datasource
 * to another or to none where it may not: from a datasource to none, or from
 * or to a datasource not granted, for a writer without every datasource; and
 * any such change of a resource above the writer's clearance, whatever its
 * datasources (docs/access.md, Writes).
 */
function movesOutOfGrants(grants: Grants, before: State, after: State, replaced?: string): boolean {
  const granted = grants.datasources;
  for (const [id, n] of after) {
    if (id === replaced) continue;
    const from = attribution(before, id);
    const to = attribution(after, id);
    if (from === null || from === to) continue;
    // (A check of the service removed: see the notes in leak.test.ts.)
    if (accessRank(n.level) > accessRank(grants.clearance)) return true;
    if (granted !== "all" && (!granted.has(from) || to === null || !granted.has(to))) return true;
  }
  return false;
}

/** The next order of creation: a create over a tombstone is created anew (its created_at is the new one's). */
function nextSeq(state: State): number {
  let max = -1;
  for (const n of state.values()) max = Math.max(max, n.seq);
  return max + 1;
}

/** The resources a cascading delete by these grants tombstones: the root and what they may see below, walking on only through that. */
export function tombstonedBy(state: State, grants: Grants, id: string): string[] {
  const sees = (x: string) => visible(grants, state, state, x);
  if (!sees(id)) return [];
  const out: string[] = [id];
  const walk = (p: string) => {
    for (const n of [...state.values()].sort((a, b) => a.seq - b.seq)) {
      if (n.parent === p && !n.deleted && sees(n.id)) {
        out.push(n.id);
        walk(n.id);
      }
    }
  };
  walk(id);
  return out;
}

/**
 * The resources a cascading restore by these grants brings back
 * (docs/contract/02-mutations.md): the tombstoned root if they may see it, and below it the
 * tombstones of the same delete (the same stamp) that they may see, walking
 * on only through those; an active or invisible root restores nothing.
 */
export function restoredBy(state: State, grants: Grants, id: string): string[] {
  const sees = (x: string) => versionVisible(grants, state, state, x);
  const root = state.get(id);
  if (root === undefined || !root.deleted || !sees(id)) return [];
  const out: string[] = [id];
  const walk = (p: string) => {
    for (const n of [...state.values()].sort((a, b) => a.seq - b.seq)) {
      if (n.parent === p && n.deleted && n.deletedBy === root.deletedBy && sees(n.id)) {
        out.push(n.id);
        walk(n.id);
      }
    }
  };
  walk(id);
  return out;
}

/**
 * Applies an op the service accepted from a writer with these grants and
 * returns the count it answers (created, updated, deleted, restored): an
 * update that changes nothing counts 0.
 */
export function applyAs(model: Model, grants: Grants, op: Op): number {
  const next = clone(current(model));
  let count = 1;
  switch (op.kind) {
    case "create":
      next.set(op.node.id, { ...op.node, deleted: false, deletedBy: null, seq: nextSeq(next) });
      break;
    case "level": {
      const n = next.get(op.id) as Node;
      if (n.level === op.level) count = 0;
      n.level = op.level;
      break;
    }
    case "move": {
      const n = next.get(op.id) as Node;
      if (n.parent === op.parent) count = 0;
      n.parent = op.parent;
      break;
    }
    case "patient-ds": {
      const n = next.get(op.id) as Node;
      if (n.datasourceId === op.datasourceId) count = 0;
      n.datasourceId = op.datasourceId;
      break;
    }
    case "delete": {
      // Each delete's stamp is its own (the service's is the commit's clock value).
      const gone = tombstonedBy(next, grants, op.id);
      for (const id of gone) Object.assign(next.get(id) as Node, { deleted: true, deletedBy: model.states.length });
      count = gone.length;
      break;
    }
    case "restore": {
      const back = restoredBy(next, grants, op.id);
      for (const id of back) Object.assign(next.get(id) as Node, { deleted: false, deletedBy: null });
      count = back.length;
      break;
    }
  }
  model.states.push(next);
  return count;
}

/** Applies an op sent by the unrestricted writer. */
export function apply(model: Model, op: Op): number {
  return applyAs(model, ALL_GRANTS, op);
}

/** The key of the count in the answer to an op. */
export function countKey(op: Op): "created" | "updated" | "deleted" | "restored" {
  return op.kind === "create"
    ? "created"
    : op.kind === "delete"
      ? "deleted"
      : op.kind === "restore"
        ? "restored"
        : "updated";
}

/** The REST request that performs an op. */
export function restRequest(op: Op): { path: string; body: unknown } {
  switch (op.kind) {
    case "create": {
      const n = op.node;
      const fields: Record<string, unknown> = {
        identifier: n.id,
        payload_type: n.type,
        parent_identifier: n.parent,
        access_level: n.level,
      };
      if (n.type === "datasource") fields.name = n.id;
      if (n.type === "patient") fields.datasource_id = n.datasourceId;
      if (n.type === "study") fields.modality = "CT";
      if (n.type === "series") fields.series_number = 1;
      if (n.type === "file")
        Object.assign(fields, { path: n.object ?? `s3://resources/${n.id}.dcm`, size_bytes: "10" });
      if (n.type === "artefact")
        Object.assign(fields, {
          repo: "r",
          branch: "main",
          path: n.artefact?.path ?? "m",
          status: n.artefact?.status ?? "succeeded",
          uri: n.object ?? `s3://resources/${n.id}.bin`,
        });
      if (n.type === "annotation") fields.label = "l";
      if (n.type === "dataset") fields.name = n.id;
      return { path: "/resources/create", body: { resources: [fields] } };
    }
    case "level":
      return { path: "/resources/update", body: { updates: { [op.id]: { access_level: op.level } } } };
    case "move":
      return { path: "/resources/update", body: { updates: { [op.id]: { parent_identifier: op.parent } } } };
    case "patient-ds":
      return { path: "/resources/update", body: { updates: { [op.id]: { datasource_id: op.datasourceId } } } };
    case "delete":
      return { path: "/resources/delete", body: { identifiers: [op.id], cascade: true } };
    case "restore":
      return { path: "/v2/resources/restore", body: { identifiers: [op.id], cascade: true } };
  }
}

/**
 * Where a writer with narrow grants aims half of its ops: at resources it
 * may see, a patient of its datasource, levels within its clearance. Its
 * other ops draw from everything, as the unrestricted writer's do, so they
 * go into and out of its grants.
 */
export interface Aim {
  readonly grants: Grants;
  readonly datasource: string;
}

/**
 * Turns random numbers into an op that is valid in this state: the
 * generator draws choices, the state says what they mean, so every history
 * is one the service accepts (from a writer that may see everything).
 */
export function opFrom(state: State, counter: { n: number }, draw: readonly number[], aim?: Aim): Op | undefined {
  const pick = <T>(xs: readonly T[], i: number): T | undefined => (xs.length === 0 ? undefined : xs[i % xs.length]);
  const [kind = 0, a = 0, b = 0, c = 0, d = 0] = draw;
  const inside = aim !== undefined && d % 2 === 0 ? aim : undefined;
  const all = [...state.values()]
    .sort((x, y) => x.seq - y.seq)
    .filter((n) => inside === undefined || versionVisible(inside.grants, state, state, n.id));
  const active = all.filter((n) => !n.deleted);
  const ofType = (t: PayloadType) => active.filter((n) => n.type === t);
  const within = inside === undefined ? LEVELS : LEVELS.filter((l) => maySee(inside.grants, null, l));
  const level = within[c % within.length] as AccessLevel;
  const fresh = (prefix: string) => `${prefix}-${++counter.n}`;
  let op: Op | undefined;
  // Leaves (files, annotations, artefacts) three times as often as the other kinds: the paths to objects and /artefacts/latest need them.
  switch (kind % 15) {
    case 0:
    case 1: {
      // Patients hang under a datasource node, not always their own one.
      const dsNode = pick(ofType("datasource"), a);
      op = {
        kind: "create",
        node: {
          id: fresh("pat"),
          type: "patient",
          parent: dsNode?.id ?? null,
          level,
          datasourceId: inside?.datasource ?? DATASOURCES[b % 3],
        },
      };
      break;
    }
    case 2: {
      const p = pick(ofType("patient"), a);
      if (p) op = { kind: "create", node: { id: fresh("stu"), type: "study", parent: p.id, level } };
      break;
    }
    case 3: {
      const s = pick(ofType("study"), a);
      if (s) op = { kind: "create", node: { id: fresh("ser"), type: "series", parent: s.id, level } };
      break;
    }
    case 4:
    case 12:
    case 13: {
      const s = pick(ofType("series"), a);
      if (s) {
        // Files, annotations and artefacts (of two repository paths, some failed: /artefacts/latest skips those).
        const type = (["file", "annotation", "artefact"] as const)[b % 3] as PayloadType;
        const artefact =
          type === "artefact"
            ? {
                path: `m${Math.floor(b / 3) % 2}`,
                status: Math.floor(b / 6) % 4 === 0 ? ("failed" as const) : ("succeeded" as const),
              }
            : undefined;
        // One file in four names the object of a resource already there (any, seen or not, tombstones too):
        // the object is reached through it only where the others that name it are seen (docs/contract/18-access.md).
        const claimed =
          type === "file" && Math.floor(b / 3) % 4 === 0
            ? pick(
                [...state.values()].filter((x) => x.object !== undefined).sort((x, y) => x.seq - y.seq),
                c,
              )
            : undefined;
        op = {
          kind: "create",
          node: {
            id: fresh(type.slice(0, 3)),
            type,
            parent: s.id,
            level,
            ...(artefact ? { artefact } : {}),
            ...(claimed ? { object: claimed.object } : {}),
          },
        };
      }
      break;
    }
    case 5:
      // No patient above: governed by clearance alone.
      op = { kind: "create", node: { id: fresh("set"), type: "dataset", parent: null, level } };
      break;
    case 6:
    case 7: {
      const n = pick(active, a);
      if (n) op = { kind: "level", id: n.id, level };
      break;
    }
    case 8: {
      // Re-parenting across datasources: a study to another patient (or, one time in four, straight
      // under a datasource node, where it has no datasource), or a series to another study.
      const s = pick([...ofType("study"), ...ofType("series")], a);
      if (s) {
        const p = pick(ofType(s.type === "series" ? "study" : b % 4 === 0 ? "datasource" : "patient"), b);
        if (p) op = { kind: "move", id: s.id, parent: p.id };
      }
      break;
    }
    case 9: {
      const p = pick(ofType("patient"), a);
      if (p) op = { kind: "patient-ds", id: p.id, datasourceId: DATASOURCES[b % 3] as string };
      break;
    }
    case 10: {
      const n = pick(
        active.filter((x) => x.type !== "datasource"),
        a,
      );
      if (n) op = { kind: "delete", id: n.id };
      break;
    }
    case 11: {
      const n = pick(
        all.filter((x) => x.deleted),
        a,
      );
      if (n) op = { kind: "restore", id: n.id };
      break;
    }
    case 14: {
      // A create over a tombstone (any: the writer may not see it), of its own type, under a parent of the right type.
      const t = pick(
        [...state.values()]
          .sort((x, y) => x.seq - y.seq)
          .filter((x) => x.deleted && (x.type === "study" || x.type === "series" || x.type === "annotation")),
        a,
      );
      const parentType: PayloadType | undefined =
        t?.type === "study"
          ? "patient"
          : t?.type === "series"
            ? "study"
            : t?.type === "annotation"
              ? "series"
              : undefined;
      const p = parentType === undefined ? undefined : pick(ofType(parentType), b);
      if (t && p) op = { kind: "create", over: true, node: { id: t.id, type: t.type, parent: p.id, level } };
      break;
    }
  }
  return op !== undefined && valid(state, op) ? op : undefined;
}
