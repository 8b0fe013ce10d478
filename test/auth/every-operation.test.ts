// docs/contract/12-authentication.md on every operation of both revisions (iterated over the
// descriptors): no or bad credentials are 401 unauthenticated, credentials
// without the scope 403 permission_denied, over REST, Connect and gRPC; the
// declared scope (or a higher one) gets past auth.
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { declaredScope, type Scope } from "../../src/auth/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { callRest, callRpc, codeName, transportFor, type Protocol } from "../security/calls.js";
import { emptyRequest, operations } from "../security/operations.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

let srv: TestServer;
let idp: TestProvider;
const cred: Record<"none-scoped" | Scope, string> = {
  "none-scoped": "",
  read: "read-token-1",
  write: "write-token-1",
  admin: "admin-token-1",
};

beforeAll(async () => {
  idp = await startProvider();
  srv = await startTestServer({
    API_TOKENS: `${cred.read}=read;${cred.write}=write;${cred.admin}=admin`,
    OIDC_ISSUER: idp.issuer,
    OIDC_AUDIENCE: "resource-store",
  });
  // Authenticated, but with none of our scopes: the only way to lack "read".
  cred["none-scoped"] = await idp.sign({ scope: "openid profile" }, { audience: "resource-store" });
});
afterAll(async () => {
  await srv?.close();
  await idp?.close();
});

/** The strongest credential that still lacks `needed`. */
function justBelow(needed: Scope): string {
  return needed === "admin" ? cred.write : needed === "write" ? cred.read : cred["none-scoped"];
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const protocols: Protocol[] = ["connect-json", "connect-binary", "grpc"];

/** Each operation, and for presign its upload form, which needs write. */
const cases = operations.flatMap((op) => {
  const base = declaredScope(op.method);
  if (base === undefined || base === "open") throw new Error(`${op.label} declares no scope`);
  const out = [{ name: op.label, op, needed: base, init: {} as Record<string, unknown> }];
  if (op.method.input.fields.some((f) => f.name === "direction")) {
    out.push({ name: `${op.label} (upload)`, op, needed: "write", init: { direction: "upload" } });
  }
  return out;
});

describe("every operation checks its scope", () => {
  it("covers both revisions, every service", () => {
    expect(new Set(operations.map((o) => o.revision))).toEqual(new Set(["v1", "v2"]));
    expect(operations.length).toBeGreaterThanOrEqual(40);
    expect(cases.some((c) => c.needed === "admin")).toBe(true);
  });

  describe.each(protocols)("over %s", (protocol) => {
    it.each(cases)("$name", async ({ op, needed, init }) => {
      const t = transportFor(srv.url, protocol);
      const msg = emptyRequest(op.method, init);
      const outcomes = {
        none: await callRpc(t, op.method, msg),
        bad: await callRpc(t, op.method, msg, bearer("not-a-token")),
        badJwt: await callRpc(t, op.method, msg, bearer(await idp.sign({ scope: "admin" }, { foreignKey: true }))),
        below: await callRpc(t, op.method, msg, bearer(justBelow(needed))),
        enough: await callRpc(t, op.method, msg, bearer(cred[needed])),
        admin: await callRpc(t, op.method, msg, bearer(cred.admin)),
      };
      expect(codeName(outcomes.none.code)).toBe("Unauthenticated");
      expect(codeName(outcomes.bad.code)).toBe("Unauthenticated");
      expect(codeName(outcomes.badJwt.code)).toBe("Unauthenticated");
      expect(codeName(outcomes.below.code)).toBe("PermissionDenied");
      expect(outcomes.below.message).toContain(needed);
      for (const o of [outcomes.enough, outcomes.admin]) {
        expect([Code.Unauthenticated, Code.PermissionDenied]).not.toContain(o.code);
      }
    });
  });

  describe("over REST", () => {
    it.each(cases)("$name", async ({ op, needed, init }) => {
      const { verb, path, hasBody } = op.rest;
      const body = hasBody ? JSON.stringify(init) : undefined;
      const call = (headers: Record<string, string>) =>
        callRest(srv.url, verb, path, { ...(body !== undefined ? { body } : {}), headers });
      const none = await call({});
      expect([none.status, none.json]).toEqual([
        401,
        { code: "unauthenticated", message: expect.any(String), reason: "UNAUTHENTICATED" },
      ]);
      const bad = await call(bearer("not-a-token"));
      expect([bad.status, (bad.json as { code: string }).code]).toEqual([401, "unauthenticated"]);
      const below = await call(bearer(justBelow(needed)));
      expect([below.status, (below.json as { code: string }).code]).toEqual([403, "permission_denied"]);
      for (const t of [cred[needed], cred.admin]) {
        const ok = await call(bearer(t));
        expect([401, 403]).not.toContain(ok.status);
      }
    });
  });
});

describe("open paths", () => {
  it.each(["/healthz", "/readyz", "/metrics"])("%s answers without credentials", async (path) => {
    const res = await fetch(srv.url + path);
    expect(res.status).toBe(200);
  });

  it("the gRPC health check is open too", async () => {
    const { Health, HealthCheckRequestSchema } = await import("../../gen/grpc/health/v1/health_pb.js");
    const method = Health.method.check;
    const { create } = await import("@bufbuild/protobuf");
    const r = await callRpc(transportFor(srv.url, "grpc"), method, create(HealthCheckRequestSchema));
    expect(r.code).toBe("ok");
  });
});
