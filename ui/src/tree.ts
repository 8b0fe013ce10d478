// The lineage tree, lazily: the roots first, a node's children when it is
// opened (v1 LineageService.Children with payloads, for child counts and a
// payload preview). A parent with more children than the service lists at
// once is paged through v2 Query by parent_identifier instead. Keyboard:
// the WAI-ARIA tree pattern (arrows, Home, End, Enter).
import { Code, ConnectError } from "@connectrpc/connect";
import type { TreeNode } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { api, describeError } from "./api.js";
import { h, status } from "./dom.js";
import { preview } from "./resource.js";
import { asOf, select, selected, subscribe } from "./state.js";

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

async function childrenOf(
  parent: string | undefined,
  more: (rows: Row[], next: (() => Promise<void>) | undefined) => void,
): Promise<void> {
  const as_of = asOf();
  try {
    const res = await api.children.children({ parentIdentifier: parent, withPayloads: true, asOf: as_of });
    more(res.nodes.map(fromNode), undefined);
  } catch (err) {
    // Too many to list at once: page them with Query (v2) by parent.
    if (parent === undefined || ConnectError.from(err).code !== Code.FailedPrecondition) throw err;
    const page = async (cursor: string | undefined): Promise<void> => {
      const res = await api.query.query({
        parentIdentifier: parent,
        sortBy: "created_at",
        sortOrder: "asc",
        limit: PAGE,
        cursor,
        asOf: cursor === undefined ? as_of : undefined,
      });
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

export function createTree(): HTMLElement {
  const note = h("p", { class: "status", role: "status" });
  const root = h("ul", { role: "tree", "aria-label": "Resources by lineage", class: "tree" });
  // Nodes the reader opened stay open when the read point moves.
  const expanded = new Set<string>();

  function items(): HTMLElement[] {
    return [...root.querySelectorAll<HTMLElement>('[role="treeitem"]')].filter((el) => el.offsetParent !== null);
  }

  function focusItem(el: HTMLElement | undefined): void {
    if (el === undefined) return;
    for (const it of root.querySelectorAll<HTMLElement>('[role="treeitem"]')) it.tabIndex = -1;
    el.tabIndex = 0;
    el.focus();
  }

  function fill(list: HTMLElement, parent: string | undefined, level: number): Promise<void> {
    return childrenOf(parent, (rows, next) => {
      list.querySelector(":scope > .more")?.remove();
      for (const row of rows) list.append(item(row, level));
      if (next !== undefined) {
        const btn = h("button", { type: "button", class: "link" }, "Load more…");
        btn.addEventListener(
          "click",
          () => void next().catch((err: unknown) => status(note, describeError(err), "error")),
        );
        list.append(h("li", { class: "more", role: "none" }, btn));
      }
      if (list === root && rows.length === 0)
        list.append(h("li", { role: "none", class: "empty" }, "Nothing here at this time."));
      const first = root.querySelector<HTMLElement>('[role="treeitem"]');
      if (first !== null && root.querySelector('[role="treeitem"][tabindex="0"]') === null) first.tabIndex = 0;
    });
  }

  function item(row: Row, level: number): HTMLElement {
    const expandable = row.childCount === undefined || row.childCount > 0n;
    const group = h("ul", { role: "group", hidden: true });
    const toggle = h("span", { class: "toggle", "aria-hidden": "true" }, expandable ? "▸" : "·");
    const label = h(
      "span",
      { class: "label" },
      toggle,
      h("span", { class: "id" }, row.identifier),
      h("span", { class: `badge t-${row.payloadType}` }, row.payloadType),
      row.childCount === undefined || row.childCount === 0n
        ? null
        : h(
            "span",
            { class: "count", title: `${String(row.descendantCount ?? 0n)} descendants` },
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
          await fill(group, row.identifier, level + 1);
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
      select(row.identifier);
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
          select(row.identifier);
          break;
        default:
          return;
      }
      e.preventDefault();
    });
    if (expandable && expanded.has(row.identifier)) void setOpen(true);
    return li;
  }

  let shownAsOf: string | undefined | null = null;
  async function reload(): Promise<void> {
    shownAsOf = asOf();
    root.replaceChildren();
    root.setAttribute("aria-busy", "true");
    status(note, "");
    try {
      await fill(root, undefined, 1);
    } catch (err) {
      status(note, describeError(err), "error");
    } finally {
      root.removeAttribute("aria-busy");
    }
  }
  subscribe(() => {
    if (asOf() !== shownAsOf) void reload();
    for (const li of root.querySelectorAll<HTMLElement>('[role="treeitem"]'))
      li.setAttribute("aria-selected", String(li.dataset.id === selected()));
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
