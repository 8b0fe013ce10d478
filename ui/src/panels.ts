// The page's panels, in order. A panel is a module that returns its
// section; adding one (as the live change feed of docs/contract/14-events.md was)
// is one module and one line here.
import { createDetail } from "./detail.js";
import { createFeed } from "./feed.js";
import { createQuery } from "./query.js";
import { createStats } from "./stats.js";
import { createStorage } from "./storage.js";
import { createTree } from "./tree.js";

export interface Panel {
  /** Where it goes: the left column (browse) or the right one (inspect). */
  readonly column: "left" | "right" | "wide";
  readonly create: () => HTMLElement;
}

export const panels: readonly Panel[] = [
  { column: "left", create: createTree },
  { column: "right", create: createDetail },
  { column: "wide", create: createStats },
  { column: "wide", create: createQuery },
  { column: "wide", create: createStorage },
  { column: "wide", create: createFeed },
];
