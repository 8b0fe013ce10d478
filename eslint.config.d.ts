// Types of the repository's lint config for the test that reads its catalogue rule (test/lint/error-catalogue.test.ts).
import type { Linter } from "eslint";

declare const config: Linter.Config[];
export default config;
