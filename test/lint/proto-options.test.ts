// The language options every resourcestore proto carries, so Go and Java
// clients generate from proto/ without mappings (docs/clients.md). buf lint
// (PACKAGE_SAME_GO_PACKAGE, PACKAGE_SAME_JAVA_PACKAGE,
// PACKAGE_SAME_JAVA_MULTIPLE_FILES in STANDARD) holds every file of a package
// to the same values; this test holds every package to having them, with Go
// package names that do not clash.
import { execFileSync } from "node:child_process";
import { posix } from "node:path";
import { describe, expect, it } from "vitest";

interface FileOptions {
  goPackage?: string;
  javaPackage?: string;
  javaMultipleFiles?: boolean;
  javaOuterClassname?: string;
}
interface BuiltFile {
  name: string;
  package?: string;
  options?: FileOptions;
}

const image = JSON.parse(
  execFileSync("npx", ["buf", "build", "--exclude-source-info", "-o", "-#format=json"], {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  }),
) as { file: BuiltFile[] };
const ours = image.file.filter((f) => f.name.startsWith("resourcestore/"));

describe("language options of the resourcestore protos", () => {
  it("the image holds the three packages", () => {
    expect(new Set(ours.map((f) => f.package))).toEqual(
      new Set(["resourcestore.type.v1", "resourcestore.v1", "resourcestore.v2"]),
    );
  });

  it.each(ours.map((f) => [f.name, f] as const))(
    "%s: go_package is its directory with an explicit package name",
    (_name, f) => {
      const [importPath, goName] = (f.options?.goPackage ?? "").split(";");
      expect(importPath).toBe(posix.dirname(f.name));
      // The name says which tree it is: typev1, resourcestorev1, resourcestorev2.
      expect(goName).toMatch(/^[a-z][a-z0-9]*v[0-9]+$/);
    },
  );

  it.each(ours.map((f) => [f.name, f] as const))(
    "%s: java_package, java_multiple_files, java_outer_classname",
    (_name, f) => {
      expect(f.options?.javaPackage).toBe(f.package);
      expect(f.options?.javaMultipleFiles).toBe(true);
      // FooServiceProto, never the default that clashes with the service FooService.
      const camel = posix
        .basename(f.name, ".proto")
        .replace(/(^|_)([a-z])/g, (_m, _u: string, c: string) => c.toUpperCase());
      expect(f.options?.javaOuterClassname).toBe(`${camel}Proto`);
    },
  );

  it("no two Go import paths share a package name", () => {
    const byName = new Map<string, Set<string>>();
    for (const f of ours) {
      const [importPath = "", goName = ""] = (f.options?.goPackage ?? "").split(";");
      byName.set(goName, (byName.get(goName) ?? new Set<string>()).add(importPath));
    }
    for (const [goName, paths] of byName) expect({ goName, paths: paths.size }).toEqual({ goName, paths: 1 });
    expect(byName.size).toBe(3);
  });
});
