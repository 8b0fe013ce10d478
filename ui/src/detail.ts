// One resource: every field as of the view's read point, its ancestors, and
// its whole history from ResourceService.History (docs/contract/19-audit-history.md):
// every version with its stamp, actor and kind, newest first and counted, the
// version on screen marked, and a field-by-field comparison of any two
// versions above the list. A resource that reads as absent but whose history
// answers (deleted, or not yet created at the read point) says so; a parent
// the caller may not see is named, as the API answers it, never linked
// (docs/access.md, "The explorer").
import { Code, ConnectError } from "@connectrpc/connect";
import type { Resource, ResourceVersion } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { api, describeError, identityNow } from "./api.js";
import { h, show, status } from "./dom.js";
import { onLiveChanges } from "./live.js";
import { flatten, METADATA, type FlatResource } from "./resource.js";
import { addMarks, asOf, micros, select, selected, setAsOf, stamp, subscribe } from "./state.js";

/** Versions shown at a time (newest first). */
const HISTORY_PAGE = 20;
/** Versions asked for per History call. */
const HISTORY_FETCH = 1000;

/** Every version of a resource, oldest first (at most `cap`), or undefined when History answers 404. */
async function allVersions(id: string, cap = 20_000): Promise<ResourceVersion[] | undefined> {
  const out: ResourceVersion[] = [];
  let cursor: string | undefined;
  try {
    do {
      const page = await api.resources.history({ identifier: id, limit: HISTORY_FETCH, cursor });
      out.push(...page.versions);
      cursor = page.nextCursor;
    } while (cursor !== undefined && out.length < cap);
  } catch (err) {
    if (ConnectError.from(err).code === Code.NotFound) return undefined;
    throw err;
  }
  addMarks(out.map((v) => v.at));
  return out;
}

async function readAt(id: string, at: string | undefined): Promise<Resource | undefined> {
  const res = await api.resources.read({ identifiers: [id], asOf: at });
  return res.resources[0];
}

function idLink(id: string): HTMLElement {
  return h("button", { type: "button", class: "link", onclick: () => select(id) }, id);
}

/**
 * `parentVisible`: whether the parent is in the caller's /parents chain (it
 * holds tombstoned ancestors and stops before the first one the caller may
 * not see), so a parent outside it is one the caller may not see.
 */
