// The part of the client library that runs in a browser as well as in Node:
// it needs only @connectrpc/connect and the generated descriptors, never
// @connectrpc/connect-node. The explorer (ui/) imports it; index.ts, the
// Node client, re-exports it.
export {
  FINAL_WATCH_CODES,
  followFeed,
  isFinalWatchError,
  watchEvents,
  type WatchOpener,
  type WatchParams,
  type WatchStreamRequest,
} from "./watch.js";
// A resource's versions page by page (the explorer's history panel can use it too).
export { historyPages, type HistoryParams } from "./history.js";
