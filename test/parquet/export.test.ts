import { parquetMetadata, parquetReadObjects, parquetSchema } from "hyparquet";
import { beforeAll, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { describeBackends, uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";
import { clients, type Clients } from "../query/harness.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";

type Req = MessageInitShape<typeof QueryRequestSchema>;

async function fileOf(c: Clients, req: Req): Promise<{ buf: ArrayBuffer; chunks: number; types: string[] }> {
  const parts: Uint8Array[] = [];
  const types: string[] = [];
  for await (const body of c.query.queryParquet(req)) {
    parts.push(body.data);
    types.push(body.contentType);
  }
  const total = parts.reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return { buf: out.buffer, chunks: parts.length, types };
}

describeBackends("parquet export", (backend) => {
  let c: Clients;
  let p: string;
  const N = 2500;
  beforeAll(async () => {
    // Small batches and chunks so the test crosses batch, row group and chunk boundaries.
    c = clients(backend(), { exportBatchRows: 700, chunkBytes: 16 * 1024 });
    p = uid("pq");
    await c.resources.create({
      resources: Array.from({ length: N }, (_, i) => {
        const metrics: Record<string, number> = i % 3 ? { auc: i / 10 } : {};
        return {
          identifier: `${p}-${String(i).padStart(5, "0")}`,
          license: i % 5 === 0 ? undefined : `L${i % 7}`,
          derivedFrom: i % 2 ? [`${p}-a`, `${p}-b${i}`] : [],
          payload: {
            case: "artefact" as const,
            value: { repo: `r${i}`, branch: "main", path: "m.onnx", status: "succeeded", metrics },
          },
        };
      }),
    });
    await c.resources.create({
      resources: [
        {
          identifier: `${p}-file`,
          payload: { case: "file", value: { path: "s3://b/x", sizeBytes: 9007199254740993n } },
        },
      ],
    });
  });

  const base = (): Req => ({
    filters: [{ field: "identifier", op: "starts_with", value: { kind: { case: "stringValue", value: p } } }],
  });

  it("streams one file with typed columns in query order", async () => {
    const { buf, chunks, types } = await fileOf(c, {
      ...base(),
      payloadType: "artefact",
      sortBy: "identifier",
      sortOrder: "desc",
    });
    expect(chunks).toBeGreaterThan(1);
    expect(new Set(types)).toEqual(new Set(["application/octet-stream"]));
    const meta = parquetMetadata(buf);
    expect(Number(meta.num_rows)).toBe(N);
    expect(meta.row_groups.every((g) => g.columns.every((col) => col.meta_data?.codec === "SNAPPY"))).toBe(true);
    const schema = parquetSchema(meta);
    const names = schema.children.map((ch) => ch.element.name);
    expect(names).toEqual([
      "identifier",
      "payload_type",
      "parent_identifier",
      "license",
      "access_level",
      "derived_from",
      "created_at",
      "updated_at",
      "version",
      "repo",
      "branch",
      "path",
      "commit",
      "status",
      "uri",
      "metrics",
    ]);
    const el = (n: string) => schema.children.find((ch) => ch.element.name === n)?.element;
    expect(el("version")?.type).toBe("INT64");
    expect(el("created_at")?.type).toBe("INT64");
    expect(el("created_at")?.logical_type?.type).toBe("TIMESTAMP");
    const rows = await parquetReadObjects({ file: buf });
    expect(rows.map((r) => r.identifier)).toEqual(
      Array.from({ length: N }, (_, i) => `${p}-${String(N - 1 - i).padStart(5, "0")}`),
    );
    const r7 = rows.find((r) => r.identifier === `${p}-00007`) as Record<string, unknown>;
    expect(r7.license).toBe("L0");
    expect(r7.derived_from).toEqual([`${p}-a`, `${p}-b7`]);
    expect(JSON.parse(r7.metrics as string)).toEqual({ auc: 0.7 });
    expect(r7.commit).toBeNull();
    expect(r7.version).toBe(1n);
    const r0 = rows.find((r) => r.identifier === `${p}-00000`) as Record<string, unknown>;
    expect(r0.license).toBeNull();
    expect(r0.derived_from).toEqual([]);
    const read = await c.resources.read({ identifiers: [`${p}-00007`] });
    const created = read.resources[0]?.createdAt ?? "";
    const ts = r7.created_at as Date;
    expect(ts.toISOString().slice(0, 23)).toBe(created.slice(0, 23));
  });

  it("honours select_columns, limit and cursors, and writes untyped payloads as JSON", async () => {
    const page = await c.query.query({ ...base(), sortBy: "identifier", sortOrder: "asc", limit: 10 });
    const { buf } = await fileOf(c, {
      ...base(),
      sortBy: "identifier",
      sortOrder: "asc",
      cursor: page.nextCursor ?? "",
      limit: 5,
      selectColumns: ["version"],
    });
    const rows = await parquetReadObjects({ file: buf });
    expect(rows.map((r) => Object.keys(r))).toEqual(Array(5).fill(["identifier", "payload_type", "version"]));
    expect(rows.map((r) => r.identifier)).toEqual(
      Array.from({ length: 5 }, (_, i) => `${p}-${String(10 + i).padStart(5, "0")}`),
    );
    const file = await fileOf(c, { ...base(), identifiers: [`${p}-file`] });
    const [row] = await parquetReadObjects({ file: file.buf });
    expect(JSON.parse((row as Record<string, string>).payload ?? "")).toEqual({
      path: "s3://b/x",
      size_bytes: "9007199254740993",
    });
  });

  it("writes a valid empty file and rejects bad requests", async () => {
    const { buf } = await fileOf(c, { ...base(), payloadType: "study" });
    expect(Number(parquetMetadata(buf).num_rows)).toBe(0);
    await expectCode(fileOf(c, { ...base(), limit: 0 }), Code.InvalidArgument);
    await expectCode(fileOf(c, { ...base(), cursor: "x.y" }), Code.InvalidArgument);
  });

  it("stops early when the client stops reading", async () => {
    let n = 0;
    for await (const _ of c.query.queryParquet({ ...base() })) {
      n += 1;
      break;
    }
    expect(n).toBe(1);
    // The backend is still usable afterwards (the export's transaction ended).
    expect((await c.query.count({ ...base() })).count).toBe(BigInt(N + 1));
  });
});
