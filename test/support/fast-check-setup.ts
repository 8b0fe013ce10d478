// Every property test's failure carries the error that failed it: fast-check
// otherwise reports only the seed and the counterexample, and puts the error
// in `cause`, which vitest's JSON report (read by .ci/run's summary) drops.
import fc from "fast-check";

fc.configureGlobal({ ...fc.readConfigureGlobal(), includeErrorInReport: true });
