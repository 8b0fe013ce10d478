// The read point of the whole view: a slider from the oldest resource to
// now, and a text field that takes an RFC 3339 instant to the microsecond.
// Either one sets ?as_of= (state.ts); "Now" clears it.
import { api, describeError } from "./api.js";
import { h, status } from "./dom.js";
import { asOf, micros, RFC3339, setAsOf, subscribe } from "./state.js";

export function createTimebar(): HTMLElement {
  const slider = h("input", {
    type: "range",
    id: "as-of-slider",
    min: 0,
    max: 1,
    step: 1,
    "aria-describedby": "as-of-shown",
  });
  const input = h("input", {
    type: "text",
    id: "as-of-input",
    placeholder: "2026-01-31T12:00:00.000000Z",
    spellcheck: "false",
    autocomplete: "off",
    size: 30,
  });
  const shown = h("output", { id: "as-of-shown", for: "as-of-slider as-of-input" });
  const note = h("span", { class: "status", role: "status" });
  let oldestMs = Date.now() - 3600_000;

  function msOf(at: string): number {
    return Number(micros(at) / 1000n);
  }

  function sync(): void {
    const at = asOf();
    const nowMs = Date.now();
    const lo = Math.min(oldestMs, at === undefined ? nowMs : msOf(at)) - 1000;
    slider.min = String(lo);
    slider.max = String(nowMs);
    slider.value = String(at === undefined ? nowMs : msOf(at));
    if (document.activeElement !== input) input.value = at ?? "";
    shown.textContent = at === undefined ? "Now (live)" : `As of ${at}`;
    document.body.classList.toggle("past", at !== undefined);
  }

  let timer: number | undefined;
  slider.addEventListener("input", () => {
    window.clearTimeout(timer);
    const v = Number(slider.value);
    shown.textContent = `As of ${new Date(v).toISOString()}`;
    timer = window.setTimeout(() => setAsOf(v >= Number(slider.max) ? undefined : new Date(v).toISOString()), 200);
  });
  const apply = (): void => {
    const v = input.value.trim();
    if (v === "") return setAsOf(undefined);
    if (!RFC3339.test(v)) return status(note, "Enter an RFC 3339 time such as 2026-01-31T12:00:00.123456Z", "error");
    status(note, "");
    setAsOf(v);
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") apply();
  });
  const form = h(
    "form",
    {
      class: "timebar",
      "aria-label": "Time",
      onsubmit: (e: Event) => {
        e.preventDefault();
        apply();
      },
    },
    h("label", { for: "as-of-slider" }, "Time"),
    slider,
    h("label", { for: "as-of-input" }, "As of (UTC)"),
    input,
    h("button", { type: "submit" }, "Go"),
    h(
      "button",
      {
        type: "button",
        onclick: () => {
          input.value = "";
          setAsOf(undefined);
        },
      },
      "Now",
    ),
    shown,
    note,
  );
  subscribe(sync);
  sync();
  // The slider starts at the oldest resource there is now.
  api.query
    .query({ sortBy: "created_at", sortOrder: "asc", limit: 1, selectColumns: ["created_at"] })
    .then((res) => {
      const first = res.results[0];
      if (first !== undefined && first.createdAt !== "") oldestMs = msOf(first.createdAt);
      sync();
    })
    .catch((err: unknown) => status(note, describeError(err), "error"));
  return form;
}
