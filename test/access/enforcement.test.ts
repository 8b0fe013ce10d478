// A store read cannot be reached without a caller's grants
// (docs/contract/18-access.md, DESIGN.md 6b): every function and store method exported by
// src/store/index.ts that reads, counts, walks or writes resources takes a
// Grants parameter that is neither optional nor defaulted, and every handler
// of every service takes its caller (callerOf) before it touches the store.
// A new export or handler fails here until it does, or until it is listed
// below with the reason it reads no resource data.
import path from "node:path";
import { readdirSync, readFileSync } from "node:fs";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "../..");

/** Exports that touch no resource row a caller could see (infrastructure, SQL builders, secrets, the registry's own key work). */
const NO_RESOURCE_READS: Record<string, string> = {
  createResourceStore: "builds the store; its methods are checked below",
  createEventFeed: "builds the change feed; its methods are checked below",
  openDatabase: "connection",
  preparedName: "statement naming",
  preparedPage: "statement naming",
  readerFor: "picks a connection",
  withStandbys: "connections",
  toServiceError: "error mapping",
  migrate: "schema",
  ts: "SQL fragment",
  resourceColumns: "SQL fragment (the column list of a resource row)",
  rebuildTreeCounts: "recomputes the stored tree counts after a bulk load, returns no data",
  allocateIdentifier: "random identifier",
  createRegistry: "builds the registry; its methods are checked below",
  correctModes: "file modes under DATA_DIR, no rows",
  secureDataDir: "file modes and the lock of DATA_DIR, no rows",
  checkSince: "checks a stamp's form",
  rehashRegistry: "operator command: rehashes keyed hashes, returns counts",
  rederiveRegistry: "operator command: re-derives keyed hashes from uids, returns counts",
  keyFingerprint: "registry key fingerprint",
  checkRegistryKeys: "start-up check of the registry keys",
  keyFingerprintMessage: "message text",
  keyNotConfiguredMessage: "message text",
  registryKeyStatus: "operator command: rows per registry key, no resource data",
  createStatementNames: "statement naming",
  primaryWithStandbys: "connections",
  writeDump: "operator backup (dump command): runs outside the service, with no caller, over the whole store",
  restoreDump: "operator restore (restore command): runs outside the service, with no caller",
  payloadText: "scans the text of one dump line",
  elementText: "scans the text of one dump line",
  beforeStamp: "time arithmetic",
  toMessages: "splits events already read into messages",
  andVisible: "SQL fragment",
  loadCursorSecret: "secret",
  loadRegistryKeys: "secret",
  loadRegistrySecret: "secret",
  moveRegistryKeyOut: "secret",
  checkEventFilter: "validates a filter",
  createNotifications: "LISTEN connection, carries no rows",
  planQuery: "validates a request",
  createCursorCodec: "cursor signing",
  createQueryEngine: "builds the engine; its methods are checked below",
  descendantsCte: "SQL fragment used inside statements that take grants",
  resolveField: "field registry",
};

/**
 * Reads being reworked elsewhere that will take grants. Each entry must still
 * exist and still lack grants, so a finished rework makes this list shrink
 * (empty now: the change feed takes them too).
 */
const PENDING: Record<string, string> = {};

/** Interfaces whose every method must take grants. */
const METHODS_OF = ["ResourceStore", "Registry", "QueryEngine", "EventFeed"];

/** Methods of those that read no resource data. */
const METHODS_WITHOUT_READS: Record<string, string> = {
  "EventFeed.close": "ends the open streams",
  "EventFeed.stats": "counts of reads and departures, no rows",
};

