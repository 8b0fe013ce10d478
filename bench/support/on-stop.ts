// What a benchmark stopped from outside (Ctrl-C, kill) must still undo:
// the servers it started (one left running kept a core busy and skewed
// every later measurement on the machine) and the databases it made (one
// left behind held a 20M store's gigabytes). `finally` blocks do not run
// when a signal ends the process, so each undo is registered here and run,
// in the order registered, before the process exits with the signal's code.
type Undo = () => void | Promise<void>;

const undos = new Set<Undo>();
let stopped = false;

/** True once a stop from outside has begun: a connection the undos end (a database dropped) is expected to fail. */
export function stopping(): boolean {
  return stopped;
}

/** Registers an undo for a stop from outside; the returned function unregisters it (the work ended normally). */
export function onStop(undo: Undo): () => void {
  undos.add(undo);
  return () => void undos.delete(undo);
}

/** How long the undos may take before the process exits anyway. */
const STOP_GRACE_MS = 10_000;

async function stop(code: number): Promise<never> {
  stopped = true;
  const all = [...undos];
  undos.clear();
  const grace = new Promise<void>((resolve) => setTimeout(resolve, STOP_GRACE_MS).unref());
  const run = (async () => {
    for (const undo of all) {
      try {
        await undo();
      } catch (e) {
        process.stderr.write(`on stop: ${e instanceof Error ? e.message : String(e)}\n`);
      }
    }
  })();
  await Promise.race([run, grace]);
  process.exit(code);
}

for (const [signal, code] of [
  ["SIGINT", 130],
  ["SIGTERM", 143],
] as const)
  process.once(signal, () => void stop(code));
