// The model behind the leak suite (docs/contract/18-access.md): a history of
// writes replayed in memory, so that what each caller may see at each read
// point is computed from the rules alone, never from the service's answers.
import type { AccessLevel, Grants } from "../../src/access/index.js";
import { maySee } from "../../src/access/index.js";

export type PayloadType = "datasource" | "patient" | "study" | "series" | "file" | "annotation" | "artefact" | "dataset";

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
  /** Order of first creation: `children` and `/children` list oldest first. */
  readonly seq: number;
}

export type State = ReadonlyMap<string, Readonly<Node>>;

/** A write in REST terms, and how it changes the model. */
export type Op =
  | { kind: "create"; node: Omit<Node, "deleted" | "seq"> }
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
  /** Each delete's root -> the identifiers it tombstoned (a cascading restore undoes exactly those). */
  readonly deletedBy: Map<string, string[]>;
}

export function newModel(): Model {
  return { states: [new Map()], deletedBy: new Map() };
}

export function current(model: Model): State {
  return model.states[model.states.length - 1] as State;
}

function clone(state: State): Map<string, Node> {
  return new Map([...state].map(([k, v]) => [k, { ...v }]));
}

function activeDescendants(state: State, id: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    for (const n of [...state.values()].sort((a, b) => a.seq - b.seq)) {
      if (n.parent === p && !n.deleted) {
        out.push(n.id);
        walk(n.id);
      }
    }
  };
  walk(id);
  return out;
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
 * What a narrow writer's op does (docs/access.md, Writes), for the verbs the
 * suite sends as one: a create (a parent it may not see is a missing one; a
 * resource outside its grants afterwards is 403), a level change (an
 * identifier it may not see is unknown; a level that leaves the resource
 * outside its grants is 403) and a cascading delete (skipped when it may not
 * see the root; tombstones only what it may see, walking on only through
 * that). `ok` ops are applied with applyAs.
 */
export function writeOutcome(state: State, grants: Grants, op: Op): { status: 200 } | { status: 400 | 403; reason: string } {
  const sees = (id: string) => visible(grants, state, state, id);
  switch (op.kind) {
    case "create": {
      if (op.node.parent !== null && !sees(op.node.parent)) return { status: 400, reason: "DANGLING_PARENT" };
      const after = clone(state);
      after.set(op.node.id, { ...op.node, deleted: false, seq: after.size });
      return visible(grants, after, after, op.node.id) ? { status: 200 } : { status: 403, reason: "OUTSIDE_GRANTS" };
    }
    case "level": {
      if (!sees(op.id)) return { status: 400, reason: "UNKNOWN_IDENTIFIER" };
      const after = clone(state);
      (after.get(op.id) as Node).level = op.level;
      return visible(grants, after, after, op.id) ? { status: 200 } : { status: 403, reason: "OUTSIDE_GRANTS" };
    }
    case "delete":
      return { status: 200 };
    default:
      throw new Error(`the suite sends no ${op.kind} as a narrow writer`);
  }
}

