// The ordered list of migrations. Adding one: a new numbered module that
// exports `sql`, plus one entry here. Applied ids are never edited.
import { sql as resources } from "./0001-resources.js";
import { sql as queryIndexes } from "./0002-query-indexes.js";
import { sql as registryArtefacts } from "./0003-registry-artefacts.js";
import { sql as lineageView } from "./0004-lineage-view.js";
import { sql as historySortIndexes } from "./0005-history-sort-indexes.js";
import { sql as supersededHistory } from "./0006-superseded-history.js";
import { sql as registryKeyIds } from "./0010-registry-key-ids.js";
import { sql as events } from "./0012-events.js";
import { sql as registryKeyChains } from "./0014-registry-key-chains.js";
import { sql as eventsOnlyChanges } from "./0015-events-only-changes.js";
import { sql as supersedeHashJoin } from "./0016-supersede-hash-join.js";
import { sql as versionActors } from "./0017-version-actors.js";
import { sql as accessAttribution } from "./0018-access-attribution.js";
import { sql as treeCounts } from "./0020-tree-counts.js";
import { sql as treeCountsBackfill } from "./0021-tree-counts-backfill.js";
import { sql as payloadFieldIndexes } from "./0022-payload-field-indexes.js";
import { sql as datasourceCounts } from "./0023-datasource-counts.js";
import { sql as objectClaims } from "./0024-object-claims.js";
import { sql as treeCountsSetBased } from "./0025-tree-counts-set-based.js";
import { sql as triggerSearchPath } from "./0026-trigger-search-path.js";
import { sql as attributionChangesIndex } from "./0027-attribution-changes-index.js";
import { sql as datasourceCountsHistory } from "./0028-datasource-counts-history.js";
import { sql as versionsPayloadGin } from "./0029-versions-payload-gin.js";

export interface Migration {
  readonly id: number;
  readonly name: string;
  readonly sql: string;
}

export const migrations: readonly Migration[] = [
  { id: 1, name: "resources", sql: resources },
  { id: 2, name: "query-indexes", sql: queryIndexes },
  { id: 3, name: "registry-artefacts", sql: registryArtefacts },
  { id: 4, name: "lineage-view", sql: lineageView },
  { id: 5, name: "history-sort-indexes", sql: historySortIndexes },
  { id: 6, name: "superseded-history", sql: supersededHistory },
  { id: 10, name: "registry-key-ids", sql: registryKeyIds },
  { id: 12, name: "events", sql: events },
  { id: 14, name: "registry-key-chains", sql: registryKeyChains },
  { id: 15, name: "events-only-changes", sql: eventsOnlyChanges },
  { id: 16, name: "supersede-hash-join", sql: supersedeHashJoin },
  { id: 17, name: "version-actors", sql: versionActors },
  { id: 18, name: "access-attribution", sql: accessAttribution },
  { id: 20, name: "tree-counts", sql: treeCounts },
  { id: 21, name: "tree-counts-backfill", sql: treeCountsBackfill },
  { id: 22, name: "payload-field-indexes", sql: payloadFieldIndexes },
  { id: 23, name: "datasource-counts", sql: datasourceCounts },
  { id: 24, name: "object-claims", sql: objectClaims },
  { id: 25, name: "tree-counts-set-based", sql: treeCountsSetBased },
  { id: 26, name: "trigger-search-path", sql: triggerSearchPath },
  { id: 27, name: "attribution-changes-index", sql: attributionChangesIndex },
  { id: 28, name: "datasource-counts-history", sql: datasourceCountsHistory },
  { id: 29, name: "versions-payload-gin", sql: versionsPayloadGin },
];
