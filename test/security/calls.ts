// Calling any operation by descriptor over Connect (JSON or binary), gRPC
// and REST, answering the code a client sees; every call has a timeout, so
// a hung request fails the test instead of stalling it.
import type { DescMethod, DescMethodServerStreaming, DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

export type Protocol = "connect-json" | "connect-binary" | "grpc";

export function transportFor(baseUrl: string, protocol: Protocol): Transport {
  if (protocol === "grpc") return createGrpcTransport({ baseUrl });
  return createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: protocol === "connect-binary" });
}

async function* once<T>(v: T): AsyncIterable<T> {
  yield v;
}

export interface RpcOutcome {
  readonly code: Code | "ok";
  readonly message: string;
}

export async function callRpc(
  transport: Transport,
  method: DescMethod,
  message: unknown,
  headers: Record<string, string> = {},
  timeoutMs = 15_000,
): Promise<RpcOutcome> {
  try {
    if (method.methodKind === "unary") {
      await transport.unary(method as DescMethodUnary, undefined, timeoutMs, headers, message as never);
    } else {
      const res = await transport.stream(method as DescMethodServerStreaming, undefined, timeoutMs, headers, once(message as never));
      for await (const _ of res.message) {
        // drain
      }
    }
    return { code: "ok", message: "" };
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: e.code, message: e.rawMessage };
  }
}

export interface RestOutcome {
  readonly status: number;
  readonly text: string;
  readonly json: unknown;
}

export async function callRest(
  baseUrl: string,
  verb: string,
  path: string,
  opts: { body?: string | Uint8Array; headers?: Record<string, string>; timeoutMs?: number } = {},
): Promise<RestOutcome> {
  const res = await fetch(baseUrl + path, {
    method: verb,
    headers: { ...(opts.body !== undefined ? { "content-type": "application/json" } : {}), ...opts.headers },
    ...(opts.body !== undefined ? { body: opts.body } : {}),
    signal: AbortSignal.timeout(opts.timeoutMs ?? 15_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

export const codeName = (c: Code | "ok"): string => (c === "ok" ? "ok" : Code[c]);
