// The `resource-store` command (docs/contract/17-command-line.md) run as a child
// process against a live service, on PGlite and on PostgreSQL.
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { restCaller } from "../support/rest.js";
import { fullSamples } from "../support/samples.js";
import { buildCli, runCli, runCliInTerminal, spawnCli } from "./run-cli.js";

const reachable = await postgresReachable();

interface Backend {
  readonly server: TestServer;
  close(): Promise<void>;
}

async function startBackend(kind: "pglite" | "postgres", env: Record<string, string> = {}): Promise<Backend> {
  let db: TestDatabase | undefined;
  if (kind === "postgres") db = await createTestDatabase();
  const server = await startTestServer({ ...(db ? { DATABASE_URL: db.url } : {}), ...env });
  return {
    server,
    async close() {
      await server.close();
      await db?.drop();
    },
  };
}

let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "rs-cli-"));
  await buildCli();
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

function ndjson(rows: readonly Record<string, unknown>[]): string {
  return rows.map((r) => JSON.stringify(r)).join("\n") + "\n";
}

describe.each([
  { kind: "pglite" as const, enabled: true },
  { kind: "postgres" as const, enabled: reachable },
])("resource-store on $kind", ({ kind, enabled }) => {
  let backend: Backend;
  const url = () => backend.server.url;
  const { post } = restCaller(url);
  const count = async (body: Record<string, unknown> = {}) =>
    ((await post("/query/count", body)).json as { count: number }).count;
  const cli = (args: string[], env: Record<string, string> = {}) => runCli(["--url", url(), ...args], { env });

  beforeAll(async () => {
    if (enabled) backend = await startBackend(kind);
  });
  afterAll(async () => {
    await backend?.close();
  });

  it.runIf(enabled)(
    "imports children before their parents' lines across batches, several batches in flight",
    async () => {
      // each child comes BEFORE its parent in the file, and with --batch-size 2 they land in different batches
      const rows = [
        { identifier: `${kind}-f1`, payload_type: "file", parent_identifier: `${kind}-s1`, path: "s3://b/1.dcm" },
        { identifier: `${kind}-f2`, payload_type: "file", parent_identifier: `${kind}-s1`, path: "s3://b/2.dcm" },
        { identifier: `${kind}-x1`, payload_type: "datasource", name: "unrelated" },
        { identifier: `${kind}-x2`, payload_type: "datasource", name: "unrelated" },
        { identifier: `${kind}-s1`, payload_type: "series", parent_identifier: `${kind}-st1`, modality: "CT" },
        { identifier: `${kind}-x3`, payload_type: "datasource", name: "unrelated" },
        { identifier: `${kind}-st1`, payload_type: "study", modality: "CT" },
      ];
      const file = join(work, `${kind}-order.ndjson`);
      await writeFile(file, ndjson(rows));
      const run = await cli(["import", file, "--batch-size", "2", "--concurrency", "3"]);
      expect(run.stderr).toBe("");
      expect(run.stdout).toBe("imported 7\n");
      expect(run.code).toBe(0);
      const read = await post("/resources/read", { identifiers: [`${kind}-f1`, `${kind}-s1`], exclude_children: true });
      expect(read.json.map((r: { parent_identifier: string }) => r.parent_identifier)).toEqual([
        `${kind}-s1`,
        `${kind}-st1`,
      ]);
    },
  );

  it.runIf(enabled)("takes a JSON array, and a parent that is already in the store", async () => {
    const file = join(work, `${kind}-array.json`);
    await writeFile(
      file,
      JSON.stringify(
        [
          {
            identifier: `${kind}-a1`,
            payload_type: "annotation",
            parent_identifier: `${kind}-st1`,
            label: "a, [b] {c}",
            value: 0.5,
          },
          { identifier: `${kind}-a2`, payload_type: "annotation", label: "plain" },
        ],
        null,
        2,
      ),
    );
    const run = await cli(["import", file]);
    expect(run.stdout).toBe("imported 2\n");
    expect(run.code).toBe(0);
  });

  it.runIf(enabled)(
    "a bad line: says which line and why, writes nothing of its batch, keeps the batches sent before",
    async () => {
      const rows: string[] = [];
      for (let i = 0; i < 6; i++)
        rows.push(JSON.stringify({ identifier: `${kind}-bl${i}`, payload_type: "datasource", name: `d${i}` }));
      rows.push("{not json");
      rows.push(JSON.stringify({ identifier: `${kind}-bl7`, payload_type: "datasource", name: "after" }));
      const file = join(work, `${kind}-badline.ndjson`);
      await writeFile(file, rows.join("\n") + "\n");
      // batches of 4: lines 1-4 go out; lines 5-6 share the batch of the bad line 7
      const run = await cli(["import", file, "--batch-size", "4", "--concurrency", "1"]);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain(`${file}:7: not JSON`);
      expect(run.stdout).toBe("imported 4\n");
      const read = await post("/resources/read", {
        identifiers: rows
          .slice(0, 6)
          .map((_, i) => `${kind}-bl${i}`)
          .concat(`${kind}-bl7`),
        exclude_children: true,
      });
      expect(read.json.map((r: { identifier: string }) => r.identifier)).toEqual(
        [0, 1, 2, 3].map((i) => `${kind}-bl${i}`),
      );
    },
  );

  it.runIf(enabled)(
    "a batch the service refuses: its lines and the service's error, nothing of it written, exit 1",
    async () => {
      const file = join(work, `${kind}-dangling.ndjson`);
      await writeFile(
        file,
        ndjson([
          { identifier: `${kind}-ok1`, payload_type: "datasource", name: "fine" },
          {
            identifier: `${kind}-orphan`,
            payload_type: "file",
            parent_identifier: `${kind}-nowhere`,
            path: "s3://b/o",
          },
          { identifier: `${kind}-ok2`, payload_type: "datasource", name: "fine too" },
        ]),
      );
      const run = await cli(["import", file]);
      expect(run.code).toBe(1);
      expect(run.stdout).toBe("imported 0\n");
      expect(run.stderr).toMatch(
        /lines 1-3 .*nothing of this batch was written.*failed_precondition: parent is not an active resource/,
      );
      expect(run.stderr).toContain(`${file}:2: ${kind}-orphan`);
      expect(await count({ identifiers: [`${kind}-ok1`, `${kind}-ok2`] })).toBe(0);
      // an unknown field is refused before anything is sent, naming the line
      const bad = join(work, `${kind}-unknown-field.ndjson`);
      await writeFile(bad, ndjson([{ identifier: `${kind}-u1`, payload_type: "datasource", nam: "typo" }]));
      const run2 = await cli(["import", bad]);
      expect(run2.code).toBe(1);
      expect(run2.stderr).toContain(`${bad}:1: invalid_argument: unknown field "nam" for payload_type "datasource"`);
    },
  );

  it.runIf(enabled)(
    "export -> import round-trips through parquet (every payload type) and NDJSON",
    async () => {
      const rows = Object.entries(fullSamples).map(([type, fields]) => ({
        identifier: `${kind}-rt-${type}`,
        payload_type: type,
        license: "CC-BY-4.0",
        access_level: "restricted",
        derived_from: type === "file" ? [`${kind}-rt-series`] : [],
        ...(type === "file" ? { parent_identifier: `${kind}-rt-series` } : {}),
        ...fields,
      }));
      const source = join(work, `${kind}-rt.ndjson`);
      await writeFile(source, ndjson(rows));
      expect((await cli(["import", source])).stdout).toBe("imported 8\n");
      const filter = [
        "--filter",
        `identifier:starts_with:${kind}-rt-`,
        "--sort-by",
        "identifier",
        "--sort-order",
        "asc",
      ];
      const untyped = join(work, `${kind}-rt.parquet`);
      const typed = join(work, `${kind}-rt-file.parquet`);
      const before = join(work, `${kind}-rt-before.ndjson`);
      expect(await cli(["export", "-o", untyped, ...filter])).toMatchObject({ code: 0, stdout: "exported 8\n" });
      expect(await cli(["export", "-o", typed, "--payload-type", "file", ...filter])).toMatchObject({
        code: 0,
        stdout: "exported 1\n",
      });
      expect(await cli(["export", "-o", before, ...filter])).toMatchObject({ code: 0, stdout: "exported 8\n" });

      const other = await startBackend(kind);
      try {
        const run = (args: string[]) => runCli(["--url", other.server.url, ...args]);
        // the file of the typed export needs its parent first: import the untyped one, then (resume) the typed one
        expect(await run(["import", untyped])).toMatchObject({ code: 0, stdout: "imported 8\n" });
        expect(await run(["import", "--resume", typed])).toMatchObject({ code: 0, stdout: "imported 0\n" });
        const after = join(work, `${kind}-rt-after.ndjson`);
        expect(await run(["export", "-o", after, ...filter])).toMatchObject({ code: 0, stdout: "exported 8\n" });
        const strip = (text: string) =>
          text
            .trim()
            .split("\n")
            .map((l) => {
              const { created_at: _c, updated_at: _u, ...rest } = JSON.parse(l) as Record<string, unknown>;
              return rest;
            });
        const a = strip(await readFile(before, "utf8"));
        expect(a.map((r) => r.identifier)).toEqual(rows.map((r) => r.identifier).sort());
        expect(strip(await readFile(after, "utf8"))).toEqual(a);
        // and the typed parquet alone into a third store, whose parent is there already
        const third = await startBackend(kind);
        try {
          const r3 = (args: string[]) => runCli(["--url", third.server.url, ...args]);
          await writeFile(
            join(work, `${kind}-parent.ndjson`),
            ndjson([rows.find((r) => r.payload_type === "series")!]),
          );
          expect((await r3(["import", join(work, `${kind}-parent.ndjson`)])).code).toBe(0);
          expect(await r3(["import", typed])).toMatchObject({ code: 0, stdout: "imported 1\n" });
        } finally {
          await third.close();
        }
      } finally {
        await other.close();
      }
    },
    240_000,
  );

  it.runIf(enabled)("--resume after a crash finishes the job without duplicates", async () => {
    const n = 6000;
    const lines: string[] = [];
    for (let i = 0; i < n; i++)
      lines.push(JSON.stringify({ identifier: `${kind}-cr${i}`, payload_type: "datasource", name: `n${i}` }));
    const file = join(work, `${kind}-crash.ndjson`);
    await writeFile(file, lines.join("\n") + "\n");
    const prefix = { filters: [{ field: "identifier", op: "starts_with", value: `${kind}-cr` }] };
    const { child, done } = spawnCli(["--url", url(), "import", file, "--batch-size", "20", "--concurrency", "1"]);
    // the crash: SIGKILL as soon as some batches are in
    while ((await count(prefix)) === 0) await new Promise((r) => setTimeout(r, 20));
    child.kill("SIGKILL");
    expect((await done).signal).toBe("SIGKILL");
    // A batch the server had already taken in when the client died still
    // commits (or fails) on its own: count once the count has held for a second.
    let before = await count(prefix);
    for (let still = 0; still < 4;) {
      await new Promise((r) => setTimeout(r, 250));
      const again = await count(prefix);
      still = again === before ? still + 1 : 0;
      before = again;
    }
    expect(before).toBeGreaterThan(0);
    expect(before).toBeLessThan(n);
    // without --resume the re-run (one batch of everything) is refused: identifiers already active
    const plain = await cli(["import", file, "--batch-size", String(n)]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toContain("already active");
    expect(await count(prefix)).toBe(before);
    const resumed = await cli(["import", "--resume", file, "--batch-size", "1000"]);
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toBe(`imported ${n - before}\n`);
    expect(await count(prefix)).toBe(n);
  });

  it.runIf(enabled)("upload-dir uploads through presigned URLs and --create-files records each object", async () => {
    const dir = join(work, `${kind}-upload`);
    await mkdir(join(dir, "sub", "deeper"), { recursive: true });
    const files: Record<string, Buffer> = {
      "a.dcm": Buffer.from("DICM".repeat(1000)),
      "sub/b.png": Buffer.alloc(300_000, 7),
      "sub/deeper/c.json": Buffer.from('{"x":1}'),
      "empty.txt": Buffer.alloc(0),
    };
    for (const [rel, data] of Object.entries(files)) await writeFile(join(dir, rel), data);
    await post("/resources/create", { resources: [{ identifier: `${kind}-up-series`, payload_type: "series" }] });
    const run = await cli([
      "upload-dir",
      dir,
      "--group",
      "site-a/2026",
      "--concurrency",
      "2",
      "--create-files",
      `${kind}-up-series`,
    ]);
    expect(run.stderr).toContain("created 4 file resources");
    expect(run.code).toBe(0);
    const [root, summaryLine] = run.stdout.trim().split("\n");
    expect(root).toMatch(/^s3:\/\/[^/]+\/site-a\/2026\/[^/]+\/$/);
    expect(summaryLine).toBe("uploaded 4");
    const q = await post("/query", {
      payload_type: "file",
      parent_identifier: `${kind}-up-series`,
      sort_by: "path",
      sort_order: "asc",
    });
    const got = q.json.results as { path: string; size_bytes?: string; content_type: string; sha256: string }[];
    expect(got.map((r) => r.path)).toEqual(
      Object.keys(files)
        .sort()
        .map((rel) => `${root}${rel}`),
    );
    for (const r of got) {
      const rel = r.path.slice(root!.length);
      const data = files[rel]!;
      expect(r.sha256).toBe(createHash("sha256").update(data).digest("hex"));
      expect(Number(r.size_bytes ?? 0)).toBe(data.length);
      expect(r.content_type).toBe(
        {
          "a.dcm": "application/dicom",
          "sub/b.png": "image/png",
          "sub/deeper/c.json": "application/json",
          "empty.txt": "text/plain",
        }[rel],
      );
      // the object holds exactly those bytes
      const dl = await post("/s3/presign", { direction: "download", path: r.path });
      const body = Buffer.from(await (await fetch(dl.json.url as string)).arrayBuffer());
      expect(body.equals(data)).toBe(true);
    }
  });

  it.runIf(enabled)("draws progress on a terminal only, and --quiet silences it", async () => {
    const file = join(work, `${kind}-tty.ndjson`);
    const rows = Array.from({ length: 3000 }, (_, i) => ({
      identifier: `${kind}-tty${i}`,
      payload_type: "datasource",
      name: `t${i}`,
    }));
    await writeFile(file, ndjson(rows));
    const tty = await runCliInTerminal(["--url", url(), "import", file, "--batch-size", "500"]);
    expect(tty.code).toBe(0);
    expect(tty.stdout).toMatch(/import \[#*-*\] \d+% \| \d+ rows \| \d+ rows\/s \| [\d.]+ [KM]?i?B \| ETA/);
    expect(tty.stdout).toContain("imported 3000");
    // piped: no bar, only the summary
    const exported = join(work, `${kind}-tty.ndjson.out.ndjson`);
    const piped = await cli(["export", "-o", exported, "--filter", `identifier:starts_with:${kind}-tty`]);
    expect(piped).toMatchObject({ code: 0, stdout: "exported 3000\n", stderr: "" });
    const quiet = await runCliInTerminal([
      "--url",
      url(),
      "--quiet",
      "export",
      "-o",
      exported,
      "--filter",
      `identifier:starts_with:${kind}-tty`,
    ]);
    expect(quiet.stdout.trim()).toBe("exported 3000");
    const bar = await runCliInTerminal([
      "--url",
      url(),
      "export",
      "-o",
      exported,
      "--filter",
      `identifier:starts_with:${kind}-tty`,
    ]);
    expect(bar.stdout).toMatch(/export \[#+-*\] \d+% \| 3000 rows/);
  });
});

describe("resource-store failure paths", () => {
  let secured: Backend;
  beforeAll(async () => {
    secured = await startBackend("pglite", { API_TOKENS: "reader=read;writer=read,write" });
  });
  afterAll(async () => {
    await secured?.close();
  });

  it("an unreachable service: says so and exits non-zero", async () => {
    const file = join(work, "unreachable.ndjson");
    await writeFile(file, ndjson([{ identifier: "u1", payload_type: "datasource", name: "x" }]));
    // a port nothing listens on: the secured server's, once closed, is not known; port 9 (discard) is never served here
    const run = await runCli(["--url", "http://127.0.0.1:9", "import", file]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("cannot reach the service at http://127.0.0.1:9");
    expect(run.stdout).toBe("imported 0\n");
    const exp = await runCli(["export", "-o", join(work, "never.ndjson")], {
      env: { RESOURCE_STORE_URL: "http://127.0.0.1:9" },
    });
    expect(exp.code).toBe(1);
    expect(exp.stderr).toContain("cannot reach the service at http://127.0.0.1:9");
  });

  it("401 without a token, 403 with a read-only one, success with $RESOURCE_STORE_TOKEN", async () => {
    const file = join(work, "auth.ndjson");
    await writeFile(file, ndjson([{ identifier: "au1", payload_type: "datasource", name: "x" }]));
    const none = await runCli(["--url", secured.server.url, "import", file]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("unauthenticated");
    expect(none.stderr).toContain("--token");
    const wrong = await runCli([
      "--url",
      secured.server.url,
      "--token",
      "nope",
      "export",
      "-o",
      join(work, "auth.parquet"),
    ]);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("unauthenticated");
    const reader = await runCli(["--url", secured.server.url, "--token", "reader", "import", file]);
    expect(reader.code).toBe(1);
    expect(reader.stderr).toContain("permission_denied");
    const writer = await runCli(["--url", secured.server.url, "import", file], {
      env: { RESOURCE_STORE_TOKEN: "writer" },
    });
    expect(writer).toMatchObject({ code: 0, stdout: "imported 1\n" });
  });

  it("bad options are refused with a clear message", async () => {
    const run = await runCli(["import", "x.ndjson", "--batch-size", "0"]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain("--batch-size");
    const filter = await runCli(["export", "-o", join(work, "f.ndjson"), "--filter", "nonsense"]);
    expect(filter.code).toBe(2);
    expect(filter.stderr).toContain("expected field:op:value");
    const ext = await runCli(["export", "-o", join(work, "f.csv")]);
    expect(ext.code).toBe(2);
    expect(ext.stderr).toContain(".parquet or .ndjson");
  });

  it("every sub-command has --help with an example", async () => {
    for (const sub of ["serve", "import", "export", "upload-dir", "watch"]) {
      const run = await runCli([sub, "--help"]);
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`Example[s]?:\\n  \\$ .*resource-store ${sub}`));
    }
  });

  it("watch prints the change feed as NDJSON from --since, filtered by payload type, until interrupted", async () => {
    const post = async (path: string, body: unknown) => {
      const res = await fetch(secured.server.url + path, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer writer" },
        body: JSON.stringify(body),
      });
      return { status: res.status, json: await res.json() };
    };
    const first = await post("/resources/create", {
      resources: [{ identifier: "w-ds", payload_type: "datasource", name: "W" }],
    });
    expect(first.status).toBe(200);
    // The instant of that commit: watching from it shows only what follows.
    const since = ((await post("/resources/read", { identifiers: ["w-ds"] })).json as { updated_at: string }[])[0]
      ?.updated_at;
    expect(since).toBeDefined();
    await post("/resources/create", {
      resources: [{ identifier: "w-p", payload_type: "patient", parent_identifier: "w-ds", datasource_id: "w-ds" }],
    });
    await post("/resources/delete", { identifiers: ["w-p"] });
    const { child, done } = spawnCli([
      "--url",
      secured.server.url,
      "--token",
      "reader",
      "watch",
      "--since",
      since as string,
      "--payload-type",
      "patient",
    ]);
    let out = "";
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    const deadline = Date.now() + 60_000;
    while (out.split("\n").filter(Boolean).length < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    child.kill("SIGINT");
    const run = await done;
    const lines = run.stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { identifier: string; kind: string; payload_type: string });
    expect(lines.map((l) => [l.identifier, l.payload_type, l.kind])).toEqual([
      ["w-p", "patient", "created"],
      ["w-p", "patient", "deleted"],
    ]);
    expect(run.code).toBe(0);
  });

  it("watch without a token is refused with the service's error and exits non-zero", async () => {
    const run = await runCli(["--url", secured.server.url, "watch"]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/unauthenticated|401|token/i);
  });

  it("imports a large NDJSON file in bounded memory (heap capped far below the file's size)", async () => {
    // ~48 MB of input through a 32 MB heap: only a stream (never the whole file) fits
    const file = join(work, "large.ndjson");
    const pad = "x".repeat(8000);
    const n = 6000;
    const chunks: string[] = [];
    for (let i = 0; i < n; i++)
      chunks.push(
        JSON.stringify({ identifier: `big${i}`, payload_type: "datasource", name: `b${i}`, description: pad }),
      );
    await writeFile(file, chunks.join("\n") + "\n");
    chunks.length = 0;
    const run = await runCli(["--url", secured.server.url, "import", file, "--batch-size", "100"], {
      env: { RESOURCE_STORE_TOKEN: "writer" },
      nodeArgs: ["--max-old-space-size=32"],
    });
    expect(run.stderr).toBe("");
    expect(run).toMatchObject({ code: 0, stdout: `imported ${n}\n` });
  }, 240_000);
});
