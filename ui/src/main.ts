// The explorer's entry point: the header with the time bar and who the
// page calls as (WhoAmI), the panels, and the token dialog that API calls
// open when they are answered 401.
import "./style.css";
import type { WhoAmIResponse } from "../../gen/resourcestore/type/v1/identity_pb.js";
import { currentToken, onIdentity, onTokenNeeded, ready, setToken, signIn } from "./api.js";
import { h } from "./dom.js";
import { startLive } from "./live.js";
import { refresh } from "./state.js";
import { panels } from "./panels.js";
import { createTimebar } from "./timebar.js";

function tokenDialog(): (reason: string) => Promise<string | null> {
  const input = h("input", { id: "token-input", type: "password", autocomplete: "off", required: true });
  const reason = h("p", { class: "status error" });
  const dialog = h(
    "dialog",
    { id: "token-dialog", "aria-labelledby": "token-h" },
    h(
      "form",
      { method: "dialog" },
      h("h2", { id: "token-h" }, "A token is needed"),
      reason,
      h("label", { for: "token-input" }, "Bearer token"),
      input,
      h("p", { class: "hint" }, "Kept in this tab's session storage only."),
      h(
        "div",
        { class: "row" },
        h("button", { type: "submit", value: "ok", class: "primary" }, "Use token"),
        h("button", { type: "submit", value: "cancel", formnovalidate: true }, "Cancel"),
      ),
    ),
  );
  document.body.append(dialog);
  return (why) =>
    new Promise((resolve) => {
      reason.textContent = why;
      input.value = "";
      dialog.addEventListener(
        "close",
        () => resolve(dialog.returnValue === "ok" && input.value !== "" ? input.value : null),
        { once: true },
      );
      dialog.showModal();
      input.focus();
    });
}

/** One line: the actor, then what it may do and see. */
function describeIdentity(me: WhoAmIResponse): string {
  const g = me.grants;
  const ds = g === undefined || g.allDatasources ? "every datasource" : g.datasources.join(", ") || "no datasource";
  const scopes = me.scopes.join(", ") || "no scope";
  return `${me.actor} · ${scopes} · ${ds} · up to ${g?.clearance ?? "?"}`;
}

function identityBox(): HTMLElement {
  const who = h("span", { id: "whoami", class: "whoami", role: "status" }, "…");
  const signOut = h(
    "button",
    {
      type: "button",
      class: "link",
      hidden: currentToken() === null,
      onclick: () => {
        setToken(null);
        location.reload();
      },
    },
    "Forget token",
  );
  const signInBtn = h(
    "button",
    {
      type: "button",
      class: "link",
      hidden: true,
      onclick: () =>
        void signIn("Enter a token to sign in.").then((t) => {
          // Every panel reads again with the token; no reload.
          if (t !== null) refresh();
        }),
    },
    "Sign in",
  );
  onIdentity((me) => {
    signOut.hidden = currentToken() === null;
    signInBtn.hidden = me !== undefined;
    who.textContent = me === undefined ? "Not signed in" : describeIdentity(me);
    who.title = me === undefined ? "" : `Signed in as ${me.actor}${me.authenticated ? "" : " (authentication off)"}`;
  });
  void ready.then((me) => {
    if (me === undefined) {
      who.textContent = "Not signed in";
      signInBtn.hidden = false;
    }
  });
  return h("div", { class: "identity", "aria-label": "Who you are" }, who, signInBtn, signOut);
}

function start(): void {
  onTokenNeeded(tokenDialog());
  const header = h(
    "header",
    { class: "top" },
    h("h1", {}, h("a", { href: "/ui/" }, "Resource store"), h("span", { class: "sub" }, " explorer")),
    createTimebar(),
    identityBox(),
  );
  const cols = {
    left: h("div", { class: "col left" }),
    right: h("div", { class: "col right" }),
    wide: h("div", { class: "wide" }),
  };
  document.body.append(header, h("main", {}, h("div", { class: "cols" }, cols.left, cols.right), cols.wide));
  // The panels make their first calls once WhoAmI has answered (or the reader declined a token).
  void ready.then(() => {
    for (const p of panels) cols[p.column].append(p.create());
    startLive();
  });
}

start();
