// The lineage tree, lazily: the roots first, a node's children when it is
// opened (v1 LineageService.Children with payloads, for child counts and a
// payload preview). A parent with more children than the service lists at
// once is paged through v2 Query by parent_identifier instead. Keyboard:
// the WAI-ARIA tree pattern (arrows, Home, End, Enter). At now, a list on
// screen is read again when the live feed (live.ts) reports a change in it.
// Resources the caller may see whose parent it may not see are listed under
// their own root item (docs/access.md, "The explorer").
import { Code, ConnectError } from "@connectrpc/connect";
import type { TreeNode } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { api, describeError, identityNow } from "./api.js";
import { h, status } from "./dom.js";
import { onLiveChanges } from "./live.js";
import { preview } from "./resource.js";
import { addMarks, asOf, select, selected, subscribe } from "./state.js";

const PAGE = 200;

interface Row {
  identifier: string;
  payloadType: string;
  childCount: bigint | undefined;
  descendantCount: bigint | undefined;
  payloadPreview: string;
}

function fromNode(n: TreeNode): Row {
  return {
    identifier: n.identifier,
    payloadType: n.payloadType,
    childCount: n.childCount,
    descendantCount: n.descendantCount,
    payloadPreview: preview(n.payload),
  };
}

/** Parents the service refused to list at once (too many children): paged with Query from then on, never asked again. */
const tooBig = new Set<string>();

async function childrenOf(
  parent: string | undefined,
  more: (rows: Row[], next: (() => Promise<void>) | undefined) => void,
): Promise<void> {
  const as_of = asOf();
  try {
    if (parent !== undefined && tooBig.has(parent)) throw new ConnectError("paged", Code.FailedPrecondition);
    const res = await api.children.children({ parentIdentifier: parent, withPayloads: true, asOf: as_of });
    addMarks(res.nodes.map((n) => n.createdAt));
    more(res.nodes.map(fromNode), undefined);
  } catch (err) {
    // Too many to list at once: page them with Query (v2) by parent.
    if (parent === undefined || ConnectError.from(err).code !== Code.FailedPrecondition) throw err;
    tooBig.add(parent);
    const page = async (cursor: string | undefined): Promise<void> => {
      const res = await api.query.query({
        parentIdentifier: parent,
        sortBy: "created_at",
        sortOrder: "asc",
        limit: PAGE,
        cursor,
        asOf: cursor === undefined ? as_of : undefined,
      });
      addMarks(res.results.flatMap((r) => [r.createdAt, r.updatedAt]));
      const rows = res.results.map((r) => ({
        identifier: r.identifier,
        payloadType: r.payload.case ?? "",
        childCount: undefined,
        descendantCount: undefined,
        payloadPreview: "",
      }));
      const next = res.nextCursor;
      more(rows, next === undefined ? undefined : () => page(next));
    };
    await page(undefined);
  }
}

/** Rows scanned per page when looking for resources whose parent is hidden. */
const SCAN = 500;

/**
 * Resources the caller may see whose parent it may not see: a page of
 * resources with a parent (Query), then which of those parents it may read
 * (Read). Only what those two calls answer; `next` scans on.
 */
async function underHiddenParents(cursor: string | undefined): Promise<{ rows: Row[]; next: string | undefined }> {
  const res = await api.query.query({
    filters: [{ field: "parent_identifier", op: "is_not_null" }],
    sortBy: "created_at",
    sortOrder: "asc",
    limit: SCAN,
    selectColumns: ["parent_identifier", "created_at"],
    cursor,
    asOf: cursor === undefined ? asOf() : undefined,
  });
  const parents = [...new Set(res.results.map((r) => r.parentIdentifier ?? ""))].filter((p) => p !== "");
  const seen = new Set<string>();
  for (let i = 0; i < parents.length; i += 1000) {
    const read = await api.resources.read({
      identifiers: parents.slice(i, i + 1000),
      excludeChildren: true,
      asOf: asOf(),
    });
    for (const r of read.resources) seen.add(r.identifier);
  }
  const rows = res.results
    .filter((r) => r.parentIdentifier !== undefined && !seen.has(r.parentIdentifier))
    .map((r) => ({
      identifier: r.identifier,
      payloadType: r.payload.case ?? "",
      childCount: undefined,
      descendantCount: undefined,
      payloadPreview: `parent ${r.parentIdentifier ?? ""}: not visible to you (hidden from you, or deleted)`,
    }));
  addMarks(res.results.map((r) => r.createdAt));
  return { rows, next: res.nextCursor };
}

