// The one resume implementation of the feed (src/client/watch.ts), used by
// the client's watch(), `resource-store watch` and the explorer: which errors
// end it, which are retried with backoff, and where it resumes when a commit
// is split across messages (`partial`, docs/contract/14-events.md, round three).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EventSchema, WatchResponseSchema, type WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { FINAL_WATCH_CODES, followFeed, type WatchOpener, type WatchStreamRequest } from "../../src/client/browser.js";
import { ROOT } from "../cli/run-cli.js";

/**
 * A message of the commit stamped `at`. A partial one carries, as the
 * service sends it, the point just before that commit as its own `at`
 * (`at` + "-" here), while its events keep the commit's stamp.
 */
function message(at: string, ids: string[], partial = false): WatchResponse {
  return create(WatchResponseSchema, {
    at: partial ? `${at}-` : at,
    partial,
    events: ids.map((identifier) =>
      create(EventSchema, { at, identifier, payloadType: "datasource", kind: "created", version: 1n }),
    ),
  });
}

/** An opener that plays one script per stream: messages, then an error (or the end). */
function scripted(streams: { messages: WatchResponse[]; then?: Error }[]): {
  open: WatchOpener;
  requests: WatchStreamRequest[];
} {
  const requests: WatchStreamRequest[] = [];
  let n = 0;
  const open: WatchOpener = (req) => {
    requests.push(req);
    const script = streams[n++] ?? { messages: [], then: new ConnectError("no more streams", Code.PermissionDenied) };
    return (async function* () {
      await Promise.resolve();
      for (const m of script.messages) yield m;
      if (script.then !== undefined) throw script.then;
    })();
  };
  return { open, requests };
}

async function collect(
  feed: AsyncIterable<WatchResponse>,
  until: (seen: string[]) => boolean,
): Promise<{ seen: string[]; error?: ConnectError }> {
  const seen: string[] = [];
  try {
    for await (const m of feed) {
      for (const e of m.events) seen.push(e.identifier);
      if (until(seen)) break;
    }
  } catch (err) {
    return { seen, error: err as ConnectError };
  }
  return { seen };
}

describe("followFeed", () => {
  it("ends at once on the final codes, without a retry", async () => {
    expect([...FINAL_WATCH_CODES].map((c) => Code[c]).sort()).toEqual(
      [
        "Unauthenticated",
        "PermissionDenied",
        "InvalidArgument",
        "NotFound",
        "FailedPrecondition",
        "OutOfRange",
        "Unimplemented",
      ].sort(),
    );
    for (const code of [
      Code.Unauthenticated,
      Code.PermissionDenied,
      Code.InvalidArgument,
      Code.NotFound,
      Code.FailedPrecondition,
    ]) {
      const { open, requests } = scripted([{ messages: [], then: new ConnectError("no", code) }]);
      const retries: Code[] = [];
      const out = await collect(followFeed(open, { retryMs: 1, onRetry: (e) => retries.push(e.code) }), () => false);
      expect(out.error?.code).toBe(code);
      expect(requests).toHaveLength(1);
      expect(retries).toEqual([]);
    }
  });

  it("retries the others with backoff, from the last `at`, and gives up after maxRetries failures in a row", async () => {
    const transient = [
      new ConnectError("down", Code.Unavailable),
      new ConnectError("too many streams", Code.ResourceExhausted),
      new ConnectError("slow", Code.DeadlineExceeded),
      new ConnectError("oops", Code.Internal),
      new TypeError("fetch failed"),
    ];
    const { open, requests } = scripted([
      { messages: [message("t1", ["a"])], then: transient[0] },
      ...transient.slice(1).map((then) => ({ messages: [], then })),
      { messages: [message("t2", ["b"])], then: transient[0] },
    ]);
    const waits: number[] = [];
    let last = Date.now();
    const out = await collect(
      followFeed(open, {
        retryMs: 20,
        maxRetryMs: 80,
        onRetry: () => {
          const now = Date.now();
          waits.push(now - last);
          last = now;
        },
      }),
      (seen) => seen.length === 2,
    );
    expect(out).toEqual({ seen: ["a", "b"] });
    expect(requests.map((r) => r.since)).toEqual([undefined, "t1", "t1", "t1", "t1", "t1"]);
    // doubling from 20 ms up to the 80 ms cap between attempts (the gaps include the previous wait)
    const started = Date.now();
    const gave = scripted(
      Array.from({ length: 5 }, () => ({ messages: [], then: new ConnectError("down", Code.Unavailable) })),
    );
    const failed = await collect(followFeed(gave.open, { retryMs: 20, maxRetryMs: 80, maxRetries: 3 }), () => false);
    expect(failed.error?.code).toBe(Code.Unavailable);
    expect(gave.requests).toHaveLength(4);
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(20 + 40 + 80 - 5);
    expect(took).toBeLessThan(2000);
  });

  it("a commit split across messages: resumes from the last whole commit and yields each event once", async () => {
    // t2 is split in three; the stream drops after its second part
    const { open, requests } = scripted([
      {
        messages: [message("t1", ["a"]), message("t2", ["b", "c"], true), message("t2", ["d"], true)],
        then: new ConnectError("reset", Code.Unavailable),
      },
      // the service sends t2 again from its start (parts cut at other places), and the next commit with the end of it
      {
        messages: [
          message("t2", ["b"], true),
          message("t2", ["c", "d", "e"], true),
          message("t2", ["f"]),
          message("t3", ["g"]),
        ],
      },
    ]);
    const out = await collect(followFeed(open, { retryMs: 1 }), (seen) => seen.includes("g"));
    expect(out).toEqual({ seen: ["a", "b", "c", "d", "e", "f", "g"] });
    // never resumed from a partial message's `at`
    expect(requests.map((r) => r.since)).toEqual([undefined, "t1"]);
  });

  it("a heartbeat is a resume point and, on request, yielded; a partial message is neither a heartbeat nor a resume point", async () => {
    const { open, requests } = scripted([
      { messages: [message("t1", []), message("t2", ["x"], true)], then: new ConnectError("reset", Code.Unavailable) },
      { messages: [message("t2", ["x", "y"]), message("t3", [])] },
    ]);
    const ats: string[] = [];
    for await (const m of followFeed(open, { retryMs: 1, heartbeats: true })) {
      ats.push(`${m.at}:${m.events.map((e) => e.identifier).join(",")}`);
      if (m.at === "t3") break;
    }
    expect(ats).toEqual(["t1:", "t2-:x", "t2:y", "t3:"]);
    expect(requests.map((r) => r.since)).toEqual([undefined, "t1"]);
  });
});

it("the CLI and the explorer resume through the client library, not a copy of their own", async () => {
  const cli = await readFile(join(ROOT, "src/cli/watch.ts"), "utf8");
  const ui = await readFile(join(ROOT, "ui/src/feed.ts"), "utf8");
  for (const text of [cli, ui]) {
    expect(text).not.toMatch(/EventService|FATAL|Code\.\w+/);
  }
  expect(ui).toContain('from "../../src/client/browser.js"');
  expect(cli).toMatch(/client\.watch\(/);
});