function fieldsTable(f: FlatResource, parentVisible: boolean): HTMLElement {
  const rows: HTMLElement[] = [];
  for (const k of METADATA) {
    const v = f.meta[k];
    const cell =
      k === "parent_identifier" && typeof v === "string"
        ? parentVisible
          ? idLink(v)
          : h("span", { class: "hidden-parent" }, v, h("span", { class: "hint" }, " (not visible to you)"))
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
 * The history: every version (oldest first from the API), shown newest
 * first, HISTORY_PAGE at a time, each with what changed since the one
 * before; `onScreen` (the version the fields show) is marked; two ticked
 * versions are compared above the list.
 */
function historyView(versions: readonly ResourceVersion[], onScreen: bigint | undefined): HTMLElement {
  const list = h("ol", { class: "history", reversed: true, "aria-label": "Versions, newest first" });
  const more = h("button", { type: "button", class: "more", hidden: true }, "Show older versions");
  const compareNote = h("p", { class: "hint" }, "Tick two versions to compare them field by field.");
  const compareBox = h("div", { class: "compare-box", "aria-live": "polite" });
  const ticked: ResourceVersion[] = [];
  const flat = versions.map((v) => (v.resource === undefined ? undefined : flatten(v.resource)));

  const entry = (index: number): HTMLElement => {
    const v = versions[index] as ResourceVersion;
    const f = flat[index];
    const before = index > 0 ? flat[index - 1] : undefined;
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
    const text = f === undefined || before === undefined ? (v.kind === "created" ? "created" : "") : changes(f, before);
    const current = onScreen !== undefined && v.version === onScreen;
    return h(
      "li",
      {
        "data-version": String(v.version),
        class: current ? "on-screen" : "",
        "aria-current": current ? "true" : false,
      },
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
      current ? h("strong", { class: "here" }, " (on screen)") : "",
      text === "" ? "" : h("span", { class: "change" }, ` — ${text}`),
    );
  };

  let shown = 0;
  const showMore = (): void => {
    const from = versions.length - 1 - shown;
    for (let i = from; i > from - HISTORY_PAGE && i >= 0; i--) list.append(entry(i));
    shown = Math.min(versions.length, shown + HISTORY_PAGE);
    more.hidden = shown >= versions.length;
    more.textContent = `Show older versions (${versions.length - shown} more)`;
  };
  more.addEventListener("click", showMore);
  showMore();
  // The version on screen is always in the list, however far back.
  const at = onScreen === undefined ? -1 : versions.findIndex((v) => v.version === onScreen);
  while (at >= 0 && versions.length - shown > at) showMore();
  const count = h(
    "p",
    { class: "history-count" },
    `${versions.length} ${versions.length === 1 ? "version" : "versions"}, newest first`,
  );
  return h("div", { class: "history-box" }, count, compareNote, compareBox, list, more);
}

/** What to say about a resource that reads as absent, from its history (undefined: History answers 404). */
function absence(id: string, at: string | undefined, versions: ResourceVersion[] | undefined): HTMLElement[] {
  if (versions === undefined || versions.length === 0) {
    const me = identityNow();
    const everything = me?.grants?.allDatasources === true && me.grants.clearance === "restricted";
    return [
      h(
        "p",
        { class: "absent" },
        everything
          ? "No such resource: it was never created."
          : "No resource by this name that you may see: it was never created, or your grants do not cover it.",
      ),
    ];
  }
  const first = versions[0] as ResourceVersion;
  const t = at === undefined ? undefined : micros(at);
  const before = t === undefined ? versions : versions.filter((v) => micros(v.at) <= t);
  const last = before[before.length - 1];
  const out: HTMLElement[] = [];
  if (last === undefined) {
    out.push(h("p", { class: "absent" }, `Not yet created as of ${at ?? ""}: it was created at ${first.at}.`));
  } else {
    out.push(
      h(
        "p",
        { class: "absent" },
        `Deleted${at === undefined ? "" : ` as of ${at}`}: version ${String(last.version)}, at ${last.at} by ${last.actor}.`,
      ),
      h(
        "button",
        { type: "button", onclick: () => setAsOf(stamp(micros(last.at) - 1n)) },
        "Show it just before it was deleted",
      ),
    );
  }
  out.push(h("h4", {}, "History"), historyView(versions, undefined));
  return out;
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
        const versions = await allVersions(id);
        if (mine !== token) return;
        status(note, "");
        body.replaceChildren(h("h3", {}, id), ...absence(id, at, versions));
        return;
      }
      const f = flatten(r);
      const [parents, versions] = await Promise.all([
        api.lineage.parents({ identifier: id, asOf: at }).then((p) => p.identifiers),
        allVersions(id),
      ]);
      if (mine !== token) return;
      const parent = r.parentIdentifier;
      const parentVisible = parent !== undefined && parents[0] === parent;
      const crumbs = h(
        "nav",
        { "aria-label": "Ancestors", class: "crumbs" },
        parent !== undefined && !parentVisible ? [h("span", { class: "hint" }, "(not visible to you)"), " / "] : [],
        [...parents].reverse().flatMap((p) => [idLink(p), " / "]),
        h("strong", {}, id),
      );
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
        fieldsTable(f, parentVisible),
        h("h4", {}, "History"),
        historyView(versions ?? [], r.version),
      );
      status(note, "");
    } catch (err) {
      if (mine === token) status(note, describeError(err), "error");
    }
  }
  onLiveChanges((events) => {
    const id = selected();
    if (asOf() === undefined && id !== undefined && events.some((e) => e.identifier === id)) void render();
  });
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
