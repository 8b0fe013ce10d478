// An in-memory model of the store's semantics (docs/contract/01-resources.md, docs/contract/02-mutations.md, docs/contract/03-time.md), used by
// the model-based test. Deliberately simple: maps and loops, no SQL.
import { Code } from "@connectrpc/connect";

export interface ModelRow {
  payloadType: string;
  parent: string | null;
  license: string | null;
  name: string;
  createdAt: string;
  updatedAt: string;
  version: number;
  deleted: boolean;
  deletedBy: string | null;
}

export type State = Map<string, ModelRow>;

export interface CreateItem {
  id: string;
  parent: string | null;
  name: string;
}
export interface UpdateEntry {
  id: string;
  parent?: string | null;
  license?: string | null;
  /** null = clear the required name (invalid). */
  name?: string | null;
  payloadType?: string;
  isDeleted?: boolean;
}

export type Batch =
  | { kind: "create"; items: CreateItem[] }
  | { kind: "update"; entries: UpdateEntry[] }
  | { kind: "delete"; ids: string[]; cascade: boolean }
  | { kind: "restore"; ids: string[]; cascade: boolean };

export type Outcome = { ok: true; count: number } | { ok: false; code: Code };

function clone(s: State): State {
  return new Map([...s].map(([k, v]) => [k, { ...v }]));
}

const active = (s: State, id: string | null) => id !== null && s.get(id)?.deleted === false;

function cycleThrough(s: State, start: string): boolean {
  const seen = new Set<string>();
  let cur = s.get(start)?.parent ?? null;
  while (cur !== null && !seen.has(cur)) {
    if (cur === start) return true;
    seen.add(cur);
    cur = s.get(cur)?.parent ?? null;
  }
  return false;
}

/** Applies a batch at stamp t; returns the outcome and the next state (unchanged on error). */
export function apply(state: State, batch: Batch, t: string): { outcome: Outcome; next: State } {
  const fail = (code: Code) => ({ outcome: { ok: false, code } as Outcome, next: state });
  const next = clone(state);
  switch (batch.kind) {
    case "create": {
      const ids = batch.items.map((i) => i.id);
      if (new Set(ids).size !== ids.length) return fail(Code.InvalidArgument);
      if (batch.items.some((i) => i.parent === i.id)) return fail(Code.InvalidArgument);
      if (ids.some((id) => active(state, id))) return fail(Code.FailedPrecondition);
      for (const i of batch.items) {
        const old = state.get(i.id);
        next.set(i.id, {
          payloadType: "datasource",
          parent: i.parent,
          license: null,
          name: i.name,
          createdAt: t,
          updatedAt: t,
          version: (old?.version ?? 0) + 1,
          deleted: false,
          deletedBy: null,
        });
      }
      for (const i of batch.items) {
        if (i.parent !== null && !active(next, i.parent)) return fail(Code.FailedPrecondition);
      }
      if (batch.items.some((i) => cycleThrough(next, i.id))) return fail(Code.FailedPrecondition);
      return { outcome: { ok: true, count: batch.items.length }, next };
    }
    case "update": {
      if (batch.entries.some((e) => e.parent === e.id)) return fail(Code.InvalidArgument);
      // A field that the named payload type does not have is malformed whatever is stored.
      if (batch.entries.some((e) => e.payloadType === "study" && e.name !== undefined))
        return fail(Code.InvalidArgument);
      if (batch.entries.some((e) => !state.has(e.id))) return fail(Code.FailedPrecondition);
      let count = 0;
      const changedParents: string[] = [];
      for (const e of batch.entries) {
        const cur = state.get(e.id) as ModelRow;
        if (e.payloadType !== undefined && e.payloadType !== cur.payloadType) return fail(Code.FailedPrecondition);
        if (e.name === null) return fail(Code.InvalidArgument);
        const deleted = e.isDeleted ?? cur.deleted;
        const content = e.parent !== undefined || e.license !== undefined || e.name !== undefined;
        if (cur.deleted && deleted && content) return fail(Code.FailedPrecondition);
        const row: ModelRow = {
          ...cur,
          parent: e.parent === undefined ? cur.parent : e.parent,
          license: e.license === undefined ? cur.license : e.license,
          name: e.name ?? cur.name,
          deleted,
        };
        const changed =
          row.deleted !== cur.deleted ||
          row.parent !== cur.parent ||
          row.license !== cur.license ||
          row.name !== cur.name;
        if (!changed) continue;
        if (row.parent !== null && row.parent !== cur.parent) changedParents.push(e.id);
        row.deletedBy = !deleted ? null : cur.deleted ? cur.deletedBy : t;
        row.updatedAt = t;
        row.version = cur.version + 1;
        next.set(e.id, row);
        count += 1;
      }
      for (const id of changedParents) {
        const row = next.get(id) as ModelRow;
        if (!row.deleted && !active(next, row.parent)) return fail(Code.FailedPrecondition);
      }
      if (changedParents.some((id) => cycleThrough(next, id))) return fail(Code.FailedPrecondition);
      return { outcome: { ok: true, count }, next };
    }
    case "delete": {
      const hit = new Set<string>();
      const visit = (id: string) => {
        if (hit.has(id) || !active(state, id)) return;
        hit.add(id);
        if (!batch.cascade) return;
        for (const [cid, c] of state) if (c.parent === id) visit(cid);
      };
      batch.ids.forEach(visit);
      for (const id of hit) {
        const r = next.get(id) as ModelRow;
        Object.assign(r, { deleted: true, deletedBy: t, updatedAt: t, version: r.version + 1 });
      }
      return { outcome: { ok: true, count: hit.size }, next };
    }
    case "restore": {
      const hit = new Set<string>();
      const visit = (id: string, by: string | null | undefined) => {
        const r = state.get(id);
        if (hit.has(id) || !r || !r.deleted || (by !== undefined && r.deletedBy !== by)) return;
        hit.add(id);
        if (!batch.cascade) return;
        for (const [cid, c] of state) if (c.parent === id) visit(cid, r.deletedBy);
      };
      for (const id of batch.ids) visit(id, undefined);
      for (const id of hit) {
        const r = next.get(id) as ModelRow;
        Object.assign(r, { deleted: false, deletedBy: null, updatedAt: t, version: r.version + 1 });
      }
      return { outcome: { ok: true, count: hit.size }, next };
    }
  }
}

/** What a read of `ids` answers in `state` (children included). */
export function readModel(state: State, ids: readonly string[]) {
  const out = [];
  for (const id of ids) {
    const r = state.get(id);
    if (!r || r.deleted) continue;
    const children = [...state]
      .filter(([, c]) => c.parent === id && !c.deleted)
      .sort(([ia, a], [ib, b]) =>
        a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : ia < ib ? -1 : ia > ib ? 1 : 0,
      )
      .map(([cid]) => cid);
    out.push({
      identifier: id,
      payloadType: r.payloadType,
      parentIdentifier: r.parent,
      license: r.license,
      accessLevel: "internal",
      derivedFrom: [],
      payload: { name: r.name },
      createdAt: r.createdAt,
      updatedAt: r.updatedAt,
      version: r.version,
      children,
    });
  }
  return out;
}
