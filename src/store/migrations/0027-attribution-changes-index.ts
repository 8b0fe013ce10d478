// Statistics at an as_of for a caller with narrower grants subtract the
// resources the stricter-of rule hides, found among those changed after the
// point (store/stats.ts, hiddenSince): rows rewritten after it (the
// resources' updated_at index) and attribution periods started after it,
// which this index finds without reading every period.
export const sql = `
CREATE INDEX resource_attribution_tx_from_idx ON resource_attribution (tx_from);
`;
