// Types of the plugin for the test that runs it (test/lint/import-graph.test.ts).
import type { ESLint } from "eslint";

declare const plugin: ESLint.Plugin;
export default plugin;
