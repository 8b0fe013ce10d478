// One statement's rows as PostgreSQL's binary COPY stream, read on a pool
// connection of its own: `COPY (sql) TO STDOUT (FORMAT binary)`. The bytes
// are gathered into pieces of about `chunkBytes` (PostgreSQL sends a message
// a row) and handed to the consumer as it pulls; while pieces wait, the
// connection's socket is paused, so PostgreSQL waits instead of memory
// filling. COPY takes no parameters: they are inlined as literals, with the
// casts the compiled statement gives every one of them.
import pg from "pg";
import { toServiceError } from "./db-errors.js";

export interface CopyOutOptions {
  /** Bytes per piece handed out (default 1 MiB). */
  readonly chunkBytes?: number;
  /** Pieces that may wait before the socket is paused (default 2). */
  readonly highWater?: number;
  /**
   * The pool's statement_timeout. The COPY is one statement however long the
   * export runs, so it runs without one; instead it is ended when no byte
   * arrives for this long while the consumer is waiting for one (what a
   * FETCH of the same rows would have been allowed).
   */
  readonly statementTimeoutMs?: number | undefined;
}

/** A bound value as the text PostgreSQL's input function reads (what `pg` would send as a parameter). */
function valueText(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  if (Array.isArray(v)) return arrayText(v);
  if (v instanceof Date) return v.toISOString();
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  return JSON.stringify(v);
}

