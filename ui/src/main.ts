// The explorer's entry point: the header with the time bar, the panels,
// and the token dialog that API calls open when they are answered 401.
import "./style.css";
import { currentToken, onTokenNeeded, setToken } from "./api.js";
import { h } from "./dom.js";
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

function start(): void {
  onTokenNeeded(tokenDialog());
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
  const header = h(
    "header",
    { class: "top" },
    h("h1", {}, h("a", { href: "/ui/" }, "Resource store"), h("span", { class: "sub" }, " explorer")),
    createTimebar(),
    signOut,
  );
  const cols = {
    left: h("div", { class: "col left" }),
    right: h("div", { class: "col right" }),
    wide: h("div", { class: "wide" }),
  };
  for (const p of panels) cols[p.column].append(p.create());
  document.body.append(header, h("main", {}, h("div", { class: "cols" }, cols.left, cols.right), cols.wide));
}

start();
