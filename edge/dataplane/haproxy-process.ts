import { execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type { Logger } from '../../core/logger.ts';
import { superviseProcess } from '../../core/supervised-process.ts';
import { RuntimeApi } from './runtime-api.ts';

export const HAPROXY_BINARY = '/usr/sbin/haproxy';

/** What to do when HAProxy is missing or too old. */
export const HAPROXY_SETUP = 'run "npm run setup" (it installs Debian\'s haproxy package)';

/**
 * Is HAProxy 2.6 or later at `binary` (Debian bookworm's package; the configuration and the Lua
 * action need 2.6)? Its version (`HAProxy version 2.6.12-1+deb12u4`), or what is wrong.
 */
export function findHaproxy(binary = HAPROXY_BINARY): { version: string } | { problem: string } {
  let line: string;
  try {
    line = execFileSync(binary, ['-v'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 }).split('\n')[0]!;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { problem: `HAProxy, the data plane, is not installed (${binary} missing)` };
    return { problem: `HAProxy, the data plane, does not run (${binary} -v: ${(err as Error).message})` };
  }
  const m = /^HAProxy version ((\d+)\.(\d+)\S*)/.exec(line);
  if (!m || Number(m[2]) * 1000 + Number(m[3]) < 2006) return { problem: `HAProxy, the data plane, must be 2.6 or later; ${binary} says "${line.trim()}"` };
  return { version: `HAProxy version ${m[1]}` };
}

/** Throws, saying what to run, unless HAProxy can be the data plane. The service checks it before it starts anything (service.ts). */
export function requireHaproxy(binary = HAPROXY_BINARY): void {
  const found = findHaproxy(binary);
  if ('problem' in found) throw new Error(`${found.problem}: ${HAPROXY_SETUP}`);
}

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

/**
 * HAProxy 2.6 logs every request of its Lua httpclient, with no setting to stop it (it ignores
 * `dontlog-normal`); the registry asks the front once per blob request (registry-bypass.lua), so
 * its normal answers (204 yes, 403 no) are dropped here. Failures (no answer, 5xx) still reach the log.
 */
const ASKED_AND_ANSWERED = /^-:- \[[^\]]+\] <HTTPCLIENT> <HTTPCLIENT>\/<HTTPCLIENT> \S+ (204|403) /;

/**
 * Runs HAProxy in the foreground (`-db`) and keeps it running: if it exits, it is started again
 * after a back-off (200 ms doubling to 5 s) and `onReady` restores its run-time state. It dies with
 * the service (setpriv --pdeathsig, as the registry upstream). Its log lines (stdout) and alerts
 * (stderr) go to the service's log as JSON records of component `haproxy`.
 */
export async function superviseHaproxy(opts: SuperviseOptions): Promise<HaproxyProcess> {
  const log = opts.logger.child({ component: 'haproxy' });
  const binary = opts.binary ?? HAPROXY_BINARY;
  requireHaproxy(binary);
  const api = new RuntimeApi(opts.adminSocket);
  const ready = async (proc: ChildProcess) => {
    const startedAt = Date.now();
    await waitReady(api, proc, 10_000);
    await opts.onReady(api);
    log.info({ pid: proc.pid, startMs: Date.now() - startedAt }, 'haproxy ready');
  };
  const supervised = superviseProcess({
    name: 'haproxy',
    binary,
    args: ['-db', '-f', opts.configFile],
    logger: log,
    onLine(stream, text) {
      if (ASKED_AND_ANSWERED.test(text)) return;
      if (/^\[(ALERT|EMERG)\]/.test(text)) log.error({ haproxy: text }, 'haproxy: %s', text);
      else if (stream === 'stdout') log.info({ haproxy: text }, 'haproxy: %s', text);
      else log.warn({ haproxy: text }, 'haproxy: %s', text);
    },
    beforeStart: () => fs.rmSync(opts.adminSocket, { force: true }),
    onRestart: ready,
    firstBackoffMs: 200,
    maxBackoffMs: 5_000,
  });
  try {
    await ready(supervised.current);
  } catch (err) {
    await supervised.stop();
    throw err;
  }
  return {
    api,
    get pid() {
      return supervised.current.pid;
    },
    // SIGTERM, not HAProxy's soft stop (SIGUSR1), which open tunnels could hold: the service is
    // going away, so its connections go with it.
    close: () => supervised.stop(),
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