export function createTree(): HTMLElement {
  const note = h("p", { class: "status", role: "status" });
  const root = h("ul", { role: "tree", "aria-label": "Resources by lineage", class: "tree" });
  // Nodes the reader opened stay open when the read point moves.
  const expanded = new Set<string>();
  // The lists on screen, by parent ("" for the roots): read again when the live feed changes them.
  const lists = new Map<string, () => Promise<void>>();

  function items(): HTMLElement[] {
    return [...root.querySelectorAll<HTMLElement>('[role="treeitem"]')].filter((el) => el.offsetParent !== null);
  }

  function focusItem(el: HTMLElement | undefined): void {
    if (el === undefined) return;
    for (const it of root.querySelectorAll<HTMLElement>('[role="treeitem"]')) it.tabIndex = -1;
    el.tabIndex = 0;
    el.focus();
  }

  function more(list: HTMLElement, level: number, rows: Row[], next: (() => Promise<void>) | undefined, label: string) {
    list.querySelector(":scope > .more")?.remove();
    for (const row of rows) list.append(item(row, level));
    if (next !== undefined) {
      const btn = h("button", { type: "button", class: "link" }, label);
      btn.addEventListener(
        "click",
        () => void next().catch((err: unknown) => status(note, describeError(err), "error")),
      );
      list.append(h("li", { class: "more", role: "none" }, btn));
    }
  }

  function fill(list: HTMLElement, parent: string | undefined, level: number): Promise<void> {
    return childrenOf(parent, (rows, next) => {
      more(list, level, rows, next, "Load more…");
      if (list === root && rows.length === 0)
        list.append(h("li", { role: "none", class: "empty" }, "Nothing here at this time."));
      const first = root.querySelector<HTMLElement>('[role="treeitem"]');
      if (first !== null && root.querySelector('[role="treeitem"][tabindex="0"]') === null) first.tabIndex = 0;
    });
  }

  function item(row: Row, level: number, loadGroup?: (group: HTMLElement) => Promise<void>): HTMLElement {
    // Unknown (a row paged through Query): expandable until opening it finds nothing.
    let expandable = row.childCount === undefined || row.childCount > 0n;
    const group = h("ul", { role: "group", hidden: true });
    const toggle = h("span", { class: "toggle", "aria-hidden": "true" }, expandable ? "▸" : "·");
    const label = h(
      "span",
      { class: "label" },
      toggle,
      h("span", { class: "id" }, row.identifier),
      row.payloadType === "" ? null : h("span", { class: `badge t-${row.payloadType}` }, row.payloadType),
      row.childCount === undefined || row.childCount === 0n
        ? null
        : h(
            "span",
            { class: "count", title: `${String(row.descendantCount ?? 0n)} descendants you may see` },
            `${String(row.childCount)} ${row.childCount === 1n ? "child" : "children"}`,
          ),
      h("span", { class: "preview" }, row.payloadPreview),
    );
    const li = h(
      "li",
      {
        role: "treeitem",
        tabindex: -1,
        "aria-level": level,
        "aria-selected": String(selected() === row.identifier),
        "data-id": row.identifier,
      },
      label,
      group,
    );
    if (expandable) li.setAttribute("aria-expanded", "false");
    let loaded = false;
    const load =
      loadGroup ??
      (async (g: HTMLElement) => {
        await fill(g, row.identifier, level + 1);
        lists.set(row.identifier, async () => {
          g.replaceChildren();
          await fill(g, row.identifier, level + 1);
        });
      });
    const setOpen = async (open: boolean): Promise<void> => {
      if (!expandable) return;
      if (open) expanded.add(row.identifier);
      else expanded.delete(row.identifier);
      li.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "▾" : "▸";
      group.hidden = !open;
      if (open && !loaded) {
        loaded = true;
        group.setAttribute("aria-busy", "true");
        try {
          await load(group);
          if (row.childCount === undefined && loadGroup === undefined && group.childElementCount === 0) {
            // A leaf after all: no arrow, never asked again.
            expandable = false;
            li.removeAttribute("aria-expanded");
            toggle.textContent = "·";
          }
        } catch (err) {
          loaded = false;
          status(note, describeError(err), "error");
        } finally {
          group.removeAttribute("aria-busy");
        }
      }
    };
    toggle.addEventListener("click", (e) => {
      e.stopPropagation();
      void setOpen(li.getAttribute("aria-expanded") !== "true");
    });
    label.addEventListener("click", () => {
      focusItem(li);
      if (loadGroup === undefined) select(row.identifier);
      else void setOpen(li.getAttribute("aria-expanded") !== "true");
    });
    li.addEventListener("keydown", (e) => {
      if (e.target !== li) return;
      const all = items();
      const at = all.indexOf(li);
      const open = li.getAttribute("aria-expanded") === "true";
      switch (e.key) {
        case "ArrowDown":
          focusItem(all[at + 1]);
          break;
        case "ArrowUp":
          focusItem(all[at - 1]);
          break;
        case "Home":
          focusItem(all[0]);
          break;
        case "End":
          focusItem(all[all.length - 1]);
          break;
        case "ArrowRight":
          if (expandable && !open) void setOpen(true);
          else if (open) focusItem(group.querySelector<HTMLElement>('[role="treeitem"]') ?? undefined);
          break;
        case "ArrowLeft":
          if (open) void setOpen(false);
          else focusItem(li.parentElement?.closest<HTMLElement>('[role="treeitem"]') ?? undefined);
          break;
        case "Enter":
        case " ":
          if (loadGroup === undefined) select(row.identifier);
          else void setOpen(!open);
          break;
        default:
          return;
      }
      e.preventDefault();
    });
    if (expandable && expanded.has(row.identifier)) void setOpen(true);
    return li;
  }

  /** The root item that gathers what the caller may see below parents it may not (none with every grant). */
  function hiddenParentsItem(): HTMLElement | null {
    const me = identityNow();
    if (me === undefined || me.grants === undefined) return null;
    if (me.grants.allDatasources && me.grants.clearance === "restricted") return null;
    const scan = async (list: HTMLElement, cursor: string | undefined): Promise<void> => {
      const { rows, next } = await underHiddenParents(cursor);
      more(list, 2, rows, next === undefined ? undefined : () => scan(list, next), "Look further…");
      if (next === undefined && list.querySelector('[role="treeitem"]') === null)
        list.append(h("li", { role: "none", class: "empty" }, "None."));
    };
    return item(
      {
        identifier: "(under hidden parents)",
        payloadType: "",
        childCount: undefined,
        descendantCount: undefined,
        payloadPreview: "resources you may see whose parent you may not",
      },
      1,
      (group) => scan(group, undefined),
    );
  }

  let shownAsOf: string | undefined | null = null;
  async function reload(): Promise<void> {
    shownAsOf = asOf();
    lists.clear();
    root.replaceChildren();
    root.setAttribute("aria-busy", "true");
    status(note, "");
    try {
      await fill(root, undefined, 1);
      lists.set("", async () => {
        root.replaceChildren();
        await fill(root, undefined, 1);
        const extra = hiddenParentsItem();
        if (extra !== null) root.append(extra);
      });
      const extra = hiddenParentsItem();
      if (extra !== null) root.append(extra);
    } catch (err) {
      status(note, describeError(err), "error");
    } finally {
      root.removeAttribute("aria-busy");
    }
  }
  subscribe((why) => {
    if (why === "refresh" || asOf() !== shownAsOf) void reload();
    for (const li of root.querySelectorAll<HTMLElement>('[role="treeitem"]'))
      li.setAttribute("aria-selected", String(li.dataset.id === selected()));
  });
  // One read of a list at a time; changes while it runs read it once more after.
  const running = new Map<string, boolean>();
  async function refill(parent: string): Promise<void> {
    const again = lists.get(parent);
    if (again === undefined) return;
    if (running.has(parent)) {
      running.set(parent, true);
      return;
    }
    running.set(parent, false);
    try {
      await again();
    } catch (err) {
      status(note, describeError(err), "error");
    } finally {
      const dirty = running.get(parent) === true;
      running.delete(parent);
      if (dirty) void refill(parent);
    }
  }
  onLiveChanges((events) => {
    if (asOf() !== undefined) return;
    const parents = new Set(events.map((e) => e.resource?.parentIdentifier ?? ""));
    for (const p of parents) void refill(p);
  });
  void reload();
  return h(
    "section",
    { class: "panel tree-panel", "aria-labelledby": "tree-h" },
    h("h2", { id: "tree-h" }, "Tree"),
    note,
    root,
  );
}
