// The history trigger (0006) joins its two transition tables, which have no
// statistics, and the planner picked a nested loop: a cascading delete of
// 20,000 resources (no batch limit applies to a cascade) took minutes,
// quadratic in the rows of the statement (measured: 4,000 rows 7.3 s, 20,000
// about 160 s; with hash joins 0.18 s and 2.1 s). The setting is scoped to the
// function's own run, so nothing else of the transaction plans differently.
// A later CREATE OR REPLACE of resources_supersede must keep this SET clause.
export const sql = `
ALTER FUNCTION resources_supersede() SET enable_nestloop = off;
`;
