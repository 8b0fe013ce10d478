// The listening hub (src/store/notifications.ts): a subscriber is told to
// look again whenever its channel starts listening, the first LISTEN
// included, since a commit notified before the LISTEN took effect reached
// no one (the change feed relies on it: src/store/events.ts).
import { describe, expect, it } from "vitest";
import { createNotifications, type Db } from "../../src/store/index.js";

type Listen = NonNullable<Db["listen"]>;
type ListenHandlers = Parameters<Listen>[1];
type Listener = Awaited<ReturnType<Listen>>;

/** A database whose LISTEN takes effect when the test says, and whose connection the test can drop. */
function slowListener() {
  const pending: { resolve: () => void; handlers: ListenHandlers }[] = [];
  const db = {
    capabilities: { listen: true },
    listen(_channel: string, handlers: ListenHandlers): Promise<Listener> {
      return new Promise((resolve) =>
        pending.push({ handlers, resolve: () => resolve({ close: () => Promise.resolve() }) }),
      );
    },
  } as unknown as Db;
  return { db, pending };
}

describe("notifications", () => {
  it("tells the subscribers once the first LISTEN takes effect, and again after a reconnect", async () => {
    const { db, pending } = slowListener();
    const hub = createNotifications(db, { reconnectMs: 1 });
    let told = 0;
    const subscribed = hub.subscribe("resource_events", () => (told += 1));
    await Promise.resolve();
    expect(pending).toHaveLength(1);
    expect([told, hub.listening("resource_events")]).toEqual([0, false]);
    pending[0]!.resolve();
    await subscribed;
    expect([told, hub.listening("resource_events")]).toEqual([1, true]);
    // A notification: told once more.
    pending[0]!.handlers.onNotify();
    expect(told).toBe(2);
    // The connection lost and listening again: told once more.
    pending[0]!.handlers.onLost(new Error("gone"));
    for (let i = 0; i < 100 && pending.length < 2; i++) await new Promise((r) => setTimeout(r, 2));
    expect(pending).toHaveLength(2);
    pending[1]!.resolve();
    for (let i = 0; i < 100 && told < 3; i++) await new Promise((r) => setTimeout(r, 2));
    expect(told).toBe(3);
    await hub.close();
  });
});
