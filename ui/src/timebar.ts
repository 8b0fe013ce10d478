// The read point of the whole view. The slider steps through the instants
// of the changes on screen (state.ts marks: the tree's resources, the open
// resource's versions, the query's rows), one step per change, with a tick
// for each, and ends at "now"; the text field takes any RFC 3339 instant to
// the microsecond. Either one sets ?as_of= (state.ts); "Now" clears it, and
// at now reads everything again.
import { h, status } from "./dom.js";
import { allMarks, asOf, micros, onMarks, refresh, RFC3339, setAsOf, subscribe } from "./state.js";

export function createTimebar(): HTMLElement {
  const ticks = h("datalist", { id: "as-of-marks" });
  const slider = h("input", {
    type: "range",
    id: "as-of-slider",
    min: 0,
    max: 0,
    step: 1,
    list: "as-of-marks",
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
  let instants: string[] = [];

  /** The slider position of a read point: the last change at or before it; the end for now. */
  function positionOf(at: string | undefined): number {
    if (at === undefined) return instants.length;
    const t = micros(at);
    let i = 0;
    while (i < instants.length && micros(instants[i] as string) <= t) i++;
    return Math.max(0, i - 1);
  }

  function label(i: number): string {
    return i >= instants.length ? "Now (live)" : `As of ${instants[i] as string}`;
  }

  function sync(): void {
    const at = asOf();
    instants = allMarks();
    ticks.replaceChildren(...[...instants, "now"].map((s, i) => h("option", { value: i, label: s })));
    slider.max = String(instants.length);
    slider.value = String(positionOf(at));
    slider.setAttribute("aria-valuetext", at === undefined ? "Now" : at);
    slider.title = `${instants.length} ${instants.length === 1 ? "change" : "changes"} on screen`;
    if (document.activeElement !== input) input.value = at ?? "";
    shown.textContent = at === undefined ? "Now (live)" : `As of ${at}`;
    document.body.classList.toggle("past", at !== undefined);
  }

  slider.addEventListener("input", () => {
    const i = Number(slider.value);
    shown.textContent = label(i);
    setAsOf(i >= instants.length ? undefined : instants[i]);
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
    ticks,
    h("label", { for: "as-of-input" }, "As of (UTC)"),
    input,
    h("button", { type: "submit" }, "Go"),
    h(
      "button",
      {
        type: "button",
        onclick: () => {
          input.value = "";
          if (asOf() === undefined) refresh();
          else setAsOf(undefined);
        },
      },
      "Now",
    ),
    shown,
    note,
  );
  subscribe(sync);
  onMarks(sync);
  sync();
  return form;
}
