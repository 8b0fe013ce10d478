// Who may see what (docs/contract/18-access.md): grants and the caller.
export {
  ACCESS_LEVELS,
  accessRank,
  ALL_GRANTS,
  grantsKey,
  grantsOf,
  LOCAL_CALLER,
  maySee,
  parseGrantScope,
  seesEverything,
  type AccessLevel,
  type Caller,
  type Grants,
  type GrantScope,
} from "./grants.js";
