// A Transport for calls made in process (the DICOM receiver's; the REST
// gateway's): unary and server-streaming calls run through the lane, so
// they take the same interceptors as a call from the wire (auth, access,
// audit, log) without being encoded, sent and parsed. Context values given
// to a call reach the interceptors; that is how the REST gateway hands a
// call its arrival (src/http/arrival.ts) and a caller the process names
// itself (auth's trustedCallerKey) gets in, and why only code of the
// process can hold such a transport.
import { create, type DescMethod } from "@bufbuild/protobuf";
import type { ContextValues, Transport } from "@connectrpc/connect";
import { unimplemented } from "../errors.js";
import type { UnaryCall, UnaryLane } from "./unary-lane.js";

type HeaderInit = ConstructorParameters<typeof Headers>[0];

/** A call of the process: no wire, so no URL or protocol of its own. */
function inProcess<M extends DescMethod>(
  method: M,
  message: unknown,
  signal: AbortSignal | undefined,
  header: HeaderInit,
  contextValues: ContextValues | undefined,
): UnaryCall<M> {
  return {
    method,
    message: create(method.input, message as never),
    header: new Headers(header),
    signal: signal ?? new AbortController().signal,
    protocolName: "in-process",
    requestMethod: "POST",
    url: `in-process:///${method.parent.typeName}/${method.name}`,
    ...(contextValues !== undefined ? { contextValues } : {}),
  };
}

export function createLaneTransport(lane: UnaryLane): Transport {
  return {
    async unary(method, signal, _timeoutMs, header, input, contextValues) {
      const out = await lane.call(inProcess(method, input, signal, header as HeaderInit, contextValues));
      return {
        stream: false,
        service: method.parent,
        method,
        header: out.header,
        trailer: out.trailer,
        message: out.message as never,
      };
    },
    async stream(method, signal, _timeoutMs, header, input, contextValues) {
      if (method.methodKind !== "server_streaming")
        throw unimplemented(`${method.methodKind} calls are not served in process`);
      let message: unknown;
      for await (const m of input) {
        if (message !== undefined) throw unimplemented("a server-streaming call takes one request message");
        message = m;
      }
      const out = await lane.stream(inProcess(method, message, signal, header as HeaderInit, contextValues));
      return {
        stream: true,
        service: method.parent,
        method,
        header: out.header,
        // Filled as the stream ends (the handler's and the interceptors' trailers): read it after the last message.
        trailer: out.trailer,
        message: out.message as never,
      };
    },
  };
}