/** The resources a cascading delete by these grants tombstones: the root and what they may see below, walking on only through that. */
export function deletedByGrants(state: State, grants: Grants, id: string): string[] {
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

/** Applies an op sent by a writer with these grants (a delete tombstones deletedByGrants). */
export function applyAs(model: Model, grants: Grants, op: Op): number {
  if (op.kind !== "delete") {
    apply(model, op);
    return 1;
  }
  const next = clone(current(model));
  const gone = deletedByGrants(next, grants, op.id);
  for (const id of gone) (next.get(id) as Node).deleted = true;
  if (gone.length > 0) model.deletedBy.set(op.id, gone);
  model.states.push(next);
  return gone.length;
}

export function apply(model: Model, op: Op): void {
  const next = clone(current(model));
  switch (op.kind) {
    case "create":
      next.set(op.node.id, { ...op.node, deleted: false, seq: next.size });
      break;
    case "level":
      (next.get(op.id) as Node).level = op.level;
      break;
    case "move":
      (next.get(op.id) as Node).parent = op.parent;
      break;
    case "patient-ds":
      (next.get(op.id) as Node).datasourceId = op.datasourceId;
      break;
    case "delete": {
      const gone = [op.id, ...activeDescendants(next, op.id)];
      for (const id of gone) (next.get(id) as Node).deleted = true;
      model.deletedBy.set(op.id, gone);
      break;
    }
    case "restore": {
      for (const id of model.deletedBy.get(op.id) ?? [op.id]) {
        const n = next.get(id) as Node;
        if (n.deleted) n.deleted = false;
      }
      model.deletedBy.delete(op.id);
      break;
    }
  }
  model.states.push(next);
}

/** The REST request that performs an op. */
export function restRequest(op: Op): { path: string; body: unknown } {
  switch (op.kind) {
    case "create": {
      const n = op.node;
      const fields: Record<string, unknown> = { identifier: n.id, payload_type: n.type, parent_identifier: n.parent, access_level: n.level };
      if (n.type === "datasource") fields.name = n.id;
      if (n.type === "patient") fields.datasource_id = n.datasourceId;
      if (n.type === "study") fields.modality = "CT";
      if (n.type === "series") fields.series_number = 1;
      if (n.type === "file") Object.assign(fields, { path: n.object ?? `s3://resources/${n.id}.dcm`, size_bytes: "10" });
      if (n.type === "artefact")
        Object.assign(fields, { repo: "r", branch: "main", path: n.artefact?.path ?? "m", status: n.artefact?.status ?? "succeeded", uri: n.object ?? `s3://resources/${n.id}.bin` });
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
 * Turns random numbers into an op that is valid in this state: the
 * generator draws choices, the state says what they mean, so every history
 * is one the service accepts.
 */
export function opFrom(state: State, counter: { n: number }, draw: readonly number[]): Op | undefined {
  const pick = <T>(xs: readonly T[], i: number): T | undefined => (xs.length === 0 ? undefined : xs[i % xs.length]);
  const all = [...state.values()].sort((a, b) => a.seq - b.seq);
  const active = all.filter((n) => !n.deleted);
  const ofType = (t: PayloadType) => active.filter((n) => n.type === t);
  const [kind = 0, a = 0, b = 0, c = 0] = draw;
  const level = LEVELS[c % 3] as AccessLevel;
  const fresh = (prefix: string) => `${prefix}-${++counter.n}`;
  let op: Op | undefined;
  // Leaves (files, annotations, artefacts) three times as often as the other kinds: the paths to objects and /artefacts/latest need them.
  switch (kind % 14) {
    case 0:
    case 1: {
      // Patients hang under a datasource node, not always their own one.
      const dsNode = pick(ofType("datasource"), a);
      op = { kind: "create", node: { id: fresh("pat"), type: "patient", parent: dsNode?.id ?? null, level, datasourceId: DATASOURCES[b % 3] } };
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
        const artefact = type === "artefact" ? { path: `m${Math.floor(b / 3) % 2}`, status: Math.floor(b / 6) % 4 === 0 ? ("failed" as const) : ("succeeded" as const) } : undefined;
        op = { kind: "create", node: { id: fresh(type.slice(0, 3)), type, parent: s.id, level, ...(artefact ? { artefact } : {}) } };
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
      // Re-parenting across datasources: a study to another patient, or a series to another study.
      const s = pick([...ofType("study"), ...ofType("series")], a);
      if (s) {
        const p = pick(ofType(s.type === "study" ? "patient" : "study"), b);
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
      const n = pick(active.filter((x) => x.type !== "datasource"), a);
      if (n) op = { kind: "delete", id: n.id };
      break;
    }
    case 11: {
      const n = pick(all.filter((x) => x.deleted), a);
      if (n) op = { kind: "restore", id: n.id };
      break;
    }
  }
  return op !== undefined && valid(state, op) ? op : undefined;
}
