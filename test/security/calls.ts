// Calling any operation by descriptor over Connect (JSON or binary), gRPC
// and REST, answering the code a client sees; every call has a timeout, so
// a hung request fails the test instead of stalling it.
import type { DescMethod, DescMethodServerStreaming, DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { createAsyncIterable } from "@connectrpc/connect/protocol";

export type Protocol = "connect-json" | "connect-binary" | "grpc";

export function transportFor(baseUrl: string, protocol: Protocol): Transport {
  if (protocol === "grpc") return createGrpcTransport({ baseUrl });
  return createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: protocol === "connect-binary" });
}

/** A change-feed stream (EventService.Watch) runs until the client leaves. */
export function isEndless(method: DescMethod): boolean {
  return method.output.typeName === "resourcestore.type.v1.WatchResponse";
}

/**
 * The body as text; for an endless stream (Server-Sent Events, a Watch over
 * Connect or gRPC) only what the first read brings, then the call is cancelled.
 */
export async function readAnswer(res: Response, endless: boolean): Promise<Uint8Array> {
  if (!endless && !(res.headers.get("content-type") ?? "").startsWith("text/event-stream"))
    return new Uint8Array(await res.arrayBuffer());
  const reader = res.body?.getReader();
  if (!reader) return new Uint8Array();
  const first = await reader.read();
  await reader.cancel().catch(() => {});
  return first.value ?? new Uint8Array();
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
      const res = await transport.stream(
        method as DescMethodServerStreaming,
        undefined,
        timeoutMs,
        headers,
        createAsyncIterable([message as never]),
      );
      for await (const _ of res.message) {
        // drain; a change feed never ends: its first message says the call got through
        if (isEndless(method)) break;
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
  const text = Buffer.from(await readAnswer(res, false)).toString("utf8");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

export const codeName = (c: Code | "ok"): string => (c === "ok" ? "ok" : Code[c]);
