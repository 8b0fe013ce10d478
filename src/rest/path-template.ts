// Path templates of google/api/http.proto:
//   Template = "/" Segments [ Verb ] ;  Segment = "*" | "**" | LITERAL | Variable ;
//   Variable = "{" FieldPath [ "=" Segments ] "}" ;  Verb = ":" LITERAL ;
// `{var}` is `{var=*}`; `**` may only come last.
import { invalidArgument } from "../errors.js";

type Segment =
  { readonly kind: "literal"; readonly value: string } | { readonly kind: "star" } | { readonly kind: "deep" };

interface Variable {
  /** The dotted field path, split. */
  readonly fieldPath: readonly string[];
  /** Template segment range [start, end). */
  readonly start: number;
  readonly end: number;
}

export interface PathTemplate {
  /** The template as written, for messages and route keys. */
  readonly source: string;
  readonly segments: readonly Segment[];
  readonly variables: readonly Variable[];
  readonly verb: string | undefined;
}

/** A matched variable: its field path and its decoded value. */
export interface PathBinding {
  readonly fieldPath: readonly string[];
  readonly value: string;
}

function parseSegment(text: string): Segment {
  if (text === "*") return { kind: "star" };
  if (text === "**") return { kind: "deep" };
  if (text === "" || /[{}*]/.test(text)) throw new Error(`bad path template segment "${text}"`);
  return { kind: "literal", value: text };
}

/** Parses a template; throws on a template the grammar (or this matcher) does not accept. */
export function parsePathTemplate(source: string): PathTemplate {
  if (!source.startsWith("/")) throw new Error(`path template "${source}" must start with /`);
  let body = source.slice(1);
  let verb: string | undefined;
  // A verb is a ':' after the last '/' and outside any variable.
  const lastSlash = body.lastIndexOf("/");
  const colon = body.indexOf(":", lastSlash + 1);
  if (colon >= 0 && body.indexOf("}", colon) < 0) {
    verb = body.slice(colon + 1);
    body = body.slice(0, colon);
  }
  const segments: Segment[] = [];
  const variables: Variable[] = [];
  let i = 0;
  while (i <= body.length) {
    if (body[i] === "{") {
      const close = body.indexOf("}", i);
      if (close < 0) throw new Error(`unclosed variable in path template "${source}"`);
      const inner = body.slice(i + 1, close);
      const eq = inner.indexOf("=");
      const fieldPath = (eq < 0 ? inner : inner.slice(0, eq)).split(".");
      if (fieldPath.some((p) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(p))) {
        throw new Error(`bad variable "${inner}" in path template "${source}"`);
      }
      const start = segments.length;
      const sub = eq < 0 ? ["*"] : inner.slice(eq + 1).split("/");
      for (const s of sub) segments.push(parseSegment(s));
      variables.push({ fieldPath, start, end: segments.length });
      i = close + 1;
    } else {
      let end = body.indexOf("/", i);
      if (end < 0) end = body.length;
      segments.push(parseSegment(body.slice(i, end)));
      i = end;
    }
    if (i < body.length && body[i] !== "/") throw new Error(`bad path template "${source}"`);
    i += 1;
  }
  const deep = segments.findIndex((s) => s.kind === "deep");
  if (deep >= 0 && deep !== segments.length - 1) throw new Error(`"**" must come last in path template "${source}"`);
  return { source, segments, variables, verb };
}

function decodeSegment(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw invalidArgument(`the path segment "${raw}" is not valid percent-encoding`);
  }
}

/** A percent-encoded segment decoded, or undefined when its escapes are not valid. */
export function safeDecode(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}

/**
 * Matches a raw URL path (still percent-encoded) against a template. Returns
 * the variable bindings, or undefined when the path does not match.
 */
export function matchPathTemplate(template: PathTemplate, rawPath: string): PathBinding[] | undefined {
  if (!rawPath.startsWith("/")) return undefined;
  let path = rawPath.slice(1);
  if (template.verb !== undefined) {
    const suffix = `:${template.verb}`;
    if (!path.endsWith(suffix)) return undefined;
    path = path.slice(0, -suffix.length);
  }
  const parts = path.split("/");
  const { segments } = template;
  const last = segments[segments.length - 1];
  const hasDeep = last?.kind === "deep";
  if (hasDeep ? parts.length < segments.length - 1 : parts.length !== segments.length) return undefined;
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    const part = parts[i];
    if (!seg || seg.kind === "deep") break;
    if (part === undefined || part === "") return undefined;
    // Only a segment with an escape can decode to the literal (most routes of the table differ plainly).
    if (seg.kind === "literal" && part !== seg.value && (!part.includes("%") || safeDecode(part) !== seg.value))
      return undefined;
  }
  return template.variables.map((v) => {
    const end = hasDeep && v.end === segments.length ? parts.length : v.end;
    return { fieldPath: v.fieldPath, value: parts.slice(v.start, end).map(decodeSegment).join("/") };
  });
}
