// One resource: every field as of the view's read point, its ancestors, and
// its whole history from ResourceService.History (docs/contract/19-audit-history.md):
// every version with its stamp, actor and kind, a page at a time, and a
// field-by-field comparison of any two versions.
import type { Resource, ResourceVersion } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { api, describeError } from "./api.js";
import { h, show, status } from "./dom.js";
import { flatten, METADATA, type FlatResource } from "./resource.js";
import { asOf, select, selected, setAsOf, subscribe } from "./state.js";

/** Versions asked for per page of the history. */
const HISTORY_PAGE = 20;

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
    const cell =
      k === "parent_identifier" && typeof v === "string"
        ? idLink(v)
        : show(Array.isArray(v) && v.length === 0 ? "[]" : v);
    rows.push(h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, cell)));
  }
  for (const [k, v] of Object.entries(f.payload))
    rows.push(h("tr", { class: "payload" }, h("th", { scope: "row" }, k), h("td", {}, show(v))));
  rows.push(
    h(
      "tr",
      {},
      h("th", { scope: "row" }, "children"),
      h(
        "td",
        {},
        f.children.length === 0 ? "none" : f.children.flatMap((c, i) => (i === 0 ? [idLink(c)] : [", ", idLink(c)])),
      ),
    ),
  );
  return h("table", { class: "fields" }, h("caption", {}, "Fields"), h("tbody", {}, rows));
}

/** Every field of a version, metadata then payload, for comparing. */
function allFields(f: FlatResource): Record<string, unknown> {
  return { ...f.meta, ...f.payload };
}

/** The fields that differ between two versions (their version and stamps aside). */
function changedKeys(a: FlatResource, b: FlatResource): string[] {
  const x = allFields(a);
  const y = allFields(b);
  return [...new Set([...Object.keys(x), ...Object.keys(y)])].filter(
    (k) => !["version", "updated_at"].includes(k) && JSON.stringify(x[k]) !== JSON.stringify(y[k]),
  );
}

function changes(newer: FlatResource, older: FlatResource): string {
  const a = allFields(newer);
  const b = allFields(older);
  const changed = changedKeys(newer, older);
  return changed.length === 0
    ? "no field changed"
    : changed.map((k) => `${k}: ${show(b[k])} → ${show(a[k])}`).join("; ");
}

/** Two versions side by side, field by field; changed rows marked. */
function comparison(a: ResourceVersion, b: ResourceVersion): HTMLElement {
  const [older, newer] = a.version <= b.version ? [a, b] : [b, a];
  const fo = older.resource === undefined ? undefined : flatten(older.resource);
  const fn = newer.resource === undefined ? undefined : flatten(newer.resource);
  const x = fo === undefined ? {} : allFields(fo);
  const y = fn === undefined ? {} : allFields(fn);
  const keys = [...new Set([...Object.keys(x), ...Object.keys(y)])];
  const rows = keys.map((k) => {
    const changed = JSON.stringify(x[k]) !== JSON.stringify(y[k]);
    return h(
      "tr",
      { class: changed ? "changed" : "" },
      h("th", { scope: "row" }, k),
      h("td", {}, show(x[k])),
      h("td", {}, show(y[k])),
    );
  });
  return h(
    "table",
    { class: "compare", "aria-label": `Version ${older.version} against version ${newer.version}` },
    h("caption", {}, `v${older.version} (${older.kind}) against v${newer.version} (${newer.kind})`),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { scope: "col" }, "field"),
        h("th", { scope: "col" }, `v${older.version}`),
        h("th", { scope: "col" }, `v${newer.version}`),
      ),
    ),
    h("tbody", {}, rows),
  );
}

/**
 * The history list: pages of versions, oldest first, each with what changed
 * since the one before; two ticked versions are compared below the list.
 */
