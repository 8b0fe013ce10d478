// The live change feed (API.md section 14): a Connect server stream of
// EventService.Watch through the page's transport, started and stopped by
// the reader, optionally limited to payload types. It resumes as the
// project's Node client does (src/client/watch.ts, which the page cannot
// import: src/client/ is Node-only behind its index): after a dropped stream
// it opens a new one with since = the `at` of the last message seen
// (heartbeats included), so no commit is missed or shown twice. The newest
// events are on top; at most FEED_MAX rows.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { Event, WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { describeError, transport } from "./api.js";
import { h, status } from "./dom.js";
import { select } from "./state.js";

const FEED_MAX = 200;
/** Errors that resuming cannot cure: the request or the credentials are wrong. */
const FATAL = new Set<Code>([Code.InvalidArgument, Code.Unauthenticated, Code.PermissionDenied, Code.Unimplemented, Code.FailedPrecondition]);
const events = createClient(EventService, transport);

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

/** Every message of the feed (heartbeats too) until aborted, resuming after a dropped stream. */
async function* follow(payloadTypes: string[], signal: AbortSignal, onRetry: (err: ConnectError, since: string | undefined) => void): AsyncGenerator<WatchResponse> {
  let since: string | undefined;
  let delay = 250;
  while (!signal.aborted) {
    try {
      for await (const message of events.watch({ ...(since !== undefined ? { since } : {}), payloadTypes }, { signal })) {
        delay = 250;
        since = message.at;
        yield message;
      }
    } catch (err) {
      if (signal.aborted) return;
      const e = ConnectError.from(err);
      if (FATAL.has(e.code)) throw e;
      onRetry(e, since);
    }
    await pause(delay, signal);
    delay = Math.min(delay * 2, 30_000);
  }
}

function row(e: Event): HTMLTableRowElement {
  const id = h("button", { type: "button", class: "link", title: `Open ${e.identifier}`, onclick: () => select(e.identifier) }, e.identifier);
  return h(
    "tr",
    { class: `feed-event kind-${e.kind}`, "data-id": e.identifier, "data-kind": e.kind },
    h("td", {}, e.at),
    h("td", {}, id),
    h("td", {}, h("span", { class: `badge t-${e.payloadType}` }, e.payloadType)),
    h("td", {}, e.kind),
    h("td", {}, String(e.version)),
  );
}

export function createFeed(): HTMLElement {
  const types = h("input", { id: "feed-types", type: "text", placeholder: "all types", "aria-describedby": "feed-types-hint", autocomplete: "off" });
  const toggle = h("button", { type: "button", id: "feed-toggle", class: "primary", "aria-pressed": "false" }, "Start");
  const note = h("p", { class: "status", role: "status" });
  const body = h("tbody", {});
  const log = h(
    "table",
    { class: "feed-table" },
    h("caption", {}, "Newest first"),
    h("thead", {}, h("tr", {}, ["at", "identifier", "payload_type", "kind", "version"].map((c) => h("th", { scope: "col" }, c)))),
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
    const payloadTypes = types.value.split(",").map((t) => t.trim()).filter((t) => t !== "");
    status(note, payloadTypes.length === 0 ? "Following every change…" : `Following changes to ${payloadTypes.join(", ")}…`);
    try {
      // The first message comes at once (a heartbeat when there is nothing
      // to send): from then on no commit is missed.
      const feed = follow(payloadTypes, signal, (err, since) => status(note, `Stream dropped (${describeError(err)}); resuming${since === undefined ? "" : ` after ${since}`}…`));
      for await (const message of feed) {
        status(note, `Following; read up to ${message.at}.`);
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
    h("div", { class: "row" },
      h("label", { for: "feed-types" }, "Payload types"), types,
      toggle,
      h("button", { type: "button", onclick: () => body.replaceChildren() }, "Clear")),
    h("p", { class: "hint", id: "feed-types-hint" }, "Comma-separated; empty follows every type. The feed starts at the moment you press Start."),
    note,
    h("div", { class: "feed-out" }, log),
    announce,
  );
}
