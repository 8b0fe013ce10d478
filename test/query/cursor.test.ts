// The cursor codec accepts exactly the tokens it made. Base64 leaves the low
// bits of a signature's last character unused, and Node's decoder ignores
// padding and characters outside the alphabet; a cursor altered in any of
// those ways must still be refused, as every other altered cursor is.
import { describe, expect, it } from "vitest";
import { createCursorCodec } from "../../src/store/index.js";

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const codec = createCursorCodec("a secret for the cursor test");
const state = { at: "2026-11-25T20:45:22.076000Z", after: { value: "q-f11", identifier: "q-f11" }, hash: "h" };

const refused = (token: string) => {
  expect(() => codec.decode(token, "h")).toThrow(/cursor is invalid/);
};

describe("cursor codec", () => {
  it("decodes its own cursor", () => {
    expect(codec.decode(codec.encode(state), "h")).toEqual(state);
  });

  it("refuses every signature whose unused low bits differ from its own", () => {
    let variants = 0;
    for (let n = 0; n < 64; n++) {
      const token = codec.encode({ ...state, after: { ...state.after, identifier: `q-f${n}` } });
      const last = ALPHABET.indexOf(token.slice(-1));
      expect(last % 4).toBe(0);
      for (let low = 1; low < 4; low++) {
        refused(token.slice(0, -1) + ALPHABET[last + low]);
        variants++;
      }
    }
    expect(variants).toBe(192);
  });

  it("refuses padding, characters outside the alphabet and wider characters in the signature", () => {
    const token = codec.encode(state);
    refused(`${token}=`);
    refused(`${token}==`);
    refused(`${token} `);
    refused(token.slice(0, -5) + "!" + token.slice(-5));
    refused(token.replace(".", ".+"));
    // A character whose low byte is the one it replaces: the same bytes only if compared as latin1.
    const i = token.length - 3;
    refused(token.slice(0, i) + String.fromCharCode(token.charCodeAt(i) + 256) + token.slice(i + 1));
  });

  it("refuses a cursor of another query", () => {
    expect(() => codec.decode(codec.encode(state), "other")).toThrow(/another query/);
  });
});
