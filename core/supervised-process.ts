import { spawn, type ChildProcess } from 'node:child_process';
import type { Logger } from './logger.ts';

export interface SupervisedProcess {
  /** The running child (a new one after each restart). */
  readonly current: ChildProcess;
  /** Stops supervising, then the child: SIGTERM, SIGKILL after 5 s; resolves once it has exited. */
  stop(): Promise<void>;
}

export interface SuperviseProcessOptions {
  /** Names the child in log messages ("haproxy", "registry upstream"). */
  name: string;
  binary: string;
  args: string[];
  logger: Logger;
  /** Each line the child writes, trimmed and never empty. */
  onLine(stream: 'stdout' | 'stderr', line: string): void;
  /** Runs before every spawn: e.g. removes a socket a killed child left, which the next would refuse. */
  beforeStart?(): void;
  /** Runs after every restart (not the first start); a rejection is logged. */
  onRestart?(child: ChildProcess): Promise<void>;
  firstBackoffMs: number;
  maxBackoffMs: number;
}

/** A child that ran this long before it exited resets the back-off: it was not crash-looping. */
const STABLE_MS = 60_000;

/**
 * Starts a helper process and keeps it running: when it exits it is started again after a back-off
 * that doubles up to `maxBackoffMs`. setpriv (util-linux) asks the kernel to kill the child when the
 * service dies, even by SIGKILL: else each killed service would leave one running, and its next start
 * add another.
 */
export function superviseProcess(opts: SuperviseProcessOptions): SupervisedProcess {
  const log = opts.logger;
  let child!: ChildProcess;
  let closing = false;
  let backoff = opts.firstBackoffMs;
  let restartTimer: NodeJS.Timeout | undefined;

  const start = (): ChildProcess => {
    opts.beforeStart?.();
    const proc = spawn('setpriv', ['--pdeathsig', 'KILL', '--', opts.binary, ...opts.args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    child = proc;
    const startedAt = Date.now();
    for (const stream of ['stdout', 'stderr'] as const) {
      proc[stream]!.on('data', (d: Buffer) => {
        for (const line of d.toString().split('\n')) {
          const text = line.trim();
          if (text) opts.onLine(stream, text);
        }
      });
    }
    proc.on('error', (err) => log.error({ err }, `${opts.name}: cannot start`));
    proc.on('exit', (code, signal) => {
      if (closing || child !== proc) return;
      if (Date.now() - startedAt > STABLE_MS) backoff = opts.firstBackoffMs;
      log.error({ code, signal, restartInMs: backoff }, `${opts.name} exited; restarting`);
      restartTimer = setTimeout(() => {
        const next = start();
        opts.onRestart?.(next).catch((err) => log.error({ err }, `${opts.name}: restart failed`));
      }, backoff);
      backoff = Math.min(backoff * 2, opts.maxBackoffMs);
    });
    return proc;
  };

  start();
  return {
    get current() {
      return child;
    },
    async stop() {
      closing = true;
      if (restartTimer) clearTimeout(restartTimer);
      const proc = child;
      if (proc.pid === undefined || proc.exitCode !== null || proc.signalCode !== null) return; // never ran, or gone
      await new Promise<void>((resolve) => {
        const kill = setTimeout(() => proc.kill('SIGKILL'), 5_000);
        proc.once('exit', () => {
          clearTimeout(kill);
          resolve();
        });
        proc.kill('SIGTERM');
      });
    },
  };
}
