import { ConnectError, type Code } from "@connectrpc/connect";
import { expect } from "vitest";
import type { NewResource } from "../../src/store/index.js";

export function ds(identifier: string, extra: Partial<NewResource> = {}): NewResource {
  return { identifier, payloadType: "datasource", payload: { name: `name of ${identifier}` }, ...extra };
}

export function study(identifier: string, parent: string | null, extra: Partial<NewResource> = {}): NewResource {
  return { identifier, payloadType: "study", parentIdentifier: parent, payload: { modality: "CT" }, ...extra };
}

/** Awaits p and asserts it fails with the Connect code. */
export async function expectCode(p: Promise<unknown>, code: Code): Promise<ConnectError> {
  let caught: unknown;
  try {
    await p;
  } catch (err) {
    caught = err;
  }
  expect(caught, "expected the call to fail").toBeInstanceOf(ConnectError);
  const ce = caught as ConnectError;
  expect(ce.code).toBe(code);
  return ce;
}

/** Microseconds since the epoch of an RFC 3339 UTC stamp with 6 fractional digits. */
export function micros(ts: string): bigint {
  const m = /^(.*T\d{2}:\d{2}:\d{2})\.(\d{6})Z$/.exec(ts);
  if (!m) throw new Error(`not a microsecond UTC stamp: ${ts}`);
  return BigInt(Date.parse(`${m[1]}Z`)) * 1000n + BigInt(m[2] ?? "0");
}

export function fromMicros(us: bigint): string {
  const ms = us / 1000n;
  const rest = us % 1000n;
  const iso = new Date(Number(ms)).toISOString(); // ...sss Z
  return `${iso.slice(0, 23)}${rest.toString().padStart(3, "0")}Z`;
}

export const TS_PATTERN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
