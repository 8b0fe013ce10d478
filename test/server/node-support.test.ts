// The supported Node versions are stated once and agree with package.json,
// and the AWS SDK's Node-version notice is off on them (by the SDK's own
// switch) unless the environment says otherwise.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import {
  AWS_SDK_NODE_NOTICE_SWITCH,
  nodeMajor,
  quietAwsSdkNodeNotice,
  SUPPORTED_NODE_MAJORS,
} from "../../src/node-support.js";

const run = promisify(execFile);

describe("supported Node versions", () => {
  it("package.json engines names exactly the supported majors, and this Node is one of them", async () => {
    const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8")) as {
      engines: { node: string };
    };
    const majors = pkg.engines.node.split("||").map((range) => nodeMajor(range.trim().replace(/^[\^~]/, "")));
    expect(majors).toEqual([...SUPPORTED_NODE_MAJORS]);
    expect(SUPPORTED_NODE_MAJORS).toContain(nodeMajor(process.version));
  });

  it("turns the SDK's notice off on a supported Node, and leaves an explicit setting or another Node alone", () => {
    for (const major of SUPPORTED_NODE_MAJORS) {
      const env: NodeJS.ProcessEnv = {};
      quietAwsSdkNodeNotice(env, `v${major}.1.0`);
      expect(env[AWS_SDK_NODE_NOTICE_SWITCH]).toBe("true");
    }
    const explicit: NodeJS.ProcessEnv = { [AWS_SDK_NODE_NOTICE_SWITCH]: "false" };
    quietAwsSdkNodeNotice(explicit, "v20.19.0");
    expect(explicit[AWS_SDK_NODE_NOTICE_SWITCH]).toBe("false");
    const other: NodeJS.ProcessEnv = {};
    quietAwsSdkNodeNotice(other, "v18.20.0");
    expect(other[AWS_SDK_NODE_NOTICE_SWITCH]).toBeUndefined();
  });

  it("an S3 client made by the object storage starts without the notice", async () => {
    // A fresh process: the SDK emits its notice once per process, at the first client.
    const script = `
      const { createObjectStorage } = await import("./src/storage/object-storage.ts");
      const { loadConfig } = await import("./src/config.ts");
      const { mkdtemp, rm } = await import("node:fs/promises");
      const { tmpdir } = await import("node:os");
      const dir = await mkdtemp(tmpdir() + "/rs-node-");
      const storage = await createObjectStorage(loadConfig({ DATA_DIR: dir, LOG_LEVEL: "silent" }));
      await storage.close();
      await rm(dir, { recursive: true, force: true });
    `;
    const env = { ...process.env };
    delete env[AWS_SDK_NODE_NOTICE_SWITCH];
    const { stderr } = await run(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      cwd: new URL("../..", import.meta.url),
      env,
    });
    expect(stderr).not.toContain("NodeVersionSupportWarning");
  });
});
