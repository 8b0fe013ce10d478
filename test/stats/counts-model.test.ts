// Statistics against a model (docs/lineage.md): the counts the writes keep answer
// now, and their log at an as_of (kept by the writes, or derived from the
// history as migration 0028 derives it; the history before a restore), through creates, payload edits,
// moves (between datasources, to the root), level changes, a patient's
// datasource change, deletes and restores; per caller (docs/access.md: the
// granted datasources within the clearance, and at an as_of the stricter of
// the version then and the resource now), while another writer commits beside.
import { expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER, type AccessLevel, type Grants } from "../../src/access/index.js";
import { datasourceStats, type NewResource, type ResourcePatch } from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";

interface Node {
  type: string;
  parent: string | null;
  level: AccessLevel;
  /** A patient's payload datasource_id. */
  ds?: string;
  size: bigint;
  deleted: boolean;
}
type Model = Map<string, Node>;

const RANK: Record<AccessLevel, number> = { public: 0, internal: 1, restricted: 2 };

/** The datasource a resource is attributed to in `m` (docs/access.md): nearest patient up the chain, through tombstones. */
function attribution(m: Model, id: string): string | undefined {
  const self = m.get(id);
  if (self?.type === "datasource") return id;
  let cur: string | null = id;
  for (let guard = 0; cur !== null && guard < 1000; guard++) {
    const n: Node | undefined = m.get(cur);
    if (!n) return undefined;
    if (n.type === "patient") return n.ds;
    cur = n.parent;
  }
  return undefined;
}

function sees(g: Grants, ds: string | undefined, level: AccessLevel): boolean {
  if (RANK[level] > RANK[g.clearance]) return false;
  return ds === undefined || g.datasources === "all" || g.datasources.has(ds);
}

interface Expected {
  datasourceId: string;
  resources: number;
  byPayloadType: Record<string, number>;
  byAccessLevel: Record<string, number>;
  totalBytes: string;
  counted: string[];
}

/** What a caller with `g` reads at a point whose state was `then`, the store now being `now`. */
function expected(then: Model, now: Model, g: Grants, prefix: string): Expected[] {
  const out = new Map<string, Expected & { bytes: bigint }>();
  const entry = (ds: string) => {
    let e = out.get(ds);
    if (!e)
      out.set(
        ds,
        (e = {
          datasourceId: ds,
          resources: 0,
          byPayloadType: {},
          byAccessLevel: {},
          totalBytes: "0",
          counted: [],
          bytes: 0n,
        }),
      );
    return e;
  };
  const visible = (id: string, n: Node) => {
    const cur = now.get(id) as Node;
    return sees(g, attribution(then, id), n.level) && sees(g, attribution(now, id), cur.level);
  };
  // Listed: the datasources of the active patients the caller sees (this test registers none).
  for (const [id, n] of then)
    if (!n.deleted && n.type === "patient" && n.ds !== undefined && visible(id, n)) entry(n.ds);
  for (const [id, n] of then) {
    if (n.deleted || n.type === "datasource") continue;
    const ds = attribution(then, id);
    if (ds === undefined || !visible(id, n) || !out.has(ds)) continue;
    const e = entry(ds);
    e.resources += 1;
    e.byPayloadType[n.type] = (e.byPayloadType[n.type] ?? 0) + 1;
    e.byAccessLevel[n.level] = (e.byAccessLevel[n.level] ?? 0) + 1;
    e.bytes += n.type === "file" ? n.size : 0n;
    e.counted.push(id);
  }
  return [...out.values()]
    .filter((e) => e.datasourceId.startsWith(prefix))
    .sort((a, b) => (Buffer.from(a.datasourceId) < Buffer.from(b.datasourceId) ? -1 : 1))
    .map(({ bytes, ...e }) => ({ ...e, totalBytes: bytes.toString(), counted: e.counted.sort() }));
}

const clone = (m: Model): Model => new Map([...m].map(([k, v]) => [k, { ...v }]));

