// The command line's round-three rules (docs/contract/17-command-line.md): the
// token kept out of `ps`, upload-dir that never leaves its directory and
// completes an earlier root, import that says "may have been written" when it
// cannot know and whose look-ups fit any MAX_QUERY_LIMIT.
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusedBeforeWriting } from "../../src/cli/import.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { startTcpProxy, type TcpProxy } from "../reliability/tcp-proxy.js";
import { buildCli, runCli, spawnCli } from "./run-cli.js";

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "rs-cli3-"));
  await buildCli();
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

function ndjson(rows: readonly Record<string, unknown>[]): string {
  return rows.map((r) => JSON.stringify(r)).join("\n") + "\n";
}

async function postJson(
  base: string,
  path: string,
  body: unknown,
  token?: string,
): Promise<{ status: number; json: any }> {
  const res = await fetch(base + path, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function countPrefix(base: string, prefix: string, token?: string): Promise<number> {
  const r = await postJson(
    base,
    "/query/count",
    { filters: [{ field: "identifier", op: "starts_with", value: prefix }] },
    token,
  );
  return (r.json as { count: number }).count;
}

describe("the token", () => {
  let srv: TestServer;
  let file: string;
  beforeAll(async () => {
    srv = await startTestServer({ API_TOKENS: "reader=read;writer=read,write" });
    file = join(work, "token.ndjson");
  });
  afterAll(async () => {
    await srv?.close();
  });
  const rows = (id: string) => writeFile(file, ndjson([{ identifier: id, payload_type: "datasource", name: "t" }]));

  it("--token-file: the first line, trimmed; no warning; it wins over $RESOURCE_STORE_TOKEN", async () => {
    const tokenFile = join(work, "token.txt");
    await writeFile(tokenFile, "  writer \r\nsecond line is not read\n", { mode: 0o600 });
    await rows("tk-1");
    const run = await runCli(["--url", srv.url, "--token-file", tokenFile, "import", file], {
      env: { RESOURCE_STORE_TOKEN: "reader" },
    });
    expect(run).toMatchObject({ code: 0, stdout: "imported 1\n", stderr: "" });
  });

  it("$RESOURCE_STORE_TOKEN alone works without a warning", async () => {
    await rows("tk-2");
    const run = await runCli(["--url", srv.url, "import", file], { env: { RESOURCE_STORE_TOKEN: "writer" } });
    expect(run).toMatchObject({ code: 0, stdout: "imported 1\n", stderr: "" });
  });

  it("--token works and warns on stderr that other users can read it", async () => {
    await rows("tk-3");
    const run = await runCli(["--url", srv.url, "--token", "writer", "import", file]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe("imported 1\n");
    expect(run.stderr).toMatch(/warning: --token .*other users of this machine.*--token-file/);
  });

  it("a missing or empty token file, or both options, are refused before anything is sent", async () => {
    await rows("tk-4");
    const missing = await runCli(["--url", srv.url, "--token-file", join(work, "nope.txt"), "import", file]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("--token-file");
    const emptyFile = join(work, "empty-token.txt");
    await writeFile(emptyFile, "\nwriter\n");
    const empty = await runCli(["--url", srv.url, "--token-file", emptyFile, "import", file]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain("first line is empty");
    const both = await runCli([
      "--url",
      srv.url,
      "--token-file",
      join(work, "token.txt"),
      "--token",
      "writer",
      "import",
      file,
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("not both");
    expect(await countPrefix(srv.url, "tk-4", "reader")).toBe(0);
  });
});

/**
 * A TCP relay to `port` that, once the client has sent `marker`, holds back
 * everything the service answers, waits until `committed()` holds, and then
 * cuts the connection: the client loses the answer of a request the service
 * has carried out.
 */
async function lossyRelay(
  port: number,
  marker: string,
  committed: () => Promise<boolean>,
): Promise<{ url: string; tripped: () => boolean; close: () => Promise<void> }> {
  let tripped = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, "127.0.0.1");
    sockets.add(client).add(upstream);
    let holding = false;
    let tail = "";
    client.on("data", (d: Buffer) => {
      if (!tripped) {
        const text = tail + d.toString("latin1");
        if (text.includes(marker)) {
          tripped = true;
          holding = true;
          void (async () => {
            const deadline = Date.now() + 30_000;
            while (!(await committed()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
            client.destroy();
            upstream.destroy();
          })();
        }
        tail = text.slice(-marker.length);
      }
      upstream.write(d);
    });
    upstream.on("data", (d: Buffer) => {
      if (!holding) client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    tripped: () => tripped,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe("import", () => {
  let srv: TestServer;
  beforeAll(async () => {
    // A small MAX_QUERY_LIMIT: look-ups that ask `limit` = batch size are refused here.
    srv = await startTestServer({ MAX_QUERY_LIMIT: "5" });
  });
  afterAll(async () => {
    await srv?.close();
  });

  it("a batch whose answer is lost: 'may have been written', and --resume completes it", async () => {
    const n = 30;
    const file = join(work, "lost.ndjson");
    await writeFile(
      file,
      ndjson(
        Array.from({ length: n }, (_, i) => ({ identifier: `lost-${i}`, payload_type: "datasource", name: `n${i}` })),
      ),
    );
    // batches of 10, one at a time: the second batch (lost-10..19) is carried out, its answer lost
    const relay = await lossyRelay(srv.port, "lost-14", async () => (await countPrefix(srv.url, "lost-")) >= 20);
    try {
      const run = await runCli(["--url", relay.url, "import", file, "--batch-size", "10", "--concurrency", "1"]);
      expect(relay.tripped()).toBe(true);
      expect(run.code).toBe(1);
      expect(run.stdout).toBe("imported 10\n");
      expect(run.stderr).toContain("may have been written");
      expect(run.stderr).toContain("--resume");
      expect(run.stderr).not.toContain("nothing of this batch was written");
    } finally {
      await relay.close();
    }
    expect(await countPrefix(srv.url, "lost-")).toBe(20);
    const resumed = await runCli(["--url", srv.url, "import", "--resume", file, "--batch-size", "10"]);
    expect(resumed).toMatchObject({ code: 0, stdout: "imported 10\n" });
    expect(resumed.stderr).toBe("skipped 20 already active\n");
    expect(await countPrefix(srv.url, "lost-")).toBe(n);
  });

  it("only the service's own 4xx-class refusal proves that nothing was written", () => {
    const answered = (code: Code) => new ConnectError("x", code, new Headers({ "grpc-status": String(code) }));
    for (const code of [
      Code.InvalidArgument,
      Code.FailedPrecondition,
      Code.NotFound,
      Code.AlreadyExists,
      Code.Unauthenticated,
      Code.PermissionDenied,
      Code.ResourceExhausted,
    ]) {
      expect(refusedBeforeWriting(answered(code))).toBe(true);
    }
    for (const code of [
      Code.Unavailable,
      Code.Internal,
      Code.DeadlineExceeded,
      Code.Unknown,
      Code.Canceled,
      Code.Aborted,
      Code.DataLoss,
    ]) {
      expect(refusedBeforeWriting(answered(code))).toBe(false);
    }
    // made by the client itself (no answer from the service): unknown outcome
    expect(refusedBeforeWriting(new ConnectError("response too large", Code.ResourceExhausted))).toBe(false);
    expect(refusedBeforeWriting(new Error("socket hang up"))).toBe(false);
  });

  it("look-ups fit a service whose MAX_QUERY_LIMIT is smaller than the batch (--resume, parents in the store)", async () => {
    // 12 parents in the store first
    const parents = Array.from({ length: 12 }, (_, i) => ({
      identifier: `mql-p${i}`,
      payload_type: "datasource",
      name: `p${i}`,
    }));
    const first = join(work, "mql-parents.ndjson");
    await writeFile(first, ndjson(parents));
    expect(await runCli(["--url", srv.url, "import", first])).toMatchObject({ code: 0, stdout: "imported 12\n" });
    // then a file that repeats them (--resume skips them) and gives each a child whose parent is only in the store
    const children = parents.map((p, i) => ({
      identifier: `mql-c${i}`,
      payload_type: "patient",
      parent_identifier: p.identifier,
      datasource_id: p.identifier,
    }));
    const second = join(work, "mql-all.ndjson");
    await writeFile(second, ndjson([...children, ...parents]));
    const run = await runCli(["--url", srv.url, "import", "--resume", second, "--batch-size", "100"]);
    expect(run.stderr).toBe("skipped 12 already active\n");
    expect(run).toMatchObject({ code: 0, stdout: "imported 12\n" });
    // children first, parents in the store: the waiting children are released by a look-up of 12 parents
    const third = join(work, "mql-children.ndjson");
    await writeFile(
      third,
      ndjson(
        parents.map((p, i) => ({
          identifier: `mql-d${i}`,
          payload_type: "patient",
          parent_identifier: p.identifier,
          datasource_id: p.identifier,
        })),
      ),
    );
    expect(await runCli(["--url", srv.url, "import", third, "--batch-size", "100"])).toMatchObject({
      code: 0,
      stdout: "imported 12\n",
      stderr: "",
    });
    expect(await countPrefix(srv.url, "mql-")).toBe(36);
  });
});

describe("upload-dir", () => {
  let srv: TestServer;
  beforeAll(async () => {
    srv = await startTestServer();
  });
  afterAll(async () => {
    await srv?.close();
  });

  async function listed(root: string): Promise<Map<string, number>> {
    const res = await fetch(`${srv.url}/s3/list?prefix=${encodeURIComponent(root)}`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { keys: string[]; sizes: (string | number)[] };
    const rootKey = root.slice(root.indexOf("/", 5) + 1);
    return new Map(body.keys.map((k, i) => [k.slice(rootKey.length), Number(body.sizes[i])]));
  }

  it("never follows a symbolic link out of DIR, names what it skipped, and --root sends only what is missing", async () => {
    const outside = join(work, "outside");
    await mkdir(outside, { recursive: true });
    await writeFile(join(outside, "credentials"), "aws_secret_access_key=SECRET\n");
    const dir = join(work, "up");
    await mkdir(join(dir, "sub"), { recursive: true });
    await writeFile(join(dir, "a.txt"), "aaaa");
    await writeFile(join(dir, "sub", "b.txt"), "bb");
    await symlink(join(outside, "credentials"), join(dir, "creds")); // out of DIR: skipped
    await symlink(outside, join(dir, "outdir")); // a directory out of DIR: skipped
    await symlink("sub", join(dir, "subdir-link")); // a directory inside: not entered twice
    await symlink("a.txt", join(dir, "a-link")); // a file inside: uploaded
    await symlink(join(dir, "missing"), join(dir, "dangling"));
    await postJson(srv.url, "/resources/create", { resources: [{ identifier: "up-series", payload_type: "series" }] });

    const run = await runCli([
      "--url",
      srv.url,
      "upload-dir",
      dir,
      "--group",
      "site-a/2026",
      "--create-files",
      "up-series",
    ]);
    expect(run.code).toBe(0);
    const [root, summary] = run.stdout.trim().split("\n");
    expect(summary).toBe("uploaded 3");
    expect(root).toMatch(/^s3:\/\/[^/]+\/site-a\/2026\/[^/]+\/$/);
    expect(run.stderr).toContain("skipped creds: a symbolic link, and it points outside the directory");
    expect(run.stderr).toContain("skipped outdir: a symbolic link, and it points outside the directory");
    expect(run.stderr).toContain("skipped subdir-link: a symbolic link, and it does not point to a regular file");
    expect(run.stderr).toContain("skipped dangling: a symbolic link, and its target does not exist");
    expect(run.stderr).toContain("created 3 file resources");
    expect([...(await listed(root!))]).toEqual([
      ["a-link", 4],
      ["a.txt", 4],
      ["sub/b.txt", 2],
    ]);

    // the rerun: a.txt changed size, c.txt is new, sub/b.txt and a-link are there already
    await writeFile(join(dir, "a.txt"), "aaaaaaaa");
    await writeFile(join(dir, "c.txt"), "c");
    await rm(join(dir, "a-link"));
    await symlink("sub/b.txt", join(dir, "a-link")); // now 2 bytes: sent again
    const again = await runCli([
      "--url",
      srv.url,
      "upload-dir",
      dir,
      "--group",
      "site-a/2026",
      "--root",
      root!,
      "--create-files",
      "up-series",
    ]);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe(`${root}\nuploaded 3\n`);
    expect(again.stderr).toContain(`1 files already in ${root}, with the same size: not sent again`);
    expect(again.stderr).toContain("created 1 file resources"); // c.txt; the others exist
    expect([...(await listed(root!))]).toEqual([
      ["a-link", 2],
      ["a.txt", 8],
      ["c.txt", 1],
      ["sub/b.txt", 2],
    ]);
    const files = await postJson(srv.url, "/query", {
      payload_type: "file",
      parent_identifier: "up-series",
      sort_by: "path",
      sort_order: "asc",
    });
    expect((files.json.results as { path: string }[]).map((r) => r.path.slice(root!.length))).toEqual([
      "a-link",
      "a.txt",
      "c.txt",
      "sub/b.txt",
    ]);
    for (const r of files.json.results as { path: string }[])
      expect(await readFile(join(dir, r.path.slice(root!.length))).then(() => true)).toBe(true);

    // a root that is not under the group is refused before anything is sent
    const bad = await runCli(["--url", srv.url, "upload-dir", dir, "--group", "site-b", "--root", root!]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("does not lie under --group site-b");
  });
});

describe("watch", () => {
  let srv: TestServer;
  let proxy: TcpProxy;
  beforeAll(async () => {
    srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "100" });
    proxy = await startTcpProxy({ host: "127.0.0.1", port: srv.port });
  });
  afterAll(async () => {
    await proxy?.close();
    await srv?.close();
  });

  it("resumes through the client library after the connection is cut: every event once, in order", async () => {
    const create = (ids: string[]) =>
      postJson(srv.url, "/resources/create", {
        resources: ids.map((identifier) => ({ identifier, payload_type: "datasource", name: identifier })),
      });
    await create(["wr-0"]);
    const since = (
      (await postJson(srv.url, "/resources/read", { identifiers: ["wr-0"] })).json as { updated_at: string }[]
    )[0]!.updated_at;
    const { child, done } = spawnCli(["--url", `http://127.0.0.1:${proxy.port}`, "watch", "--since", since]);
    let out = "";
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    const lines = () => out.split("\n").filter((l) => l.startsWith("{"));
    const waitFor = async (n: number) => {
      const deadline = Date.now() + 30_000;
      while (lines().length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    };
    try {
      await create(["wr-1", "wr-2"]);
      await waitFor(2);
      proxy.cut();
      await create(["wr-3", "wr-4"]); // committed while the connection is down
      await new Promise((r) => setTimeout(r, 300));
      proxy.restore();
      await create(["wr-5"]);
      await waitFor(5);
    } finally {
      child.kill("SIGINT");
    }
    const run = await done;
    expect(run.code).toBe(0);
    expect(lines().map((l) => (JSON.parse(l) as { identifier: string }).identifier)).toEqual([
      "wr-1",
      "wr-2",
      "wr-3",
      "wr-4",
      "wr-5",
    ]);
    expect(run.stderr).toMatch(/watch: connection lost .*; resuming after /);
    // The summary on stderr: stdout holds only the events (docs/command-line.md).
    expect(run.stderr).toContain("watched 5 events");
    expect(
      run.stdout
        .trim()
        .split("\n")
        .every((l) => l.startsWith("{")),
    ).toBe(true);
  });
});
