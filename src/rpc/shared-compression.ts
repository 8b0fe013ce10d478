// A compression that compresses the same bytes once, however many calls send
// them (docs/events.md, "Memory and load"). The change feed hands one message to every stream that
// sees the same events, and a protobuf-binary client gets it as the same
// bytes (event-service.ts), but connect compresses each stream's message on
// its own: with 100 streams accepting gzip (grpc-js, Go and Python grpcio do
// by default) every commit was gzipped 100 times, the feed's largest
// per-stream cost once the encoding was shared.
//
// connect offers no way to hand it a message already compressed (it
// serializes the message itself, then compresses each envelope, and
// refuses one flagged as compressed), so this sits where it does look: the
// Compression it is given. The bytes connect asks to compress are new for
// each stream (toBinary writes a new buffer), so the output is found by
// content: copies of recent inputs are kept with their (pending) outputs, and an input
// equal byte for byte to one of them gets the same output. Comparing costs a
// memcmp that stops at the first differing byte (the message's `at` comes
// first), a small fraction of compressing. What goes out is exactly what
// compressing those bytes gives; an input not found (a stream far behind,
// one catching up on its own) is compressed as before.
import type { Compression } from "@connectrpc/connect/protocol";

export interface SharedCompressionOptions {
  /** Inputs kept at most, however small. */
  readonly maxEntries?: number;
  /** Input bytes kept at most (the outputs are kept beside them); the newest is always kept. */
  readonly maxBytes?: number;
}

interface Entry {
  readonly input: Uint8Array;
  readonly output: Promise<Uint8Array<ArrayBuffer>>;
}

/**
 * `base`, answering an input equal to a recent one with that one's output.
 * Decompression is `base`'s. Each call makes its own cache (one per app).
 */
export function sharedCompression(base: Compression, opts: SharedCompressionOptions = {}): Compression {
  const maxEntries = opts.maxEntries ?? 64;
  const maxBytes = opts.maxBytes ?? 8 * 1024 * 1024;
  // Oldest first.
  const entries: Entry[] = [];
  let bytes = 0;
  const drop = (e: Entry): void => {
    const i = entries.indexOf(e);
    if (i < 0) return;
    entries.splice(i, 1);
    bytes -= e.input.byteLength;
  };
  return {
    name: base.name,
    compress(input) {
      // Newest first: a commit's streams ask within moments of each other.
      for (let i = entries.length - 1; i >= 0; i--) {
        const e = entries[i]!;
        if (e.input.byteLength === input.byteLength && Buffer.compare(e.input, input) === 0) {
          return e.output;
        }
      }
      // Kept as a copy (once per message, not per stream): the caller's buffer is the caller's.
      const copy = Uint8Array.from(input);
      const entry: Entry = { input: copy, output: base.compress(copy) };
      entries.push(entry);
      bytes += input.byteLength;
      while (entries.length > 1 && (entries.length > maxEntries || bytes > maxBytes)) drop(entries[0]!);
      // A failed compression is not kept: the next stream tries again (and gets its own error).
      entry.output.catch(() => drop(entry));
      return entry.output;
    },
    decompress: (data, readMaxBytes) => base.decompress(data, readMaxBytes),
  };
}