describeBackends("statistics against a model, now and at every past point", (backend) => {
  it("through creates, edits, moves, level and datasource changes, deletes and restores, per caller", async () => {
    const { store, db } = backend();
    const p = uid("cm");
    const [A, B, C] = [`${p}A`, `${p}B`, `${p}C`];
    const m: Model = new Map();
    const points: { at: string; state: Model }[] = [];
    const deletedBy = new Map<string, string[]>();
    // Another writer in a datasource of its own: one of its commits (a create, every third a level raise,
    // every fifth a delete) is under way during each check below, and its own counts are checked at the end.
    const w = uid("cw");
    const written = { files: 0, deleted: 0 };
    await store.create(LOCAL_CALLER, [
      { identifier: `${w}ds`, payloadType: "datasource", payload: { name: "writer" } },
      { identifier: `${w}p`, payloadType: "patient", parentIdentifier: `${w}ds`, payload: { datasource_id: `${w}D` } },
    ]);
    const writeBeside = async () => {
      const n = written.files + 1;
      written.files = n;
      await store.create(LOCAL_CALLER, [
        {
          identifier: `${w}f${n}`,
          payloadType: "file",
          parentIdentifier: `${w}p`,
          payload: { path: `s3://b/${w}f${n}`, size_bytes: "3" },
        },
      ]);
      if (n % 3 === 0) await store.update(LOCAL_CALLER, [[`${w}f${n}`, { accessLevel: "restricted" }]]);
      if (n % 5 === 0) {
        written.deleted += 1;
        await store.delete(LOCAL_CALLER, [`${w}f${n - 1}`]);
      }
    };

    const create = async (items: [string, string, string | null, AccessLevel, { ds?: string; size?: number }?][]) => {
      const batch: NewResource[] = items.map(([id, type, parent, level, extra]) => ({
        identifier: `${p}${id}`,
        payloadType: type,
        parentIdentifier: parent === null ? null : `${p}${parent}`,
        accessLevel: level,
        payload:
          type === "patient"
            ? { datasource_id: extra?.ds }
            : type === "file"
              ? { path: `s3://b/${p}${id}`, size_bytes: String(extra?.size ?? 0) }
              : type === "datasource"
                ? { name: id }
                : {},
      }));
      for (const [id, type, parent, level, extra] of items) {
        m.set(`${p}${id}`, {
          type,
          parent: parent === null ? null : `${p}${parent}`,
          level,
          ...(extra?.ds !== undefined ? { ds: extra.ds } : {}),
          size: BigInt(extra?.size ?? 0),
          deleted: false,
        });
      }
      return (await store.create(LOCAL_CALLER, batch)).at;
    };
    const update = async (id: string, patch: ResourcePatch) => {
      const n = m.get(`${p}${id}`) as Node;
      if (patch.parentIdentifier !== undefined) n.parent = patch.parentIdentifier;
      if (patch.accessLevel) n.level = patch.accessLevel as AccessLevel;
      if (patch.payload?.["datasource_id"] !== undefined) n.ds = patch.payload["datasource_id"] as string;
      if (patch.payload?.["size_bytes"] !== undefined) n.size = BigInt(patch.payload["size_bytes"] as string);
      return (await store.update(LOCAL_CALLER, [[`${p}${id}`, patch]])).at;
    };
    const del = async (id: string) => {
      // A cascade tombstones the resource and its active descendants.
      const gone: string[] = [];
      const walk = (x: string) => {
        gone.push(x);
        for (const [k, v] of m) if (v.parent === x && !v.deleted) walk(k);
      };
      walk(`${p}${id}`);
      for (const k of gone) (m.get(k) as Node).deleted = true;
      deletedBy.set(`${p}${id}`, gone);
      return (await store.delete(LOCAL_CALLER, [`${p}${id}`])).at;
    };
    const restore = async (id: string) => {
      for (const k of deletedBy.get(`${p}${id}`) ?? []) (m.get(k) as Node).deleted = false;
      return (await store.restore(LOCAL_CALLER, [`${p}${id}`])).at;
    };

    const callers: Grants[] = [
      ALL_GRANTS,
      { datasources: new Set([A]), clearance: "restricted" },
      { datasources: new Set([A, B]), clearance: "internal" },
      { datasources: new Set([B, C]), clearance: "public" },
      { datasources: "all", clearance: "internal" },
      { datasources: new Set(), clearance: "restricted" },
    ];

    const check = async (at: string | undefined, then: Model) => {
      const beside = writeBeside();
      try {
        for (const g of callers) {
          const rows = await datasourceStats(db, g, at !== undefined ? { asOf: at } : {});
          const got = rows.filter((r) => r.datasourceId.startsWith(p));
          const want = expected(then, m, g, p);
          const label = `${at ?? "now"} ${JSON.stringify({ ds: g.datasources === "all" ? "all" : [...g.datasources], c: g.clearance })}`;
          expect(
            got.map((r) => ({
              datasourceId: r.datasourceId,
              resources: r.resources,
              byPayloadType: r.byPayloadType,
              byAccessLevel: r.byAccessLevel,
              totalBytes: r.totalBytes,
            })),
            label,
          ).toEqual(want.map(({ counted: _c, ...e }) => e));
          // The last change among the counted resources, as they read at that point.
          for (const [i, w] of want.entries()) {
            const read = await store.read(ALL_GRANTS, w.counted, {
              excludeChildren: true,
              ...(at !== undefined ? { asOf: at } : {}),
            });
            expect(got[i]?.lastUpdatedAt ?? null, label).toBe(
              read
                .map((r) => r.updatedAt)
                .sort()
                .at(-1) ?? null,
            );
          }
          // One datasource alone answers the same entry.
          for (const r of got)
            expect(
              await datasourceStats(db, g, { datasourceId: r.datasourceId, ...(at !== undefined ? { asOf: at } : {}) }),
              label,
            ).toEqual([r]);
        }
      } finally {
        await beside;
      }
    };
    const step = async (at: string) => {
      await check(undefined, m);
      points.push({ at, state: clone(m) });
    };

    await step(
      await create([
        ["dsx", "datasource", null, "public"],
        ["pa1", "patient", null, "internal", { ds: A }],
        ["pa2", "patient", "dsx", "restricted", { ds: A }],
        ["pb1", "patient", null, "public", { ds: B }],
        ["sa1", "study", "pa1", "internal"],
        ["sa2", "study", "pa2", "public"],
        ["sb1", "study", "pb1", "public"],
        ["xa1", "series", "sa1", "internal"],
        ["xa2", "series", "sa2", "restricted"],
        ["xb1", "series", "sb1", "public"],
        ["fa1", "file", "xa1", "internal", { size: 10 }],
        ["fa2", "file", "xa1", "public", { size: 20 }],
        ["fa3", "file", "xa2", "internal", { size: 40 }],
        ["fb1", "file", "xb1", "public", { size: 80 }],
        ["fb2", "file", "xb1", "restricted", { size: 160 }],
        ["loose", "file", null, "public", { size: 1 }],
      ]),
    );
    await step(await update("fa1", { payload: { size_bytes: "1000" } }));
    await step(await update("sa1", { parentIdentifier: `${p}pb1` })); // A -> B with its subtree
    await step(await update("xb1", { accessLevel: "restricted" }));
    await step(await update("fa2", { accessLevel: "restricted" }));
    await step(await update("pb1", { payload: { datasource_id: C } })); // B -> C with everything below
    await step(await del("sa2"));
    await step(await del("fb1"));
    await step(await restore("sa2"));
    await step(await update("xa1", { parentIdentifier: null })); // to no datasource
    await step(await update("xa1", { parentIdentifier: `${p}sa2` })); // back under A
    await step(
      await create([
        ["fa4", "file", "xa1", "public", { size: 7 }],
        ["pa3", "patient", null, "public", { ds: A }],
      ]),
    );
    await step(await del("pa1"));
    await step(await update("pa2", { accessLevel: "public" }));

    // Every past point, read from today's store (from the log of counts for a caller who sees everything).
    for (const { at, state } of points) await check(at, state);
    // The log derived from the history (migration 0028): at every point the writes logged, each
    // group holds the values the writes kept, and every past point reads the same from it, for every caller.
    // Fixed-width UTC stamps, to the microsecond: they compare as strings.
    const STAMP = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')`;
    type LogRow = { ds: string; pt: string; al: string; at: string; n: string; bytes: string; last: string | null };
    const logRows = async () =>
      (
        await db.query<LogRow>(
          `SELECT datasource_id AS ds, payload_type AS pt, access_level AS al, ${STAMP("tx_from")} AS at, resources::text AS n,
                  total_bytes::text AS bytes, ${STAMP("last_updated_at")} AS last
             FROM datasource_counts_log ORDER BY datasource_id, payload_type, access_level, tx_from`,
        )
      ).rows;
    const kept = await logRows();
    await db.query("SELECT datasource_counts_rebuild()");
    const derived = await logRows();
    const valueAt = (rows: LogRow[], g: LogRow) =>
      rows.filter((r) => r.ds === g.ds && r.pt === g.pt && r.al === g.al && r.at <= g.at).at(-1);
    expect(kept.length).toBeGreaterThan(points.length);
    for (const k of kept) {
      const d = valueAt(derived, k);
      const values = (r: LogRow | undefined) =>
        r === undefined || r.n === "0" ? { n: "0", bytes: "0", last: null } : { n: r.n, bytes: r.bytes, last: r.last };
      expect(values(d), JSON.stringify(k)).toEqual(values(k));
    }
    for (const { at, state } of points) await check(at, state);
    // A log that starts now (as after a restore): the past is read from the history, for every caller.
    await db.query("SELECT datasource_counts_restart()");
    for (const { at, state } of points) await check(at, state);
    await check(undefined, m);
    // The writer ran beside every check, and its own counts are exact too.
    expect(written.files).toBeGreaterThan(points.length);
    const [mine] = await datasourceStats(db, ALL_GRANTS, { datasourceId: `${w}D` });
    expect(mine?.resources).toBe(1 + written.files - written.deleted);
    expect(mine?.totalBytes).toBe(String(3 * (written.files - written.deleted)));
  });
});
