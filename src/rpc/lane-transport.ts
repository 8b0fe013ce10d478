// A Transport for the process's own calls (the DICOM receiver's): unary
// calls run through the unary lane, so they take the same interceptors as a
// call from the wire (auth, access, audit, log) without being encoded,
// sent and parsed. Context values given to a call reach the interceptors;
// that is how a caller the process names itself (auth's trustedCallerKey)
// gets in, and why only code of the process can hold such a transport.
import { create } from "@bufbuild/protobuf";
import type { Transport } from "@connectrpc/connect";
import { unimplemented } from "../errors.js";
import type { UnaryLane } from "./unary-lane.js";

export function createLaneTransport(lane: UnaryLane): Transport {
  return {
    async unary(method, signal, _timeoutMs, header, input, contextValues) {
      const out = await lane.call({
        method,
        message: create(method.input, input),
        header: new Headers(header as ConstructorParameters<typeof Headers>[0]),
        signal: signal ?? new AbortController().signal,
        protocolName: "in-process",
        requestMethod: "POST",
        url: `in-process:///${method.parent.typeName}/${method.name}`,
        ...(contextValues !== undefined ? { contextValues } : {}),
      });
      return {
        stream: false,
        service: method.parent,
        method,
        header: out.header,
        trailer: out.trailer,
        message: out.message as never,
      };
    },
    stream() {
      return Promise.reject(unimplemented("streaming calls are not served in process"));
    },
  };
}
