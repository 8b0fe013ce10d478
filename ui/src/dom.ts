// A few DOM helpers: elements from a tag, attributes and children; no framework.
type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | number | undefined | ((e: Event) => void)> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c);
  }
  return el;
}

/** A short, one-line rendering of a value for tables and previews. */
export function show(value: unknown): string {
  if (value === null || value === undefined) return "—";
  if (typeof value === "string") return value;
  if (typeof value === "bigint" || typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

/** A table of rows (objects) under the given columns. */
export function table(columns: string[], rows: Record<string, unknown>[], caption?: string): HTMLTableElement {
  return h(
    "table",
    {},
    caption === undefined ? null : h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        columns.map((c) => h("th", { scope: "col" }, c)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((r) =>
        h(
          "tr",
          {},
          columns.map((c) => h("td", {}, show(r[c]))),
        ),
      ),
    ),
  );
}

export function status(el: HTMLElement, text: string, kind: "info" | "error" = "info"): void {
  el.textContent = text;
  el.className = `status ${kind}`;
}
