// Fills tree_counts (0020) from the current rows of an existing store: one
// set-based pass per tree level (tree_counts_rebuild), so its time grows
// with the store, not with its depth squared (docs/benchmarks/tree-and-scale.md, "Tree counts": 2M resources).
// From here on the writes keep the counts.
export const sql = `
SELECT tree_counts_rebuild();
`;
