// history(): every version of one resource (docs/contract/19-audit-history.md)
// as an async iterator over pages, following next_cursor until it is null.
import { createClient, type Transport } from "@connectrpc/connect";
import type { HistoryResponse } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";

export interface HistoryParams {
  /** RFC 3339, inclusive: only versions committed at or after it. */
  readonly since?: string;
  /** RFC 3339, exclusive: only versions committed before it. */
  readonly until?: string;
  /** Versions per page (1 to the server's MAX_QUERY_LIMIT; server default 100). */
  readonly limit?: number;
  readonly signal?: AbortSignal;
}

/** The pages of one resource's history, oldest versions first; a page may be empty only when the range holds none. */
export async function* historyPages(
  transport: Transport,
  identifier: string,
  params: HistoryParams = {},
): AsyncGenerator<HistoryResponse, void, undefined> {
  const client = createClient(ResourceService, transport);
  let cursor: string | undefined;
  for (;;) {
    const page = await client.history(
      {
        identifier,
        ...(params.since !== undefined ? { since: params.since } : {}),
        ...(params.until !== undefined ? { until: params.until } : {}),
        ...(params.limit !== undefined ? { limit: params.limit } : {}),
        ...(cursor !== undefined ? { cursor } : {}),
      },
      { ...(params.signal ? { signal: params.signal } : {}) },
    );
    yield page;
    if (page.nextCursor === undefined) return;
    cursor = page.nextCursor;
  }
}