function historyView(id: string, stillCurrent: () => boolean, onError: (err: unknown) => void): HTMLElement {
  const list = h("ol", { class: "history", "aria-label": "Versions, oldest first" });
  const more = h("button", { type: "button", class: "more", hidden: true }, "Show more versions");
  const compareNote = h("p", { class: "hint" }, "Tick two versions to compare them field by field.");
  const compareBox = h("div", { class: "compare-box" });
  const ticked: ResourceVersion[] = [];
  let previous: FlatResource | undefined;
  let cursor: string | undefined;

  const entry = (v: ResourceVersion): HTMLElement => {
    const f = v.resource === undefined ? undefined : flatten(v.resource);
    const box = h("input", { type: "checkbox", "aria-label": `Compare version ${v.version}` });
    box.addEventListener("change", () => {
      if (box.checked) ticked.push(v);
      else ticked.splice(ticked.indexOf(v), 1);
      // Only the last two ticked count; an older tick is released.
      while (ticked.length > 2) {
        const dropped = ticked.shift();
        const other = list.querySelector<HTMLInputElement>(`input[data-version="${String(dropped?.version)}"]`);
        if (other !== null) other.checked = false;
      }
      compareBox.replaceChildren(
        ticked.length === 2 ? comparison(ticked[0] as ResourceVersion, ticked[1] as ResourceVersion) : "",
      );
    });
    box.dataset.version = String(v.version);
    const text =
      f === undefined || previous === undefined ? (v.kind === "created" ? "created" : "") : changes(f, previous);
    if (f !== undefined) previous = f;
    return h(
      "li",
      { "data-version": String(v.version) },
      box,
      " ",
      h(
        "button",
        {
          type: "button",
          class: "link",
          title: "Show the whole view as of this version",
          onclick: () => setAsOf(v.at),
        },
        `v${String(v.version)}`,
      ),
      ` ${v.at} `,
      h("span", { class: `kind k-${v.kind}` }, v.kind),
      " by ",
      h("span", { class: "actor" }, v.actor),
      text === "" ? "" : h("span", { class: "change" }, ` — ${text}`),
    );
  };

  async function loadPage(): Promise<void> {
    more.disabled = true;
    try {
      const page = await api.resources.history({
        identifier: id,
        limit: HISTORY_PAGE,
        ...(cursor === undefined ? {} : { cursor }),
      });
      if (!stillCurrent()) return;
      list.append(...page.versions.map(entry));
      cursor = page.nextCursor ?? undefined;
      more.hidden = cursor === undefined;
    } catch (err) {
      if (stillCurrent()) onError(err);
    } finally {
      more.disabled = false;
    }
  }
  more.addEventListener("click", () => void loadPage());
  void loadPage();
  return h("div", { class: "history-box" }, list, more, compareNote, compareBox);
}

export function createDetail(): HTMLElement {
  const body = h(
    "div",
    { class: "detail-body" },
    h("p", { class: "hint" }, "Select a resource in the tree or a query result."),
  );
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
        body.replaceChildren(
          h("h3", {}, id),
          h(
            "p",
            { class: "absent" },
            at === undefined ? "Not present now (never created, or deleted)." : `Not present as of ${at}.`,
          ),
        );
        return;
      }
      const f = flatten(r);
      const parents = (await api.lineage.parents({ identifier: id, asOf: at })).identifiers;
      const crumbs = h(
        "nav",
        { "aria-label": "Ancestors", class: "crumbs" },
        [...parents].reverse().flatMap((p) => [idLink(p), " / "]),
        h("strong", {}, id),
      );
      const onError = (err: unknown) => status(note, describeError(err), "error");
      const history = historyView(id, () => mine === token, onError);
      body.replaceChildren(
        h(
          "h3",
          {},
          id,
          " ",
          h("span", { class: `badge t-${String(f.meta.payload_type)}` }, String(f.meta.payload_type)),
          h("span", { class: "version" }, ` version ${String(f.meta.version)}`),
        ),
        crumbs,
        fieldsTable(f),
        h("h4", {}, "History"),
        history,
      );
      status(note, "");
    } catch (err) {
      if (mine === token) status(note, describeError(err), "error");
    }
  }
  subscribe(() => void render());
  void render();
  return h(
    "section",
    { class: "panel detail-panel", "aria-labelledby": "detail-h", "aria-live": "polite" },
    h("h2", { id: "detail-h" }, "Resource"),
    note,
    body,
  );
}
