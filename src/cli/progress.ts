// Progress on stderr (rows, rows/s, bytes, ETA), drawn by cli-progress only
// when stderr is a terminal and --quiet is not given; otherwise every call
// is a no-op, so pipes and logs never see control characters.
import cliProgress from "cli-progress";

export interface Progress {
  /** `done`/`total` drive the bar and the ETA (bytes of input, or rows); rows and bytes are shown as counts. */
  update(state: { done: number; total?: number; rows: number; bytes: number }): void;
  stop(): void;
}

const NOOP: Progress = { update: () => {}, stop: () => {} };

function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(u === 0 ? 0 : 1)} ${units[u]}`;
}

function formatEta(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "--";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

interface Payload {
  rows: number;
  bytes: number;
  known: boolean;
}

export function createProgress(label: string, opts: { quiet: boolean; stream?: NodeJS.WriteStream }): Progress {
  const stream = opts.stream ?? process.stderr;
  if (opts.quiet || !stream.isTTY) return NOOP;
  const started = Date.now();
  const bar = new cliProgress.SingleBar(
    {
      stream,
      hideCursor: true,
      fps: 5,
      barsize: 24,
      format: (options, params, payload: Payload) => {
        const secs = Math.max((Date.now() - started) / 1000, 0.001);
        const rate = Math.round(payload.rows / secs);
        const known = payload.known && params.total > 0;
        const ratio = known ? Math.min(1, params.value / params.total) : 0;
        const filled = Math.round(ratio * (options.barsize ?? 24));
        const barText = known
          ? `[${"#".repeat(filled)}${"-".repeat((options.barsize ?? 24) - filled)}] ${Math.floor(ratio * 100)}% `
          : "";
        const eta = known && ratio > 0 ? formatEta((secs * (1 - ratio)) / ratio) : "--";
        return `${label} ${barText}| ${payload.rows} rows | ${rate} rows/s | ${formatBytes(payload.bytes)} | ETA ${eta}`;
      },
    },
    cliProgress.Presets.legacy,
  );
  bar.start(1, 0, { rows: 0, bytes: 0, known: false } satisfies Payload);
  return {
    update({ done, total, rows, bytes }) {
      if (total !== undefined) bar.setTotal(Math.max(total, 1));
      bar.update(done, { rows, bytes, known: total !== undefined } satisfies Payload);
    },
    stop() {
      bar.stop();
    },
  };
}
