// The catalogue rule of eslint.config.js: `new ConnectError(` and a
// hand-built `{code, message}` body are refused in src/ outside the
// catalogue (src/errors.ts) and its REST body writer
// (src/http/error-status.ts), so every refusal carries its reason.
import { ESLint } from "eslint";
import tseslint from "typescript-eslint";
import { describe, expect, it } from "vitest";
import config from "../../eslint.config.js";

/** The block of the repository's config that holds the rule, as written there. */
const block = config.find((c) => c.rules?.["no-restricted-syntax"] !== undefined);

async function refusals(filePath: string, text: string): Promise<string[]> {
  if (block === undefined) throw new Error("eslint.config.js has no no-restricted-syntax block");
  const eslint = new ESLint({
    cwd: process.cwd(),
    overrideConfigFile: true,
    overrideConfig: [{ files: ["**/*.ts"], languageOptions: { parser: tseslint.parser } }, block],
  });
  const [result] = await eslint.lintText(text, { filePath });
  return (result?.messages ?? []).map((m) => `${m.ruleId ?? "?"}: ${m.message}`);
}

const MADE = `import { Code, ConnectError } from "@connectrpc/connect";\nexport const e = new ConnectError("gone", Code.Canceled);\n`;
const BODY = `export const body = JSON.stringify({ code: "not_found", message: "no such file" });\n`;

describe("errors only from the catalogue", () => {
  it("refuses new ConnectError( outside the catalogue", async () => {
    expect(await refusals("src/rpc/some-lane.ts", MADE)).toEqual([
      expect.stringMatching(/^no-restricted-syntax: .*catalogue/),
    ]);
  });

  it("refuses a hand-built error body outside the catalogue's writer", async () => {
    expect(await refusals("src/ui-assets.ts", BODY)).toEqual([
      expect.stringMatching(/^no-restricted-syntax: .*writeRestError/),
    ]);
  });

  it("lets the catalogue and its REST writer build them", async () => {
    expect(await refusals("src/errors.ts", MADE)).toEqual([]);
    expect(await refusals("src/http/error-status.ts", BODY)).toEqual([]);
  });

  it("leaves other objects with a code alone (a JSON schema of the body, a span status)", async () => {
    const text = `export const schema = { code: { type: "string" }, message: { type: "string" } };\nexport const status = { code: 2 };\n`;
    expect(await refusals("src/schema/openapi.ts", text)).toEqual([]);
  });
});