function arrayText(a: readonly unknown[]): string {
  const items = a.map((e) => {
    if (Array.isArray(e)) return arrayText(e);
    const t = valueText(e);
    return t === null ? "NULL" : `"${t.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
  });
  return `{${items.join(",")}}`;
}

/**
 * `sql` with every `$n` outside quotes replaced by its value as a quoted
 * literal (unknown-typed until the cast after it, as a parameter is).
 */
export function inlineParams(sql: string, params: readonly unknown[]): string {
  let out = "";
  let i = 0;
  let from = 0;
  while (i < sql.length) {
    const ch = sql[i];
    if (ch === "'" || ch === '"') {
      // A quoted literal or identifier; a doubled quote is part of it.
      i += 1;
      while (i < sql.length) {
        if (sql[i] === ch) {
          if (sql[i + 1] === ch) i += 2;
          else break;
        } else i += 1;
      }
      i += 1;
      continue;
    }
    if (ch === "$" && /[0-9]/.test(sql[i + 1] ?? "")) {
      let j = i + 1;
      while (j < sql.length && /[0-9]/.test(sql[j] as string)) j += 1;
      const n = Number(sql.slice(i + 1, j));
      if (n < 1 || n > params.length) throw new Error(`statement names $${n}, ${params.length} values given`);
      const text = valueText(params[n - 1]);
      out += sql.slice(from, i) + (text === null ? "NULL" : pg.escapeLiteral(text));
      i = j;
      from = j;
      continue;
    }
    i += 1;
  }
  return out + sql.slice(from);
}

interface CopyMessage {
  readonly chunk: Buffer;
}

/** What pg.Client needs of a query object: submit, and the handlers of the messages it routes to it. */
class CopyOutQuery {
  readonly pieces: Uint8Array[] = [];
  error: unknown;
  finished = false;
  paused = false;
  /** Bytes received since the last look of the watchdog. */
  progress = 0;
  wake: (() => void) | undefined;
  private connection: { stream: { pause(): void; resume(): void } } | undefined;
  private piece: Uint8Array;
  private used = 0;

  constructor(
    private readonly text: string,
    private readonly chunkBytes: number,
    private readonly highWater: number,
  ) {
    this.piece = new Uint8Array(chunkBytes);
  }

  submit(connection: { query(text: string): void; stream: { pause(): void; resume(): void } }): void {
    this.connection = connection;
    connection.query(this.text);
  }

  private signal(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private flush(): void {
    if (this.used === 0) return;
    this.pieces.push(this.piece.subarray(0, this.used));
    this.piece = new Uint8Array(this.chunkBytes);
    this.used = 0;
    if (this.pieces.length >= this.highWater && !this.paused) {
      this.paused = true;
      this.connection?.stream.pause();
    }
    this.signal();
  }

  // The message's bytes are a view into the parser's buffer, reused for later messages: copied at once.
  handleCopyData(msg: CopyMessage): void {
    // Bytes after a failure are not handed out: the export fails as it is.
    if (this.error !== undefined) return;
    const bytes = msg.chunk;
    this.progress += bytes.length;
    if (this.used + bytes.length > this.piece.length) {
      this.flush();
      if (bytes.length > this.piece.length) this.piece = new Uint8Array(bytes.length);
    }
    this.piece.set(bytes, this.used);
    this.used += bytes.length;
    if (this.used >= this.chunkBytes) this.flush();
  }

  /** The consumer took a piece: let PostgreSQL send again once few wait. */
  took(): void {
    if (this.paused && this.pieces.length < this.highWater) {
      this.paused = false;
      this.connection?.stream.resume();
    }
  }

  // The client stops routing messages here after an error; the connection,
  // mid-transaction or dead, is dropped by the reader.
  handleError(err: unknown): void {
    this.error ??= err;
    this.finished = true;
    this.signal();
  }

  handleReadyForQuery(): void {
    this.flush();
    this.finished = true;
    this.signal();
  }

  handleCommandComplete(): void {}
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handlePortalSuspended(): void {}
  handleEmptyQuery(): void {}
  handleCopyInResponse(): void {
    this.error ??= new Error("COPY FROM is not read here");
  }
}

/** The rows of `sql` as binary COPY data, on a connection of `pool` held until the stream ends. */
export async function* copyOutBinary(
  pool: pg.Pool,
  sql: string,
  params: readonly unknown[],
  options: CopyOutOptions = {},
): AsyncGenerator<Uint8Array> {
  const text = `BEGIN READ ONLY; SET LOCAL statement_timeout = 0; COPY (${inlineParams(sql, params)}) TO STDOUT (FORMAT binary); COMMIT`;
  const query = new CopyOutQuery(text, options.chunkBytes ?? 1024 * 1024, options.highWater ?? 2);
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (err) {
    throw toServiceError(err);
  }
  let broken = false;
  const onError = () => {
    broken = true;
  };
  client.on("error", onError);
  let watchdog: ReturnType<typeof setInterval> | undefined;
  let waiting = false;
  const limit = options.statementTimeoutMs;
  if (limit !== undefined && limit > 0) {
    let seen = -1;
    let moved = Date.now();
    watchdog = setInterval(
      () => {
        const now = Date.now();
        if (!waiting || query.paused || query.progress !== seen) moved = now;
        else if (now - moved >= limit) {
          // Waiting for bytes that long, none came: the statement is stuck.
          query.error ??= new Error("canceling statement due to statement timeout (the COPY sent nothing)");
          query.finished = true;
          query.wake?.();
        }
        seen = query.progress;
      },
      Math.max(5, Math.ceil(limit / 4)),
    );
    watchdog.unref();
  }
  void client.query(query as unknown as pg.QueryConfig);
  try {
    for (;;) {
      if (query.error !== undefined) throw toServiceError(query.error);
      const piece = query.pieces.shift();
      if (piece) {
        query.took();
        yield piece;
        continue;
      }
      if (query.finished) return;
      waiting = true;
      await new Promise<void>((resolve) => {
        query.wake = resolve;
      });
      waiting = false;
    }
  } finally {
    clearInterval(watchdog);
    // Ended before PostgreSQL finished (the consumer stopped, or an error):
    // the connection is mid-COPY and is dropped, which ends the COPY.
    if (!query.finished || query.error !== undefined || broken) {
      broken = true;
      (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    } else if (query.paused)
      (client as unknown as { connection: { stream: { resume(): void } } }).connection.stream.resume();
    client.off("error", onError);
    // A destroyed connection may still report its end after release: it has
    // a listener so that cannot crash the process. A healthy client goes back
    // to the pool as it came (the pool watches idle clients itself); a
    // listener added on every export would pile up on the pooled client.
    if (broken) client.on("error", () => {});
    client.release(broken ? true : undefined);
  }
}
