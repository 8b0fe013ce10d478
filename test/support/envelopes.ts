// The 5-byte length-prefixed envelopes of gRPC, gRPC-Web and Connect
// streams, for tests that speak those wires by hand.
import { gunzipSync } from "node:zlib";

/** One message as it came on the wire: its flags and its (maybe compressed) bytes. */
export interface Envelope {
  readonly flags: number;
  readonly data: Buffer;
}

/** `data` in an envelope with these flags (0: an uncompressed message; 1: compressed). */
export function envelope(data: Uint8Array, flags = 0): Buffer {
  const out = Buffer.alloc(5 + data.byteLength);
  out[0] = flags;
  out.writeUInt32BE(data.byteLength, 1);
  out.set(data, 5);
  return out;
}

/** Splits a byte stream into envelopes, handing each message (not a gRPC-Web trailer frame, not Connect's end of stream) to `onMessage`. */
export function envelopeReader(onMessage: (e: Envelope) => void): (chunk: Uint8Array) => void {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 5) {
      const len = buf.readUInt32BE(1);
      if (buf.length < 5 + len) break;
      const flags = buf[0]!;
      const data = Buffer.from(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
      // 0x80: a gRPC-Web trailer frame; 0x02: Connect's end of stream.
      if ((flags & 0x82) === 0) onMessage({ flags, data });
    }
  };
}

/** The fields of a gRPC-Web body's trailer frame (flags 0x80), names lower-cased; none when it has no such frame. */
export function webTrailers(body: Buffer): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let at = 0; at + 5 <= body.length; at += 5 + body.readUInt32BE(at + 1)) {
    if ((body[at]! & 0x80) === 0) continue;
    for (const line of body
      .subarray(at + 5, at + 5 + body.readUInt32BE(at + 1))
      .toString()
      .split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0) fields[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
  }
  return fields;
}

/** A message's bytes, gunzipped when its envelope says it is compressed. */
export function unwrapped(e: Envelope): Buffer {
  return (e.flags & 1) === 1 ? gunzipSync(e.data) : e.data;
}
