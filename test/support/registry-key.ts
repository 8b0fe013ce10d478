// A registry key for the tests' PostgreSQL apps, which must be given one
// (the key never lives in the database): generated per test process, so
// every app instance a test file starts shares it, and none is in the repo.
import { randomBytes } from "node:crypto";

export const TEST_REGISTRY_SECRET = randomBytes(32).toString("base64url");

const KEY_VARIABLES = ["REGISTRY_SECRET", "REGISTRY_SECRET_FILE", "REGISTRY_SECRETS", "REGISTRY_SECRETS_FILE"];

/** env plus the test key, when it names a PostgreSQL database and no key of its own. */
export function withRegistryKey(env: Record<string, string>): Record<string, string> {
  if (env.DATABASE_URL === undefined || KEY_VARIABLES.some((k) => env[k] !== undefined)) return env;
  return { ...env, REGISTRY_SECRET: TEST_REGISTRY_SECRET };
}
