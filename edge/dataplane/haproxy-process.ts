import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type { Logger } from '../../core/logger.ts';
import { RuntimeApi } from './runtime-api.ts';

export const HAPROXY_BINARY = '/usr/sbin/haproxy';

export interface HaproxyProcess {
  readonly api: RuntimeApi;
  /** The running HAProxy's pid (changes at each restart). */
  readonly pid: number | undefined;
  close(): Promise<void>;
}

export interface SuperviseOptions {
  configFile: string;
  adminSocket: string;
  logger: Logger;
  /**
   * Runs after every start, once the Runtime API answers, before the start counts as done: the
   * maps and certificates Node wrote into the previous process are written again here.
   */
  onReady(api: RuntimeApi): Promise<void>;
  binary?: string;
}

const FIRST_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 5_000;

/**
 * Runs HAProxy in the foreground (`-db`) and keeps it running: if it exits, it is started again
 * after a back-off (200 ms doubling to 5 s) and `onReady` restores its run-time state. It dies with
 * the service (setpriv --pdeathsig, as the registry upstream). Its log lines (stdout) and alerts
 * (stderr) go to the service's log as JSON records of component `haproxy`.
 */
export async function superviseHaproxy(opts: SuperviseOptions): Promise<HaproxyProcess> {
  const log = opts.logger.child({ component: 'haproxy' });
  const binary = opts.binary ?? HAPROXY_BINARY;
  if (!fs.existsSync(binary)) {
    throw new Error(`HAProxy is not installed (${binary} missing): run "npm run setup" (Debian package haproxy)`);
  }
  const api = new RuntimeApi(opts.adminSocket);
  let child: ChildProcess | undefined;
  let closing = false;
  let backoff = FIRST_BACKOFF_MS;
  let restartTimer: NodeJS.Timeout | undefined;

  const start = (): Promise<void> => {
    fs.rmSync(opts.adminSocket, { force: true });
    const proc = spawn('setpriv', ['--pdeathsig', 'KILL', '--', binary, '-db', '-f', opts.configFile], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    child = proc;
    const startedAt = Date.now();
    const relay = (level: 'info' | 'warn') => (d: Buffer) => {
      for (const line of d.toString().split('\n')) {
        const text = line.trim();
        if (!text) continue;
        if (/^\[(ALERT|EMERG)\]/.test(text)) log.error({ haproxy: text }, 'haproxy: %s', text);
        else log[level]({ haproxy: text }, 'haproxy: %s', text);
      }
    };
    proc.stdout!.on('data', relay('info'));
    proc.stderr!.on('data', relay('warn'));
    proc.on('error', (err) => log.error({ err }, 'haproxy: cannot start'));
    proc.on('exit', (code, signal) => {
      if (closing || child !== proc) return;
      if (Date.now() - startedAt > 60_000) backoff = FIRST_BACKOFF_MS;
      log.error({ code, signal, restartInMs: backoff }, 'haproxy exited; restarting');
      restartTimer = setTimeout(() => void start().catch((err) => log.error({ err }, 'haproxy: restart failed')), backoff);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    });
    return waitReady(api, proc, 10_000)
      .then(() => opts.onReady(api))
      .then(() => log.info({ pid: proc.pid, startMs: Date.now() - startedAt }, 'haproxy ready'));
  };

  const stop = async () => {
    closing = true;
    if (restartTimer) clearTimeout(restartTimer);
    const proc = child;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => proc.kill('SIGKILL'), 5_000);
      proc.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      // SIGUSR1 is HAProxy's soft stop (open tunnels could hold it for hard-stop-after): the
      // service is going away, so its connections go with it.
      proc.kill('SIGTERM');
    });
  };

  try {
    await start();
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    api,
    get pid() {
      return child?.pid;
    },
    close: stop,
  };
}

async function waitReady(api: RuntimeApi, proc: ChildProcess, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`haproxy exited at start (code ${proc.exitCode}, signal ${proc.signalCode})`);
    try {
      if ((await api.send('show info')).includes('Name: HAProxy')) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > until) throw new Error(`haproxy's runtime API did not answer within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
