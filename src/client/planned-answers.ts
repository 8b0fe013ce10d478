// Unary answers decoded by plan (protobuf/planned-from-binary.ts) instead of
// protobuf-es's reflective fromBinary, on a binary wire (gRPC, gRPC-Web).
// A read of 100 resources decoded by reflection was the client's largest
// cost in the bench's `read-100` call: 0.36-0.40 ms of decoding and
// 0.16-0.40 ms of collecting its garbage (profiled); by plan the client
// spends 0.5-0.6 ms less CPU a call and the call is 0.19-0.32 ms shorter
// (docs/benchmarks/read.md, "`read-100` through the client's planned answers").
//
// connect has no hook for how a transport parses an answer, and this
// project does not keep a copy of connect's transport. So this is a
// Transport around connect's own, built on its public interface only: it
// asks the inner transport for the same method with an output type that
// has no fields (google.protobuf.Empty). Parsing an answer into it reads
// each top-level field's tag and skips its bytes, which fromBinary keeps as
// unknown fields; toBinary writes them back as they came (tag, then bytes)
// and the plan decodes that into the method's real output type. Everything
// else is the inner transport's: the HTTP/2 call, headers, trailers,
// status and error details, timeouts, compression, size limits, the
// interceptors. Streams pass through untouched.
//
// The interceptors inside the inner transport see the answer as that
// fieldless message, so the client wraps its transport only when every
// interceptor is its own (they look at requests, never at answers): with
// interceptors of the caller's, answers are decoded by connect as before.
import {
  toBinary,
  type DescMessage,
  type DescMethodUnary,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { EmptySchema, type Empty } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ContextValues, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { decodesByPlan, plannedFromBinary } from "../protobuf/index.js";

/** The same method, answering a message whose every field is unknown: the answer's bytes, kept. */
const raw = new WeakMap<DescMethodUnary, DescMethodUnary>();

function rawOf<I extends DescMessage>(method: DescMethodUnary<I>): DescMethodUnary<I, typeof EmptySchema> {
  let m = raw.get(method);
  if (m === undefined) {
    // The method's descriptor (name, service, input, idempotency) with only the output changed.
    m = { ...(method as DescMethodUnary), output: EmptySchema };
    raw.set(method, m);
  }
  return m as DescMethodUnary<I, typeof EmptySchema>;
}

/** The message the answer's bytes hold, or connect's error for bytes its binary serialization cannot parse. */
function decode<O extends DescMessage>(output: O, kept: Empty): MessageShape<O> {
  try {
    return plannedFromBinary(output, toBinary(EmptySchema, kept));
  } catch (e) {
    throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
  }
}

/**
 * `inner` (a transport whose wire is protobuf binary: gRPC or gRPC-Web, and
 * whose interceptors never look at answers) with its unary answers decoded
 * by plan where the plan covers the method's output type.
 */
export function withPlannedAnswers(inner: Transport): Transport {
  return {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: Parameters<Transport["unary"]>[3],
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      if (!decodesByPlan(method.output)) return inner.unary(method, signal, timeoutMs, header, input, contextValues);
      const res = await inner.unary(rawOf(method), signal, timeoutMs, header, input, contextValues);
      return { ...res, service: method.parent, method, message: decode(method.output, res.message) };
    },
    stream(method, signal, timeoutMs, header, input, contextValues) {
      return inner.stream(method, signal, timeoutMs, header, input, contextValues);
    },
  };
}
