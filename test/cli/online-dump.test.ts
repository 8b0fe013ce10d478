// Backups as an operator takes them (docs/operations.md): `resource-store --url URL
// dump` is an online backup over the API (AdminService.Dump, admin scope,
// also GET /admin/dump), the same file as an offline dump, consistent at
// one instant while writers run, with its read-audit line; restore refuses
// --url. The offline dump refuses a DATA_DIR without a store (creating
// none) and an embedded store another process holds, and refuses a --since
// that is not a stamp with a zone before it opens anything.
import { spawn } from "node:child_process";
import { access, cp, mkdir, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { dumpCommands } from "../../src/cli/dump.js";
import { createResources, migrate, openDatabase, readResources, type Db } from "../../src/store/index.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";

const root = join(import.meta.dirname, "../..");
const pgOk = await postgresReachable();
if (!pgOk && REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");

const ADMIN = "adm-token";
const READER = "read-token";

/** The dump and restore commands under a program with the global options, as bin/resource-store has them. */
async function run(env: Record<string, string>, args: string[]): Promise<{ out: string; err: string; code: number }> {
  let out = "";
  let err = "";
  const program = new Command("resource-store")
    .option("-q, --quiet")
    .option("--url <url>")
    .option("--token <token>")
    .option("--token-file <file>")
    .exitOverride();
  for (const c of dumpCommands({ env, stdout: (t) => (out += t), stderr: (t) => (err += t) })) program.addCommand(c);
  const before = process.exitCode;
  process.exitCode = 0;
  await program.parseAsync(["node", "resource-store", "--quiet", ...args]);
  const code = Number(process.exitCode ?? 0);
  process.exitCode = before;
  return { out, err, code };
}

/**
 * A dump's lines with the header's written_at (the one thing two dumps of one
 * instant differ in) and the trailer's checksum (over the header) taken out.
 */
function bodyOf(gz: Buffer): string[] {
  const lines = gunzipSync(gz).toString("utf8").trimEnd().split("\n");
  const header = JSON.parse(lines[0]!) as Record<string, unknown>;
  const trailer = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
  expect(header.written_at).toBeTypeOf("string");
  expect(trailer.sha256).toMatch(/^[0-9a-f]{64}$/);
  delete header.written_at;
  delete trailer.sha256;
  return [JSON.stringify(header), ...lines.slice(1, -1), JSON.stringify(trailer)];
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

describe.skipIf(!pgOk)("the online dump, on PostgreSQL", () => {
  let tdb: TestDatabase;
  let server: TestServer;
  let dir: string;
  let auditFile: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-online-dump-"));
    auditFile = join(dir, "audit.log");
    tdb = await createTestDatabase();
    server = await startTestServer({
      DATABASE_URL: tdb.url,
      API_TOKENS: `${ADMIN}=admin;${READER}=read`,
      AUDIT_LOG: auditFile,
    });
    await createResources(server.app.db, LOCAL_CALLER, [
      { identifier: "od-root", payloadType: "datasource", payload: { name: "root" } },
    ]);
  });
  afterAll(async () => {
    await server?.close();
    await tdb?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it("is one instant while writers run: every batch whole, and it restores", async () => {
    // Writers commit pairs, each pair one batch: a dump of one instant holds both of a pair or neither.
    let stop = false;
    let pairs = 0;
    const writer = (async () => {
      while (!stop) {
        const n = pairs++;
        await createResources(server.app.db, LOCAL_CALLER, [
          { identifier: `pair-${n}-a`, payloadType: "datasource", payload: { name: "a" } },
          { identifier: `pair-${n}-b`, payloadType: "datasource", payload: { name: "b" } },
        ]);
      }
    })();
    const file = join(dir, "online.rsdump.gz");
    let dumped;
    try {
      await new Promise((r) => setTimeout(r, 300));
      dumped = await run({}, ["--url", server.url, "--token", ADMIN, "dump", "-o", file]);
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      stop = true;
      await writer;
    }
    expect(dumped.err).toBe("");
    expect(dumped.code).toBe(0);
    expect(dumped.out).toMatch(new RegExp(`^dumped \\d+ versions \\(until .+\\) from ${server.url}\\n$`));
    expect((await stat(file)).mode & 0o777).toBe(0o600);

    const ids = bodyOf(await readFile(file))
      .map((l) => JSON.parse(l) as unknown)
      .filter((r): r is unknown[] => Array.isArray(r) && typeof r[0] === "string" && r[0].startsWith("pair-"))
      .map((r) => r[0] as string);
    const dumpedPairs = new Set(ids.map((id) => id.replace(/-[ab]$/, "")));
    // Writes ran before, during and after: the dump holds some pairs, not all, and each whole.
    expect(dumpedPairs.size).toBeGreaterThan(0);
    expect(dumpedPairs.size).toBeLessThan(pairs);
    for (const p of dumpedPairs)
      expect(ids.filter((id) => id.startsWith(`${p}-`)).sort()).toEqual([`${p}-a`, `${p}-b`]);

    const target = await createTestDatabase();
    try {
      const restored = await run({ DATABASE_URL: target.url, REGISTRY_SECRET: TEST_REGISTRY_SECRET }, [
        "restore",
        file,
      ]);
      expect(restored.err).toBe("");
      expect(restored.out).toBe(`restored ${ids.length + 1} versions\n`);
    } finally {
      await target.drop();
    }
  });

  it("writes the offline dump's bytes, and GET /admin/dump too, with a line in the read audit", async () => {
    const online = join(dir, "same-online.rsdump.gz");
    const offline = join(dir, "same-offline.rsdump.gz");
    expect((await run({}, ["--url", server.url, "--token", ADMIN, "dump", "-o", online])).code).toBe(0);
    expect((await run({ DATABASE_URL: tdb.url }, ["dump", "-o", offline])).code).toBe(0);
    const offlineBody = bodyOf(await readFile(offline));
    expect(bodyOf(await readFile(online))).toEqual(offlineBody);

    const res = await fetch(`${server.url}/admin/dump`, { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/gzip");
    expect(bodyOf(Buffer.from(await res.arrayBuffer()))).toEqual(offlineBody);

    const lines = (await readFile(auditFile, "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const dumps = lines.filter((l) => l.method === "resourcestore.v1.AdminService/Dump");
    expect(dumps.length).toBeGreaterThanOrEqual(3);
    expect(dumps.at(-1)).toMatchObject({ outcome: "ok", request: {}, count: null });
  });

  it("needs the admin scope, and refuses a since without a zone", async () => {
    const denied = await fetch(`${server.url}/admin/dump`, { headers: { authorization: `Bearer ${READER}` } });
    expect(denied.status).toBe(403);
    const file = join(dir, "denied.rsdump.gz");
    const cli = await run({}, ["--url", server.url, "--token", READER, "dump", "-o", file]);
    expect(cli.code).toBe(1);
    expect(cli.err).toMatch(/^error: the online dump from .* failed: permission_denied/);
    expect(await exists(file)).toBe(false);

    const noZone = await fetch(`${server.url}/admin/dump?since=2026-11-26T15:06:20`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(noZone.status).toBe(400);
    expect(((await noZone.json()) as { message: string }).message).toMatch(/RFC 3339 timestamp with Z or an offset/);
  });

  it("restore refuses --url, saying it works offline", async () => {
    const r = await run({}, ["--url", server.url, "restore", join(dir, "online.rsdump.gz")]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^error: restore works offline only/);
  });
});

describe("the offline dump's refusals", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-offline-dump-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("refuses a DATA_DIR that holds no store, and creates none", async () => {
    const missing = join(dir, "nothing-here");
    const a = await run({ DATA_DIR: missing }, ["dump", "-o", join(dir, "a.rsdump.gz")]);
    expect(a.code).toBe(1);
    expect(a.err).toMatch(/^error: DATA_DIR .*nothing-here holds no store/);
    expect(await exists(missing)).toBe(false);
    expect(await exists(join(dir, "a.rsdump.gz"))).toBe(false);

    const empty = join(dir, "empty");
    await mkdir(empty);
    const b = await run({ DATA_DIR: empty }, ["dump", "-o", join(dir, "b.rsdump.gz")]);
    expect(b.err).toMatch(/holds no store/);
    expect(await exists(join(empty, "pglite"))).toBe(false);
  });

  it("refuses --token without --url rather than ignoring it", async () => {
    const r = await run({ DATA_DIR: join(dir, "nothing-here") }, [
      "--token",
      "t",
      "dump",
      "-o",
      join(dir, "t.rsdump.gz"),
    ]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^error: --token and --token-file are for an online dump: give --url too/);
  });

  it.each(["yesterday", "2026-11-26T15:06:20", "2026-11-26", "2026-13-01T00:00:00Z"])(
    "refuses --since %s before it opens anything",
    async (since) => {
      const r = await run({ DATA_DIR: join(dir, "nothing-here") }, [
        "dump",
        "--since",
        since,
        "-o",
        join(dir, "s.rsdump.gz"),
      ]);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(/^error: since ".*" is not an RFC 3339 timestamp with Z or an offset/);
      expect(await exists(join(dir, "s.rsdump.gz"))).toBe(false);
    },
  );
});

describe("an embedded store in use", () => {
  let server: TestServer;
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-embedded-dump-"));
    server = await startTestServer({ API_TOKENS: `${ADMIN}=admin` });
    await createResources(server.app.db, LOCAL_CALLER, [
      { identifier: "emb-1", payloadType: "datasource", payload: { name: "e" } },
    ]);
  });
  afterAll(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("is refused to an offline dump in another process, and backed up online without a stop", async () => {
    const dataDir = server.app.db.dataDir!;
    // The command as a user runs it: its own process, beside the running service.
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "-q", "dump", "-o", join(dir, "held.rsdump.gz")],
      {
        cwd: root,
        env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", DATA_DIR: dataDir },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((r) => child.once("exit", r));
    expect(code).toBe(1);
    expect(stderr).toMatch(new RegExp(`^error: the embedded store in .* is in use by process ${process.pid}`));
    expect(await exists(join(dir, "held.rsdump.gz"))).toBe(false);

    const file = join(dir, "online.rsdump.gz");
    const online = await run({}, ["--url", server.url, "--token", ADMIN, "dump", "-o", file]);
    expect(online.err).toBe("");
    expect(online.out).toMatch(/^dumped 1 versions/);
    // And it restores into a new embedded store (a move: the registry key goes with it, docs/operations.md).
    const target = join(dir, "target");
    await mkdir(target);
    await cp(inject("pgliteTemplate"), join(target, "pglite"), { recursive: true });
    const restored = await run({ DATA_DIR: target }, ["restore", file]);
    expect(restored).toEqual({ out: "restored 1 versions\n", err: "", code: 0 });
    const db: Db = await openDatabase({ dataDir: target });
    try {
      await migrate(db);
      expect((await readResources(db, ALL_GRANTS, ["emb-1"]))[0]).toMatchObject({ identifier: "emb-1", version: 1 });
    } finally {
      await db.close();
    }
  });
});
