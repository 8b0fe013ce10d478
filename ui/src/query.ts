// The query builder: a payload type, filters whose fields, operators and
// value inputs come from the type's JSON Schema (SchemaService), a sort, a
// page size; then the rows, the count, cursor paging (next and back) and a
// parquet download of the whole result (QueryParquet, streamed).
import { fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { QueryRequestSchema, type QueryRequest } from "../../gen/resourcestore/type/v1/query_pb.js";
import { api, describeError } from "./api.js";
import { h, show, status } from "./dom.js";
import { flatten } from "./resource.js";
import { addMarks, asOf, select, subscribe } from "./state.js";

interface FieldInfo {
  readonly type: "string" | "integer" | "number" | "boolean" | "array";
  readonly enum?: readonly string[];
}

const META_FIELDS: Record<string, FieldInfo> = {
  identifier: { type: "string" },
  parent_identifier: { type: "string" },
  license: { type: "string" },
  access_level: { type: "string", enum: ["public", "internal", "restricted"] },
  derived_from: { type: "array" },
  created_at: { type: "string" },
  updated_at: { type: "string" },
  version: { type: "integer" },
};
const OPS = ["eq", "ne", "lt", "lte", "gt", "gte", "in", "not_in", "contains", "starts_with", "is_null", "is_not_null"];
const NO_VALUE = new Set(["is_null", "is_not_null"]);

let schemas: Record<string, JsonObject> = {};

function fieldsOf(type: string): Record<string, FieldInfo> {
  const out: Record<string, FieldInfo> = { ...META_FIELDS };
  const props = (schemas[type]?.properties ?? {}) as Record<string, JsonObject>;
  for (const [name, p] of Object.entries(props)) {
    const t = Array.isArray(p.type) ? (p.type.find((x) => x !== "null") as string) : (p.type as string);
    out[name] = {
      type: (["integer", "number", "boolean", "array"].includes(t) ? t : "string") as FieldInfo["type"],
      enum: Array.isArray(p.enum) ? p.enum.filter((e) => typeof e === "string") : undefined,
    };
  }
  return out;
}

/** A filter value the reader has to fix before the query runs. */
class BadValue extends Error {}

function typedValue(info: FieldInfo | undefined, raw: string, field: string): JsonValue {
  const s = raw.trim();
  if (info?.type === "number" || info?.type === "integer") {
    // An empty or unreadable number is never silently 0.
    const n = s === "" ? NaN : Number(s);
    if (!Number.isFinite(n) || (info.type === "integer" && !Number.isInteger(n)))
      throw new BadValue(`Enter ${info.type === "integer" ? "a whole number" : "a number"} for ${field}.`);
    return n;
  }
  if (info?.type === "boolean") return s === "true";
  return s;
}

let filterSeq = 0;

export function createQuery(): HTMLElement {
  const typeSel = h("select", { id: "q-type" }, h("option", { value: "" }, "(any type)"));
  const filters = h("div", { class: "filters", role: "group", "aria-label": "Filters" });
  const sortSel = h("select", { id: "q-sort" });
  const orderSel = h(
    "select",
    { id: "q-order" },
    h("option", { value: "desc" }, "descending"),
    h("option", { value: "asc" }, "ascending"),
  );
  const limitIn = h("input", { id: "q-limit", type: "number", min: 1, max: 10000, value: 50 });
  const note = h("p", { class: "status", role: "status" });
  const countOut = h("output", { id: "q-count", "aria-live": "polite" });
  const results = h("div", { class: "results" });
  const prevBtn = h("button", { type: "button", disabled: true }, "← Previous page");
  const nextBtn = h("button", { type: "button", disabled: true }, "Next page →");
  const parquetBtn = h("button", { type: "button", disabled: true }, "Download parquet");
  const pageInfo = h("span", { class: "page-info" });

  function refreshSortOptions(): void {
    const current = sortSel.value || "created_at";
    const info = fieldsOf(typeSel.value);
    sortSel.replaceChildren(
      ...Object.entries(info)
        .filter(([, f]) => f.type !== "array")
        .map(([n]) => h("option", { value: n, selected: n === current }, n)),
    );
  }

  function addFilter(): void {
    const n = ++filterSeq;
    const fieldSel = h("select", { id: `f-field-${n}`, class: "f-field" });
    const opSel = h(
      "select",
      { id: `f-op-${n}`, class: "f-op" },
      OPS.map((o) => h("option", { value: o }, o)),
    );
    const valueHolder = h("span", { class: "f-value" });
    const row = h("div", { class: "filter" });
    const renderValue = (): void => {
      const info = fieldsOf(typeSel.value)[fieldSel.value];
      const op = opSel.value;
      if (NO_VALUE.has(op)) return valueHolder.replaceChildren();
      const label = h("label", { for: `f-val-${n}`, class: "sr-only" }, "Value");
      if (info?.enum !== undefined && (op === "eq" || op === "ne")) {
        return valueHolder.replaceChildren(
          label,
          h(
            "select",
            { id: `f-val-${n}`, class: "f-val" },
            info.enum.map((e) => h("option", { value: e }, e)),
          ),
        );
      }
      const numeric = info?.type === "integer" || info?.type === "number";
      const list = op === "in" || op === "not_in";
      valueHolder.replaceChildren(
        label,
        h("input", {
          id: `f-val-${n}`,
          class: "f-val",
          type: numeric && !list ? "number" : "text",
          step: info?.type === "number" ? "any" : undefined,
          placeholder: list ? "a, b, c" : "value",
        }),
      );
    };
    const renderFields = (): void => {
      const current = fieldSel.value;
      fieldSel.replaceChildren(
        ...Object.keys(fieldsOf(typeSel.value)).map((f) => h("option", { value: f, selected: f === current }, f)),
      );
      renderValue();
    };
    fieldSel.addEventListener("change", renderValue);
    opSel.addEventListener("change", renderValue);
    row.append(
      h("label", { for: `f-field-${n}`, class: "sr-only" }, "Field"),
      fieldSel,
      h("label", { for: `f-op-${n}`, class: "sr-only" }, "Operator"),
      opSel,
      valueHolder,
      h(
        "button",
        { type: "button", class: "remove", "aria-label": "Remove this filter", onclick: () => row.remove() },
        "✕",
      ),
    );
    (row as HTMLElement & { renderFields?: () => void }).renderFields = renderFields;
    renderFields();
    filters.append(row);
    fieldSel.focus();
  }

  function request(cursor?: string): QueryRequest {
    const type = typeSel.value;
    const info = fieldsOf(type);
    const conds: JsonValue[] = [];
    for (const row of filters.querySelectorAll<HTMLElement>(".filter")) {
      const field = row.querySelector<HTMLSelectElement>(".f-field")?.value ?? "";
      const op = row.querySelector<HTMLSelectElement>(".f-op")?.value ?? "eq";
      const raw = row.querySelector<HTMLInputElement | HTMLSelectElement>(".f-val")?.value ?? "";
      if (NO_VALUE.has(op)) conds.push({ field, op });
      else if (op === "in" || op === "not_in")
        conds.push({
          field,
          op,
          value: raw
            .split(",")
            .filter((s) => s.trim() !== "")
            .map((s) => typedValue(info[field], s, field)),
        });
      else conds.push({ field, op, value: typedValue(info[field], raw, field) });
    }
    const json: JsonObject = {
      filters: conds,
      sort_by: sortSel.value || "created_at",
      sort_order: orderSel.value,
      limit: Number(limitIn.value) || 50,
    };
    if (type !== "") json.payload_type = type;
    if (cursor !== undefined) json.cursor = cursor;
    else if (asOf() !== undefined) json.as_of = asOf() ?? null;
    return fromJson(QueryRequestSchema, json);
  }

  const cursors: (string | undefined)[] = [];
  let nextCursor: string | undefined;

  async function run(cursor: string | undefined): Promise<void> {
    let req: QueryRequest;
    try {
      req = request(cursor);
    } catch (err) {
      if (err instanceof BadValue) return status(note, err.message, "error");
      throw err;
    }
    status(note, "Running…");
    try {
      const [page, count] = await Promise.all([
        api.query.query(req),
        cursor === undefined ? api.query.count(request()) : Promise.resolve(undefined),
      ]);
      if (count !== undefined)
        countOut.textContent = `${String(count.count)} ${count.count === 1n ? "result" : "results"}`;
      const type = typeSel.value;
      const payloadCols = type === "" ? ["payload"] : Object.keys((schemas[type]?.properties ?? {}) as JsonObject);
      const cols = [
        "identifier",
        "payload_type",
        "parent_identifier",
        "access_level",
        "created_at",
        "version",
        ...payloadCols,
      ];
      addMarks(page.results.flatMap((r) => [r.createdAt, r.updatedAt]));
      const rows = page.results.map((r) => {
        const f = flatten(r);
        return { ...f.meta, ...(type === "" ? { payload: f.payload } : f.payload) };
      });
      const tbl = h(
        "table",
        { class: "rows" },
        h("caption", { class: "sr-only" }, "Query results"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            cols.map((c) => h("th", { scope: "col" }, c)),
          ),
        ),
        h(
          "tbody",
          {},
          rows.map((r) =>
            h(
              "tr",
              {},
              cols.map((c, i) =>
                h(
                  "td",
                  {},
                  i === 0
                    ? h(
                        "button",
                        { type: "button", class: "link", onclick: () => select(String(r.identifier)) },
                        String(r.identifier),
                      )
                    : show(r[c]),
                ),
              ),
            ),
          ),
        ),
      );
      results.replaceChildren(rows.length === 0 ? h("p", { class: "empty" }, "No rows.") : tbl);
      nextCursor = page.nextCursor;
      nextBtn.disabled = nextCursor === undefined;
      prevBtn.disabled = cursors.length === 0;
      parquetBtn.disabled = false;
      pageInfo.textContent = `page ${cursors.length + 1}`;
      status(note, "");
    } catch (err) {
      status(note, describeError(err), "error");
    }
  }

  async function downloadParquet(): Promise<void> {
    status(note, "Preparing parquet…");
    try {
      const req = request();
      req.limit = undefined;
      const chunks: Uint8Array<ArrayBuffer>[] = [];
      for await (const part of api.query.queryParquet(req)) chunks.push(new Uint8Array(part.data));
      const url = URL.createObjectURL(new Blob(chunks, { type: "application/vnd.apache.parquet" }));
      const a = h("a", { href: url, download: `${typeSel.value || "resources"}.parquet` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      status(note, `Downloaded ${chunks.reduce((n, c) => n + c.byteLength, 0)} bytes.`);
    } catch (err) {
      status(note, err instanceof BadValue ? err.message : describeError(err), "error");
    }
  }

  typeSel.addEventListener("change", () => {
    refreshSortOptions();
    for (const row of filters.querySelectorAll<HTMLElement>(".filter"))
      (row as HTMLElement & { renderFields?: () => void }).renderFields?.();
  });
  nextBtn.addEventListener("click", () => {
    if (nextCursor === undefined) return;
    cursors.push(nextCursor);
    void run(nextCursor);
  });
  prevBtn.addEventListener("click", () => {
    cursors.pop();
    void run(cursors[cursors.length - 1]);
  });
  parquetBtn.addEventListener("click", () => void downloadParquet());

  const form = h(
    "form",
    {
      class: "query-form",
      onsubmit: (e: Event) => {
        e.preventDefault();
        cursors.length = 0;
        void run(undefined);
      },
    },
    h(
      "div",
      { class: "row" },
      h("label", { for: "q-type" }, "Payload type"),
      typeSel,
      h("label", { for: "q-sort" }, "Sort by"),
      sortSel,
      h("label", { for: "q-order", class: "sr-only" }, "Order"),
      orderSel,
      h("label", { for: "q-limit" }, "Page size"),
      limitIn,
    ),
    filters,
    h(
      "div",
      { class: "row" },
      h("button", { type: "button", onclick: addFilter }, "+ Filter"),
      h("button", { type: "submit", class: "primary" }, "Run query"),
    ),
  );
  api.schemas
    .schemas({})
    .then((res) => {
      schemas = res.schemas;
      typeSel.append(
        ...Object.keys(schemas)
          .sort()
          .map((t) => h("option", { value: t }, t)),
      );
      refreshSortOptions();
    })
    .catch((err: unknown) => status(note, describeError(err), "error"));
  refreshSortOptions();
  let ranAsOf = asOf();
  subscribe((why) => {
    if (why !== "refresh" && asOf() === ranAsOf) return;
    ranAsOf = asOf();
    if (!parquetBtn.disabled) {
      cursors.length = 0;
      void run(undefined);
    }
  });
  return h(
    "section",
    { class: "panel query-panel", "aria-labelledby": "query-h" },
    h("h2", { id: "query-h" }, "Query"),
    form,
    note,
    h("div", { class: "row" }, countOut, pageInfo, prevBtn, nextBtn, parquetBtn),
    results,
  );
}
