// Statistics per datasource at the view's read point (StatsService.DetailedStats,
// docs/contract/08-statistics.md): what the caller may see, counted by the
// service (docs/access.md), read again when the read point moves or, at
// now, when the live feed reports a change.
import { api, describeError } from "./api.js";
import { h, status, table } from "./dom.js";
import { onLiveChanges } from "./live.js";
import { addMarks, asOf, subscribe } from "./state.js";

const counts = (m: Record<string, bigint>): string =>
  Object.entries(m)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => `${k} ${String(v)}`)
    .join(", ");

export function createStats(): HTMLElement {
  const note = h("p", { class: "status", role: "status" });
  const out = h("div", { class: "stats-out" });
  const caption = h("p", { class: "hint", id: "stats-at" });
  let token = 0;
  let timer: number | undefined;

  async function load(): Promise<void> {
    const mine = ++token;
    const at = asOf();
    try {
      const res = await api.stats.detailedStats({ asOf: at });
      if (mine !== token) return;
      addMarks(res.datasources.map((d) => d.lastUpdatedAt ?? ""));
      caption.textContent = at === undefined ? "Now" : `As of ${at}`;
      const rows = res.datasources.map((d) => ({
        datasource: d.datasourceId,
        patients: d.patients,
        studies: d.studies,
        resources: d.resources,
        "by type": counts(d.byPayloadType),
        "by access level": counts(d.byAccessLevel),
        "file bytes": d.totalBytes,
        "last change": d.lastUpdatedAt ?? null,
      }));
      out.replaceChildren(
        rows.length === 0
          ? h("p", { class: "empty" }, "No datasource you may see.")
          : table(Object.keys(rows[0] ?? {}), rows, "Per datasource, counting only what you may see"),
      );
      status(note, "");
    } catch (err) {
      if (mine === token) status(note, describeError(err), "error");
    }
  }
  subscribe((why) => {
    if (why !== "select") void load();
  });
  onLiveChanges(() => {
    if (asOf() !== undefined) return;
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void load(), 300);
  });
  void load();
  return h(
    "section",
    { class: "panel stats-panel", "aria-labelledby": "stats-h" },
    h("h2", { id: "stats-h" }, "Statistics"),
    caption,
    note,
    out,
  );
}
