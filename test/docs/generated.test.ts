// The generated pages of docs/ say what the descriptors and the error
// catalogue say now: a proto or catalogue change without `npm run docs`
// fails here.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { docsDir, generatedPages, renderErrors, renderOperations } from "../../scripts/docs.js";
import { errorCatalogue } from "../../src/errors.js";
import { revisions } from "../../src/rpc/index.js";

describe("docs/ generated pages", () => {
  for (const [name, render] of Object.entries(generatedPages)) {
    it(`docs/${name} is what npm run docs writes from the current sources`, () => {
      const committed = readFileSync(join(docsDir, name), "utf8");
      expect(committed, `docs/${name} is stale: run npm run docs`).toBe(render());
    });
  }

  it("api.md names every method of every revision and its RPC path", () => {
    const page = renderOperations();
    for (const rev of revisions) {
      for (const service of rev.services) {
        for (const method of service.methods) {
          expect(page).toContain(`#### ${rev.name} ${service.name}.${method.name}`);
          expect(page).toContain(`\`/${service.typeName}/${method.name}\``);
        }
      }
    }
  });

  it("errors.md lists every reason of the catalogue", () => {
    const page = renderErrors();
    for (const reason of Object.keys(errorCatalogue)) expect(page).toContain(`| \`${reason}\` |`);
  });
});
