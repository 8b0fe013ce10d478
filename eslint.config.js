// Lint that fails on warnings (DESIGN.md section 7, habit 7): `npm run lint`
// runs with --max-warnings 0, so every rule here is effectively an error.
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";
import local from "./eslint/index-boundaries.js";

export default defineConfig(
  // gen/ is protoc-gen-es output: never edited, never linted (habit 5).
  globalIgnores(["gen/", "dist/", "coverage/", "data/", "node_modules/"]),

  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: {
      // A disable comment that no longer silences anything is noise that hides the next real one.
      reportUnusedDisableDirectives: "error",
    },
    rules: {
      eqeqeq: ["error", "always"],
      "@typescript-eslint/consistent-type-imports": [
        "error",
        { prefer: "type-imports", fixStyle: "inline-type-imports" },
      ],
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        // A leading underscore marks a parameter kept for its position in a signature.
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" },
      ],
    },
  },

  {
    // A folder with an index.ts is reached through it only (issue 12): the
    // index is the folder's public surface, its other files are its own.
    files: ["**/*.ts"],
    plugins: { local },
    rules: { "local/index-boundaries": "error" },
  },

  {
    // The service logs through pino so lines carry the request id and redaction;
    // console output would bypass both.
    files: ["src/**/*.ts"],
    rules: { "no-console": "error" },
  },

  {
    files: ["test/**/*.ts", "bench/**/*.ts"],
    rules: {
      // Tests read answers as parsed JSON (REST bodies, logs, metrics) and assert on
      // their shape; typing every intermediate value would only restate the assertion.
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-return": "off",
      // For the same reason a REST or OpenAPI body read with res.json() may be typed `any`.
      "@typescript-eslint/no-explicit-any": "off",
    },
  },

  {
    // Plain JavaScript config files sit outside tsconfig.json: lint them without type information.
    files: ["**/*.js", "**/*.mjs", "**/*.cjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
