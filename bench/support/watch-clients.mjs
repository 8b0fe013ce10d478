// Bench-only: a worker thread of the events benchmark (events.bench.ts)
// that opens its share of the Watch streams as @grpc/grpc-js calls and
// takes their messages, reading of each only its `at`, whether it is
// partial and how many events it holds, straight from the protobuf wire
// format. The streams are spread over a few such threads so that the
// benchmark's clients, which gunzip and read every message once per stream
// (a hundred times what any one real client does), are not one event loop
// that serves the streams one after another (and the writer between them):
// the slowest stream would be the one that loop reached last.
//
// workerData: { address, streams, perConnection, request (bytes), total }.
// Posts { opened: true } once every stream has its first message (the read
// point), then, once each has `total` events or the parent says "stop",
// { done: [{ delivered, last, seen: [[at, epochMs], ...] }] }; times are
// epoch milliseconds (performance.timeOrigin + now), comparable across
// threads.
import { parentPort, workerData } from "node:worker_threads";
import * as grpc from "@grpc/grpc-js";

const { address, streams, perConnection, request, total } = workerData;

/** WatchResponse's fields 1 (at), 2 (events, counted, not decoded) and 3 (partial). */
function readSeen(buf) {
  let at = "";
  let events = 0;
  let partial = false;
  let i = 0;
  const varint = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = buf[i++];
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
      shift += 7;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) {
      const v = varint();
      if (no === 3) partial = v !== 0;
    } else if (wire === 2) {
      const len = varint();
      if (no === 1) at = buf.toString("latin1", i, i + len);
      else if (no === 2) events += 1;
      i += len;
    } else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else throw new Error(`wire type ${wire}`);
  }
  return { at, events, partial };
}

const epoch = () => performance.timeOrigin + performance.now();
// One channel (one HTTP/2 connection) per `perConnection` streams: a distinct option keeps grpc-js from sharing one.
const clients = Array.from(
  { length: Math.ceil(streams / perConnection) },
  (_, i) => new grpc.Client(address, grpc.credentials.createInsecure(), { "bench.connection": `${workerData.id}-${i}`, "grpc.max_receive_message_length": 64 * 1024 * 1024 }),
);
const calls = [];
const opened = [];
const readers = [];
for (let s = 0; s < streams; s++) {
  const call = clients[Math.floor(s / perConnection)].makeServerStreamRequest("/resourcestore.v2.EventService/Watch", (b) => b, readSeen, Buffer.from(request));
  calls.push(call);
  const state = { delivered: 0, last: 0, seen: [] };
  let first = true;
  opened.push(
    new Promise((resolve, reject) => {
      call.once("data", () => resolve());
      call.once("error", reject);
    }),
  );
  readers.push(
    new Promise((resolve, reject) => {
      call.on("data", (m) => {
        if (first) {
          first = false;
          return;
        }
        const now = epoch();
        state.delivered += m.events;
        if (m.events > 0) state.last = now;
        if (!m.partial && m.events > 0) state.seen.push([m.at, now]);
        if (state.delivered >= total) resolve(state);
      });
      call.on("error", (err) => (err.code === grpc.status.CANCELLED ? resolve(state) : reject(err)));
      call.on("end", () => resolve(state));
    }),
  );
}
parentPort.on("message", (m) => {
  if (m === "stop") for (const c of calls) c.cancel();
});
try {
  await Promise.all(opened);
  parentPort.postMessage({ opened: true });
  const done = await Promise.all(readers);
  parentPort.postMessage({ done });
} catch (err) {
  parentPort.postMessage({ error: err instanceof Error ? err.message : String(err) });
} finally {
  for (const c of calls) c.cancel();
  for (const c of clients) c.close();
}
