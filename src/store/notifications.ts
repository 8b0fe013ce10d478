// LISTEN/NOTIFY for the whole process: one listener per channel (db.listen),
// shared by every subscriber of that channel (each change-feed stream), so a
// thousand watchers cost one listening connection, not a thousand.
//
// A notification only says "look again": when a listener's connection drops,
// or cannot be opened at all (PostgreSQL restarting, connections full), the
// hub keeps trying with a growing wait and calls every subscriber of that
// channel once it listens again, since notifications sent meanwhile are lost.
// Subscribers ask listening() to know whether they must poll meanwhile; a
// failed LISTEN never fails a subscribe (docs/events.md).
import type { Db, Listener } from "./db.js";

export interface Notifications {
  /**
   * Calls onNotify after each notification on `channel`, and whenever the
   * channel starts listening (the first LISTEN, a reconnect): a commit
   * notified before the LISTEN took effect is then looked for all the same.
   * Returns the unsubscribe. Resolves after the first attempt to listen,
   * whether or not it succeeded (it is retried).
   */
  subscribe(channel: string, onNotify: () => void): Promise<() => Promise<void>>;
  /** Whether a connection listens on `channel` now (when not, notifications may be missed: poll). */
  listening(channel: string): boolean;
  /** Stops listening and closes the connections. */
  close(): Promise<void>;
}

export interface NotificationsOptions {
  /** First wait before listening again after a lost or refused connection (default 1 s); doubles per failure. */
  readonly reconnectMs?: number;
  /** Longest wait between attempts (default 30 s). */
  readonly maxReconnectMs?: number;
  /** Told about lost connections and failed reconnects (they are retried). */
  readonly onError?: (err: unknown) => void;
}

/** Channel names are fixed identifiers of this service, never user input; checked anyway since LISTEN takes no parameter. */
function checkChannel(channel: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`bad channel name ${channel}`);
  return channel;
}

interface Channel {
  readonly subscribers: Set<() => void>;
  listener?: Listener;
  listening?: Promise<Listener>;
  /** A reconnect loop runs. */
  retrying?: boolean;
}

export function createNotifications(db: Db, options: NotificationsOptions = {}): Notifications {
  if (!db.capabilities.listen || db.listen === undefined) throw new Error("this database cannot LISTEN");
  const listen = db.listen.bind(db);
  const reconnectMs = options.reconnectMs ?? 1000;
  const maxReconnectMs = Math.max(reconnectMs, options.maxReconnectMs ?? 30_000);
  const onError = options.onError ?? (() => {});
  const channels = new Map<string, Channel>();
  let closed = false;

  const notify = (ch: Channel): void => {
    for (const fn of [...ch.subscribers]) fn();
  };

  function start(name: string, ch: Channel): Promise<Listener> {
    ch.listening ??= listen(name, {
      onNotify: () => notify(ch),
      onLost: (err) => {
        if (err !== undefined) onError(err);
        void again(name, ch);
      },
    })
      .then((l) => {
        ch.listener = l;
        if (closed) void l.close();
        return l;
      })
      .finally(() => {
        ch.listening = undefined;
      });
    return ch.listening;
  }

  async function again(name: string, ch: Channel): Promise<void> {
    if (ch.retrying === true) return;
    ch.retrying = true;
    const lost = ch.listener;
    ch.listener = undefined;
    void lost?.close().catch(() => {});
    let wait = reconnectMs;
    try {
      while (!closed) {
        await new Promise((r) => setTimeout(r, wait));
        if (closed) return;
        try {
          await start(name, ch);
          notify(ch);
          return;
        } catch (err) {
          onError(err);
          wait = Math.min(maxReconnectMs, wait * 2);
        }
      }
    } finally {
      ch.retrying = false;
    }
  }

  return {
    async subscribe(channel, onNotify) {
      if (closed) throw new Error("notifications closed");
      const name = checkChannel(channel);
      let ch = channels.get(name);
      if (!ch) {
        ch = { subscribers: new Set() };
        channels.set(name, ch);
      }
      ch.subscribers.add(onNotify);
      if (!ch.listener && ch.retrying !== true) {
        try {
          await start(name, ch);
          // Listening now: what was notified before it took effect was missed.
          notify(ch);
        } catch (err) {
          // Refused now: keep trying in the background; the subscriber polls meanwhile.
          onError(err);
          void again(name, ch);
        }
      }
      const mine = ch;
      return () => {
        mine.subscribers.delete(onNotify);
        return Promise.resolve();
      };
    },
    listening(channel) {
      return channels.get(channel)?.listener !== undefined;
    },
    async close() {
      closed = true;
      const all = [...channels.values()];
      channels.clear();
      await Promise.allSettled(
        all.map(async (ch) => {
          ch.subscribers.clear();
          const l = ch.listener ?? (await ch.listening?.catch(() => undefined));
          ch.listener = undefined;
          await l?.close();
        }),
      );
    },
  };
}
