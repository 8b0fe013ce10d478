// The live change feed (docs/contract/14-events.md) through the page's transport
// (its token included), started and stopped by the reader, optionally limited to
// payload types. Resuming after a dropped stream, and which errors end the
// feed, is the client library's (src/client/browser.ts): the same code as
// the Node client's watch() and `resource-store watch`, so no commit is
// missed or shown twice, split commits included. The newest events are on
// top; at most FEED_MAX rows.
import type { Event } from "../../gen/resourcestore/type/v1/event_pb.js";
import { watchEvents } from "../../src/client/browser.js";
import { describeError, transport } from "./api.js";
import { h, status } from "./dom.js";
import { select } from "./state.js";

const FEED_MAX = 200;

function row(e: Event): HTMLTableRowElement {
  const id = h(
    "button",
    { type: "button", class: "link", title: `Open ${e.identifier}`, onclick: () => select(e.identifier) },
    e.identifier,
  );
  return h(
    "tr",
    { class: `feed-event kind-${e.kind}`, "data-id": e.identifier, "data-kind": e.kind },
    h("td", {}, e.at),
    h("td", {}, id),
    h("td", {}, h("span", { class: `badge t-${e.payloadType}` }, e.payloadType)),
    h("td", {}, e.kind),
    h("td", {}, String(e.version)),
    h("td", { class: "actor" }, e.actor),
  );
}

export function createFeed(): HTMLElement {
  const types = h("input", {
    id: "feed-types",
    type: "text",
    placeholder: "all types",
    "aria-describedby": "feed-types-hint",
    autocomplete: "off",
  });
  const toggle = h("button", { type: "button", id: "feed-toggle", class: "primary", "aria-pressed": "false" }, "Start");
  const note = h("p", { class: "status", role: "status" });
  const body = h("tbody", {});
  const log = h(
    "table",
    { class: "feed-table" },
    h("caption", {}, "Newest first"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["at", "identifier", "payload_type", "kind", "version", "actor"].map((c) => h("th", { scope: "col" }, c)),
      ),
    ),
    body,
  );
  // Screen readers hear each new event once, politely, in one sentence.
  const announce = h("div", { class: "sr-only", "aria-live": "polite", "aria-atomic": "false", id: "feed-live" });
  let controller: AbortController | undefined;

  function setRunning(on: boolean): void {
    toggle.textContent = on ? "Stop" : "Start";
    toggle.setAttribute("aria-pressed", String(on));
    toggle.className = on ? "" : "primary";
    types.disabled = on;
  }

  async function run(signal: AbortSignal): Promise<void> {
    const payloadTypes = types.value
      .split(",")
      .map((t) => t.trim())
      .filter((t) => t !== "");
    status(
      note,
      payloadTypes.length === 0 ? "Following every change…" : `Following changes to ${payloadTypes.join(", ")}…`,
    );
    try {
      // The first message comes at once (a heartbeat when there is nothing
      // to send): from then on no commit is missed.
      const feed = watchEvents(transport, {
        payloadTypes,
        signal,
        heartbeats: true,
        onRetry: (err, since) =>
          status(
            note,
            `Stream dropped (${describeError(err)}); resuming${since === undefined ? "" : ` after ${since}`}…`,
          ),
      });
      const since = new Date().toISOString().slice(11, 19);
      for await (const message of feed) {
        // A heartbeat's `at` is the server's read point, not a delay: say only that the feed is live.
        status(note, `Following live since ${since} UTC.`);
        for (const e of message.events) {
          body.prepend(row(e));
          const line = h("p", {}, `${e.kind} ${e.payloadType} ${e.identifier} version ${String(e.version)}`);
          announce.append(line);
          while (announce.childElementCount > 5) announce.firstElementChild?.remove();
        }
        while (body.childElementCount > FEED_MAX) body.lastElementChild?.remove();
      }
      if (!signal.aborted) status(note, "The feed ended.");
    } catch (err) {
      if (!signal.aborted) status(note, describeError(err), "error");
    } finally {
      if (controller?.signal === signal) {
        controller = undefined;
        setRunning(false);
      }
    }
  }

  function stop(): void {
    controller?.abort();
    controller = undefined;
    setRunning(false);
    status(note, "Stopped.");
  }

  toggle.addEventListener("click", () => {
    if (controller !== undefined) return stop();
    controller = new AbortController();
    setRunning(true);
    void run(controller.signal);
  });
  types.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && controller === undefined) toggle.click();
  });

  return h(
    "section",
    { class: "panel feed-panel", "aria-labelledby": "feed-h" },
    h("h2", { id: "feed-h" }, "Live changes"),
    h(
      "div",
      { class: "row" },
      h("label", { for: "feed-types" }, "Payload types"),
      types,
      toggle,
      h("button", { type: "button", onclick: () => body.replaceChildren() }, "Clear"),
    ),
    h(
      "p",
      { class: "hint", id: "feed-types-hint" },
      "Comma-separated; empty follows every type. The feed starts at the moment you press Start.",
    ),
    note,
    h("div", { class: "feed-out" }, log),
    announce,
  );
}
