// One resource: every field as of the view's read point, its ancestors, and
// its history. The API has no history call: each earlier version is read at
// one microsecond before the later one's `updated_at` (versions are
// `[from, to)` periods), until a read finds nothing (before creation, or a
// tombstone) or HISTORY_MAX versions are shown.
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { api, describeError } from "./api.js";
import { h, show, status } from "./dom.js";
import { flatten, METADATA, type FlatResource } from "./resource.js";
import { asOf, micros, select, selected, setAsOf, stamp, subscribe } from "./state.js";

const HISTORY_MAX = 25;

async function readAt(id: string, at: string | undefined): Promise<Resource | undefined> {
  const res = await api.resources.read({ identifiers: [id], asOf: at });
  return res.resources[0];
}

function idLink(id: string): HTMLElement {
  return h("button", { type: "button", class: "link", onclick: () => select(id) }, id);
}

function fieldsTable(f: FlatResource): HTMLElement {
  const rows: HTMLElement[] = [];
  for (const k of METADATA) {
    const v = f.meta[k];
    const cell = k === "parent_identifier" && typeof v === "string" ? idLink(v) : show(Array.isArray(v) && v.length === 0 ? "[]" : v);
    rows.push(h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, cell)));
  }
  for (const [k, v] of Object.entries(f.payload)) rows.push(h("tr", { class: "payload" }, h("th", { scope: "row" }, k), h("td", {}, show(v))));
  rows.push(h("tr", {}, h("th", { scope: "row" }, "children"), h("td", {}, f.children.length === 0 ? "none" : f.children.flatMap((c, i) => (i === 0 ? [idLink(c)] : [", ", idLink(c)])))));
  return h("table", { class: "fields" }, h("caption", {}, "Fields"), h("tbody", {}, rows));
}

function changes(newer: FlatResource, older: FlatResource): string {
  const a = { ...newer.meta, ...newer.payload };
  const b = { ...older.meta, ...older.payload };
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !["version", "updated_at"].includes(k));
  const changed = keys.filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
  return changed.length === 0 ? "restored or unchanged" : changed.map((k) => `${k}: ${show(b[k])} → ${show(a[k])}`).join("; ");
}

export function createDetail(): HTMLElement {
  const body = h("div", { class: "detail-body" }, h("p", { class: "hint" }, "Select a resource in the tree or a query result."));
  const note = h("p", { class: "status", role: "status" });
  let token = 0;

  async function render(): Promise<void> {
    const id = selected();
    const at = asOf();
    const mine = ++token;
    if (id === undefined) return;
    status(note, `Loading ${id}…`);
    try {
      const r = await readAt(id, at);
      if (mine !== token) return;
      if (r === undefined) {
        status(note, "");
        body.replaceChildren(h("h3", {}, id), h("p", { class: "absent" }, at === undefined ? "Not present now (never created, or deleted)." : `Not present as of ${at}.`));
        return;
      }
      const f = flatten(r);
      const parents = (await api.lineage.parents({ identifier: id, asOf: at })).identifiers;
      const crumbs = h("nav", { "aria-label": "Ancestors", class: "crumbs" }, [...parents].reverse().flatMap((p) => [idLink(p), " / "]), h("strong", {}, id));
      const historyList = h("ol", { class: "history", "aria-label": "Versions, newest first" });
      body.replaceChildren(h("h3", {}, id, " ", h("span", { class: `badge t-${String(f.meta.payload_type)}` }, String(f.meta.payload_type)), h("span", { class: "version" }, ` version ${String(f.meta.version)}`)), crumbs, fieldsTable(f), h("h4", {}, "History"), historyList);
      status(note, "");
      // Walk back, one version at a time.
      let newer = f;
      const entry = (v: FlatResource, text: string): HTMLElement =>
        h("li", {}, h("button", { type: "button", class: "link", title: "Show the whole view as of this version", onclick: () => setAsOf(String(v.meta.updated_at)) }, `v${String(v.meta.version)}`), ` ${String(v.meta.updated_at)} `, h("span", { class: "change" }, text));
      historyList.append(entry(f, "(shown)"));
      for (let i = 0; i < HISTORY_MAX; i++) {
        const before = stamp(micros(String(newer.meta.updated_at)) - 1n);
        const older = await readAt(id, before);
        if (mine !== token) return;
        if (older === undefined) break;
        const o = flatten(older);
        historyList.lastElementChild?.append(h("span", { class: "change" }, ` — ${changes(newer, o)}`));
        historyList.append(entry(o, ""));
        newer = o;
      }
    } catch (err) {
      if (mine === token) status(note, describeError(err), "error");
    }
  }
  subscribe(() => void render());
  void render();
  return h("section", { class: "panel detail-panel", "aria-labelledby": "detail-h", "aria-live": "polite" }, h("h2", { id: "detail-h" }, "Resource"), note, body);
}