function program(): { checker: ts.TypeChecker; sf: ts.SourceFile; program: ts.Program } {
  const cfg = ts.getParsedCommandLineOfConfigFile(
    path.join(ROOT, "tsconfig.json"),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  if (!cfg) throw new Error("tsconfig.json unreadable");
  const p = ts.createProgram([path.join(ROOT, "src/store/index.ts")], cfg.options);
  const sf = p.getSourceFile(path.join(ROOT, "src/store/index.ts"));
  if (!sf) throw new Error("src/store/index.ts not in the program");
  return { checker: p.getTypeChecker(), sf, program: p };
}

/**
 * Whether a signature has a required parameter (no `?`, no default) of type
 * Grants, or Caller (which holds them), or an options object with a required
 * `grants: Grants` property (the change feed's watch takes its grants so).
 */
function takesGrants(checker: ts.TypeChecker, sig: ts.Signature, at: ts.Node): boolean {
  const named = (t: ts.Type) => t.aliasSymbol?.name ?? t.symbol?.name ?? "";
  return sig.getParameters().some((p) => {
    const t = checker.getTypeOfSymbolAtLocation(p, at);
    // A Caller carries the grants (writes take it whole: its actor goes into the history).
    const grantsProp = t.getProperty("grants");
    const inOptions =
      grantsProp !== undefined &&
      (grantsProp.flags & ts.SymbolFlags.Optional) === 0 &&
      named(checker.getTypeOfSymbolAtLocation(grantsProp, at)) === "Grants";
    const isGrants = ["Grants", "Caller"].includes(named(t)) || inOptions;
    const decl = p.valueDeclaration;
    const optional =
      decl !== undefined &&
      ts.isParameter(decl) &&
      (decl.questionToken !== undefined || decl.initializer !== undefined);
    return isGrants && !optional;
  });
}

describe("store reads take the caller's grants", () => {
  const { checker, sf } = program();
  const mod = checker.getSymbolAtLocation(sf);
  if (!mod) throw new Error("no module symbol");
  const exports = checker.getExportsOfModule(mod);

  it("every exported function takes a required Grants, or is listed as reading no resources", () => {
    const missing: string[] = [];
    const pending: string[] = [];
    for (const s of exports) {
      const sigs = checker.getTypeOfSymbolAtLocation(s, sf).getCallSignatures();
      if (sigs.length === 0) continue;
      const ok = sigs.every((sig) => takesGrants(checker, sig, sf));
      if (ok) continue;
      if (s.name in PENDING) pending.push(s.name);
      else if (!(s.name in NO_RESOURCE_READS)) missing.push(s.name);
    }
    expect(missing, "exported store functions without a required Grants parameter").toEqual([]);
    expect(pending.sort(), "PENDING lists exactly the reads still without grants").toEqual(Object.keys(PENDING).sort());
  });

  it("every method of the store, the registry and the query engine takes a required Grants", () => {
    const missing: string[] = [];
    for (const name of METHODS_OF) {
      const s = exports.find((e) => e.name === name);
      expect(s, `${name} is exported`).toBeDefined();
      const sym = s as ts.Symbol;
      const type = checker.getDeclaredTypeOfSymbol(
        sym.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(sym) : sym,
      );
      expect(type.getProperties().length, `${name} has methods`).toBeGreaterThan(2);
      for (const m of type.getProperties()) {
        const sigs = checker.getTypeOfSymbolAtLocation(m, sf).getCallSignatures();
        if (sigs.length === 0) continue;
        if (`${name}.${m.name}` in METHODS_WITHOUT_READS) continue;
        if (!sigs.every((sig) => takesGrants(checker, sig, sf))) missing.push(`${name}.${m.name}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("a function that takes grants is not accepted without them (the check can fail)", () => {
    const text = `import type { Grants } from "../../src/access/index.js";
      export function a(db: unknown, grants?: Grants) { return [db, grants]; }
      export function b(db: unknown, grants: Grants = {} as Grants) { return [db, grants]; }
      export function c(db: unknown, grants: Grants) { return [db, grants]; }
      export function d(opts: { since?: string; grants?: Grants }) { return opts; }
      export function e(opts: { since?: string; grants: Grants }) { return opts; }
      export function f(opts: { since?: string; grants: string }) { return opts; }`;
    const file = path.join(ROOT, "test/access/__probe.ts");
    const host = ts.createCompilerHost({
      strict: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
    });
    const read = host.readFile.bind(host);
    host.readFile = (f) => (path.resolve(f) === file ? text : read(f));
    const exists = host.fileExists.bind(host);
    host.fileExists = (f) => path.resolve(f) === file || exists(f);
    const p = ts.createProgram(
      [file],
      { strict: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext },
      host,
    );
    const probe = p.getSourceFile(file) as ts.SourceFile;
    const ch = p.getTypeChecker();
    const got = Object.fromEntries(
      ch
        .getExportsOfModule(ch.getSymbolAtLocation(probe) as ts.Symbol)
        .map((s) => [
          s.name,
          takesGrants(ch, ch.getTypeOfSymbolAtLocation(s, probe).getCallSignatures()[0] as ts.Signature, probe),
        ]),
    );
    expect(got).toEqual({ a: false, b: false, c: true, d: false, e: true, f: false });
  });
});

/** Handlers that touch nothing a caller could see, or are built elsewhere. */
const HANDLERS_WITHOUT_CALLER: Record<string, string> = {
  "storage-service.ts:config": "answers the endpoint and bucket names",
  "storage-service.ts:presignUploadDir": "signs uploads only (needs write, checked by the interceptor); reads nothing",
  "admin-service.ts:refreshMaterializedViews":
    "answers that there is nothing to refresh, reads nothing; admin grants nothing extra",
  "admin-service.ts:dump":
    "the online backup: every resource by design, as the offline dump; the admin scope is checked by the interceptor and the read audit names the actor (docs/operations.md)",
};

/** Names whose use in a handler means it touches stored data. */
const STORE_TOUCH =
  /\b(store|db|registry|engine|storage|feed|datasourceStats|listChildren|listParents|latestArtefact|readerFor)\b/;

describe("every service handler takes its caller first", () => {
  const dir = path.join(ROOT, "src/rpc");
  const files = readdirSync(dir).filter((f) => f.endsWith("-service.ts"));

  it("finds the services", () => {
    expect(files.length).toBeGreaterThanOrEqual(10);
  });

  for (const file of files) {
    it(file, () => {
      const text = readFileSync(path.join(dir, file), "utf8");
      const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
      const problems: string[] = [];
      // The handlers: members of the object literal a create*Service function returns.
      const visit = (node: ts.Node) => {
        if (
          ts.isFunctionDeclaration(node) &&
          node.name !== undefined &&
          /^create\w+Service$/.test(node.name.text) &&
          node.body
        ) {
          for (const st of node.body.statements) {
            if (!ts.isReturnStatement(st) || st.expression === undefined) continue;
            let obj: ts.Expression = st.expression;
            while (ts.isAsExpression(obj) || ts.isParenthesizedExpression(obj) || ts.isSatisfiesExpression(obj))
              obj = obj.expression;
            if (!ts.isObjectLiteralExpression(obj)) continue;
            for (const prop of obj.properties) {
              const name =
                prop.name !== undefined && (ts.isIdentifier(prop.name) || ts.isStringLiteral(prop.name))
                  ? prop.name.text
                  : "?";
              const key = `${file}:${name}`;
              const body = prop.getText(sf);
              const touch = STORE_TOUCH.exec(body.replace(/^[^(]*\(([^)]*)\)/, ""));
              if (key in HANDLERS_WITHOUT_CALLER) continue;
              if (touch === null) continue;
              const caller = body.indexOf("callerOf(");
              if (caller < 0 || caller > body.indexOf(touch[0], body.indexOf(")") + 1)) problems.push(key);
            }
          }
        }
        ts.forEachChild(node, visit);
      };
      visit(sf);
      expect(problems, "handlers that touch the store before (or without) callerOf(ctx)").toEqual([]);
    });
  }
});
