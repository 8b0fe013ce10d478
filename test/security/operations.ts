// Every operation of both revisions, read off the descriptors (never a hand
// list), with what a test needs to call it over Connect, gRPC and REST.
import { create, getOption, hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import { revisions } from "../../src/rpc/index.js";

export interface Operation {
  readonly revision: string;
  readonly service: DescService;
  readonly method: DescMethod;
  /** "v2 ResourceService.Create" */
  readonly label: string;
  /** HTTP verb and path under /<revision>, with path variables filled in. */
  readonly rest: { readonly verb: string; readonly path: string; readonly hasBody: boolean };
}

/** Replaces each `{var}` / `{var=**}` of a template with `value`. */
export function fillTemplate(template: string, value: string): string {
  return template.replace(/\{[^}]*\}/g, value);
}

export const operations: readonly Operation[] = revisions.flatMap((rev) =>
  rev.services.flatMap((service) =>
    service.methods.map((method): Operation => {
      if (!hasOption(method, http)) throw new Error(`${method.name} has no REST rule`);
      const rule = getOption(method, http);
      const p = rule.pattern;
      if (p.case === undefined || p.case === "custom") throw new Error(`${method.name}: unexpected rule`);
      return {
        revision: rev.name,
        service,
        method,
        label: `${rev.name} ${service.name}.${method.name}`,
        rest: {
          verb: p.case.toUpperCase(),
          path: `/${rev.name}${fillTemplate(p.value, "x")}`,
          hasBody: rule.body !== "",
        },
      };
    }),
  ),
);

/** An empty request message of the method's input type. */
export function emptyRequest(method: DescMethod, init: Record<string, unknown> = {}) {
  return create(method.input, init as never);
}
