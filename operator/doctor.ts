import { randomBytes, X509Certificate } from 'node:crypto';
import dns from 'node:dns/promises';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { Redis } from 'ioredis';
import { isLocalDomain } from '../core/addresses.ts';
import type { Config } from '../core/config.ts';
import { CA_FILE, caDir, findHaproxy, HAPROXY_SETUP } from '../edge/index.ts';
import { engineClient } from '../lifecycle/index.ts';
import { Backend, redactUrl } from '../store/index.ts';
import { isService, parentOf, portHolder, readText } from './host-reads.ts';


/**
 * `svc doctor`: is this host, with this configuration, able to run the service? One line per
 * check, with what to do when it is not. Checks marked `needed` decide the exit code; the others
 * are advice (shown as `warn` when they fail). Nothing is created or changed.
 */

export type Verdict = 'ok' | 'warn' | 'fail';

export interface Finding {
  verdict: Verdict;
  detail: string;
  /** What to do about it (fail or warn). */
  fix?: string;
}

export interface DoctorCheck {
  name: string;
  /** Needed: the service cannot run (or runs unsafely) without it. Otherwise advice. */
  needed: boolean;
  run(): Promise<Finding>;
}

const ok = (detail: string): Finding => ({ verdict: 'ok', detail });
const warn = (detail: string, fix: string): Finding => ({ verdict: 'warn', detail, fix });
const fail = (detail: string, fix: string): Finding => ({ verdict: 'fail', detail, fix });

const GiB = 1024 ** 3;
/** Below this the service fails soon (sandbox volumes, the registry, archives); below WARN_FREE it will. */
const MIN_FREE = 1 * GiB;
const WARN_FREE = 5 * GiB;
const CERT_WARN_DAYS = 21;
const MAX_CLOCK_SKEW_MS = 5_000;
const CHECK_TIMEOUT_MS = 5_000;

/** The checks for `config`, in the order they are shown. */
export function doctorChecks(config: Config): DoctorCheck[] {
  const userns = config.sandboxRuntime === 'userns';
  const unisolated = config.sandboxRuntime === 'unisolated';
  const localDomain = isLocalDomain(config.domain);
  const mainEngine = new Docker(); // DOCKER_HOST or the local socket, as the service and the docker CLI
  const sandboxEngine = unisolated ? mainEngine : engineClient(config.sandboxDockerHost);
  return [
    {
      name: 'engine',
      needed: unisolated,
      run: async () => {
        try {
          const info = await mainEngine.info();
          return ok(`the main engine answers (Docker ${info.ServerVersion}, data root ${info.DockerRootDir})`);
        } catch (err) {
          return fail(`the main engine (${config.dockerHost ?? 'local socket'}) does not answer: ${message(err)}`,
            unisolated ? 'start dockerd (npm run setup starts it)' : 'only needed to build images and to move sandboxes made before isolation; npm run setup starts it');
        }
      },
    },
    {
      name: 'sandbox engine',
      needed: true,
      run: async () => {
        let info;
        try {
          info = await sandboxEngine.info();
        } catch (err) {
          return fail(`${config.sandboxDockerHost} does not answer: ${message(err)}`, 'run "npm run setup" (it starts it with scripts/sandbox-engine.sh)');
        }
        const remapped = ((info.SecurityOptions ?? []) as string[]).some((o) => o.includes('name=userns'));
        if (userns && !remapped) return fail(`${config.sandboxDockerHost} answers but does not remap root (no --userns-remap)`, 'start it with scripts/sandbox-engine.sh');
        return ok(`${unisolated ? 'the main engine runs sandboxes (unisolated)' : config.sandboxDockerHost} answers (Docker ${info.ServerVersion}${remapped ? ', root remapped' : ''}, cgroup driver ${info.CgroupDriver})`);
      },
    },
    {
      name: 'user namespaces',
      needed: userns,
      run: async () => {
        const max = Number(readText('/proc/sys/user/max_user_namespaces') ?? '0');
        if (!fs.existsSync('/proc/self/ns/user') || !(max > 0)) {
          return fail(`the kernel allows no user namespaces (user.max_user_namespaces = ${max})`, 'sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/), or a kernel built with CONFIG_USER_NS');
        }
        return ok(`available (user.max_user_namespaces = ${max})`);
      },
    },
    {
      name: 'remap range',
      needed: userns,
      run: async () => {
        const ranges = ['/etc/subuid', '/etc/subgid'].map((file) => ({ file, range: subRange(readText(file), 'dockremap') }));
        const missing = ranges.filter((r) => !r.range || r.range.count < 65536);
        if (missing.length) {
          return fail(`no range of 65536 ids for dockremap in ${missing.map((r) => r.file).join(' and ')}`,
            'start the sandbox engine once with --userns-remap=default (scripts/sandbox-engine.sh): dockerd adds the user and its ranges');
        }
        const { start, count } = ranges[0]!.range!;
        return ok(`dockremap maps root in sandboxes to host uids ${start}-${start + count - 1}`);
      },
    },
    {
      name: 'cgroups',
      needed: !unisolated,
      run: async () => {
        const mounts = readText('/proc/mounts') ?? '';
        const v2 = /^\S+ \S+ cgroup2 /m.test(mounts);
        const v1 = [...mounts.matchAll(/^\S+ (\S+) cgroup /gm)].map((m) => m[1]!);
        const version = v1.length ? `v1 (${v1.length} hierarchies${v2 ? ', and a v2 tree' : ''})` : v2 ? 'v2 (unified)' : null;
        if (!version) return fail('no cgroup file system is mounted', 'mount cgroup2 on /sys/fs/cgroup (or let the init system do it)');
        // The hand-over chowns each sandbox's own cgroup folders to its remapped root: that takes root.
        if (process.getuid?.() !== 0) return fail(`${version}; this process is not root, so it cannot hand sandboxes their cgroups`, 'run the service (and the doctor) as root');
        const writable = (v1.length ? v1 : ['/sys/fs/cgroup']).filter((dir) => isWritable(dir));
        if (!writable.length) return fail(`${version}, mounted read-only`, 'remount the cgroup hierarchies read-write');
        return ok(`${version}, writable: sandboxes get their own cgroup folders handed over (limit files kept)`);
      },
    },
    ...[
      { what: 'https port', port: config.httpsPort, host: undefined },
      ...(config.httpPort !== 0 ? [{ what: 'http port', port: config.httpPort, host: undefined }] : []),
      { what: 'api port', port: config.apiPort, host: '127.0.0.1' },
    ].map(({ what, port, host }): DoctorCheck => ({
      name: what,
      needed: true,
      run: () => portCheck(port, host),
    })),
    {
      name: 'domain',
      needed: true,
      run: () => nameCheck(config.domain, `SVC_DOMAIN=${config.domain}`, 'point an A/AAAA record of it at this machine'),
    },
    {
      name: 'wildcard domain',
      // browsers and curl resolve *.localhost to loopback themselves (RFC 6761); docker, ssh and node ask the system
      needed: !localDomain,
      run: () => nameCheck(`svc-doctor-${randomBytes(3).toString('hex')}.${config.domain}`, `*.${config.domain}`,
        localDomain ? 'apt-get install libnss-myhostname (npm run setup does), with myhostname on the hosts line of /etc/nsswitch.conf: docker, ssh and node then resolve *.localhost too' : `add a wildcard record *.${config.domain} pointing at this machine`),
    },
    {
      name: 'data plane',
      needed: config.dataPlane === 'haproxy',
      run: async () => {
        if (config.dataPlane === 'node') return warn('SVC_DATA_PLANE=node: the Node edge alone owns the public port, the reference the tests compare HAProxy against', 'unset SVC_DATA_PLANE for HAProxy (docs/data-plane.md)');
        const found = findHaproxy();
        return 'problem' in found ? fail(found.problem, HAPROXY_SETUP) : ok(`${found.version} owns the public port, the Node edge behind it`);
      },
    },
    { name: 'certificate', needed: true, run: () => certificateCheck(config) },
    { name: 'redis', needed: true, run: () => redisCheck(config.redisUrl) },
    { name: 'store', needed: true, run: () => storeCheck(config.storeUrl, config.storeTable) },
    {
      name: 'secret key',
      needed: false,
      run: async () => {
        try {
          const stat = fs.statSync(config.secretKeyFile);
          if ((stat.mode & 0o077) !== 0) return warn(`${config.secretKeyFile} is readable by others (mode ${(stat.mode & 0o777).toString(8)})`, `chmod 600 ${config.secretKeyFile}`);
          return ok(`${config.secretKeyFile} (0600); back it up apart from the store`);
        } catch {
          return warn(`${config.secretKeyFile} does not exist: made at first start`, 'on a machine restored from a backup, put the old key file there first (svc restore says so)');
        }
      },
    },
    {
      name: 'disk',
      needed: true,
      run: async () => {
        const roots: Array<{ what: string; dir: string }> = [{ what: 'data folder', dir: config.dataDir }];
        for (const [what, engine] of [['main engine', mainEngine], ['sandbox engine', sandboxEngine]] as const) {
          const root = await engine.info().then((i) => i.DockerRootDir as string, () => undefined);
          if (root && !roots.some((r) => r.dir === root)) roots.push({ what, dir: root });
        }
        const seen = roots.map(({ what, dir }) => ({ what, dir, free: freeBytes(dir) }));
        const text = seen.map((s) => `${s.what} ${s.dir}: ${(s.free / GiB).toFixed(1)} GiB free`).join('; ');
        if (seen.some((s) => s.free < MIN_FREE)) return fail(text, 'free disk space under those folders (docker system prune on the engines, old archives under <data>/archive)');
        if (seen.some((s) => s.free < WARN_FREE)) return warn(text, 'less than 5 GiB left: free space before sandboxes fill it');
        return ok(text);
      },
    },
    { name: 'clock', needed: true, run: () => clockCheck(config.redisUrl) },
  ];
}

/** Runs the checks, prints one line each, and says whether every needed one passed. */
export async function runDoctor(checks: DoctorCheck[], print: (line: string) => void): Promise<boolean> {
  const width = Math.max(...checks.map((c) => c.name.length));
  let healthy = true;
  for (const check of checks) {
    const finding = await within(check.run(), CHECK_TIMEOUT_MS).catch((err): Finding => fail(message(err), 'see the message'));
    const verdict: Verdict = finding.verdict === 'fail' && !check.needed ? 'warn' : finding.verdict;
    if (verdict === 'fail') healthy = false;
    const label = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' }[verdict];
    print(`${label}  ${check.name.padEnd(width)}  ${finding.detail}${verdict !== 'ok' && finding.fix ? ` -> ${finding.fix}` : ''}${check.needed ? '' : verdict === 'ok' ? '' : ' (advice)'}`);
  }
  return healthy;
}

async function portCheck(port: number, host: string | undefined): Promise<Finding> {
  const where = `${host ?? '*'}:${port}`;
  const free = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    const server = net.createServer();
    server.once('error', (err) => resolve(err));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(null)));
  });
  if (!free) return ok(`${where} is free`);
  if (free.code !== 'EADDRINUSE') return fail(`${where}: ${free.message}`, free.code === 'EACCES' ? 'run as root, or choose a port above 1023' : 'choose another port');
  const holder = await portHolder(port);
  if (holder && isService(holder.command)) return ok(`${where} is held by this service (pid ${holder.pid})`);
  // the data plane: HAProxy, the service's own child, owns the public port (docs/data-plane.md)
  const parent = holder?.name === 'haproxy' ? parentOf(holder.pid) : undefined;
  if (holder && parent && isService(parent.command)) return ok(`${where} is held by this service (pid ${parent.pid}) through its HAProxy (pid ${holder.pid})`);
  return fail(`${where} is taken by ${holder ? `${holder.name} (pid ${holder.pid})` : 'another program'}`, 'stop it, or give the service another port (SVC_HTTPS_PORT, SVC_HTTP_PORT, SVC_API_PORT)');
}

async function nameCheck(name: string, shown: string, fix: string): Promise<Finding> {
  let addresses: string[];
  try {
    addresses = (await dns.lookup(name, { all: true })).map((a) => a.address);
  } catch (err) {
    return fail(`${shown} does not resolve (${(err as NodeJS.ErrnoException).code ?? message(err)})`, fix);
  }
  const mine = new Set(Object.values(os.networkInterfaces()).flat().map((i) => i!.address));
  const local = addresses.filter((a) => mine.has(a) || a.startsWith('127.') || a === '::1');
  if (!local.length) return warn(`${shown} resolves to ${addresses.join(', ')}, no address of this machine`, 'fine behind NAT or a load balancer that forwards to this machine; otherwise fix the record');
  return ok(`${shown} resolves to ${local.join(', ')} (this machine)`);
}

async function certificateCheck(config: Config): Promise<Finding> {
  const domain = config.domain.toLowerCase();
  if (config.tlsCertFile) {
    let cert: X509Certificate;
    try {
      cert = new X509Certificate(fs.readFileSync(config.tlsCertFile));
    } catch (err) {
      return fail(`SVC_TLS_CERT ${config.tlsCertFile} cannot be read as a certificate: ${message(err)}`, 'give a PEM certificate (the leaf first)');
    }
    if (!config.tlsKeyFile || !fs.existsSync(config.tlsKeyFile)) return fail('SVC_TLS_KEY is not set or does not exist', 'set SVC_TLS_KEY to the certificate\'s key');
    if (!cert.checkHost(`svc-doctor.${domain}`)) return fail(`${config.tlsCertFile} does not cover *.${domain} (${cert.subjectAltName ?? cert.subject})`, `get a certificate for *.${domain} and ${domain}`);
    if (!cert.checkHost(domain)) return fail(`${config.tlsCertFile} covers *.${domain} but not ${domain}`, `get a certificate for *.${domain} and ${domain}`);
    return expiry(`${config.tlsCertFile} covers ${domain} and *.${domain}`, cert, 'renew it and restart the service');
  }
  const file = path.join(caDir(config.dataDir), CA_FILE);
  const pem = readText(file);
  if (!pem) return ok(`no SVC_TLS_CERT: the service makes its own CA at first start and issues *.${domain} from it (clients trust /ca.pem)`);
  const ca = new X509Certificate(pem);
  return expiry(`the service CA (${file}) issues *.${domain} at each start`, ca, 'move the CA files aside and restart: a new CA is made (clients must trust the new /ca.pem)');
}

function expiry(what: string, cert: X509Certificate, fix: string): Finding {
  const days = Math.floor((Date.parse(cert.validTo) - Date.now()) / 86_400_000);
  if (days < 0) return fail(`${what}, but it expired on ${cert.validTo}`, fix);
  if (days < CERT_WARN_DAYS) return warn(`${what}; expires in ${days} days (${cert.validTo})`, fix);
  return ok(`${what}; valid for ${days} more days`);
}

async function redisCheck(url: string): Promise<Finding> {
  const shown = redactUrl(url);
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 3_000, enableOfflineQueue: false });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    await redis.ping();
    return ok(`${shown} answers`);
  } catch (err) {
    const text = message(err);
    if (/NOAUTH|WRONGPASS|NOPERM/.test(text)) return fail(`${shown} refuses the credentials: ${text}`, 'set REDIS_URL (or SVC_REDIS_URL_FILE) to the URL with the right user and password');
    return fail(`${shown} does not answer: ${text}`, 'start Redis (npm run setup does), or set REDIS_URL');
  } finally {
    redis.disconnect();
  }
}

async function storeCheck(url: string, table: string): Promise<Finding> {
  const shown = redactUrl(url);
  if (url.startsWith('sqlite://')) {
    const file = path.resolve(url.slice('sqlite://'.length));
    if (!fs.existsSync(file)) {
      const parent = nearestExisting(path.dirname(file));
      if (!isWritable(parent)) return fail(`${file} does not exist and ${parent} is not writable`, 'make the data folder writable for the service');
      return ok(`${file} does not exist yet: made at first start`);
    }
  }
  let backend: Backend | undefined;
  try {
    backend = await Backend.open(url, { table });
    const [row] = (await backend.rawQuery(`SELECT count(*) AS n FROM ${backend.tableRef}`, [])) as Array<{ n: number | string }>;
    return ok(`${shown} answers (${Number(row?.n ?? 0)} records)`);
  } catch (err) {
    return fail(`${shown}: ${message(err)}`, 'start the database or fix SVC_STORE_URL (user, password, database)');
  } finally {
    await backend?.close();
  }
}

/**
 * The clock: certificates, tokens and timers all read it. No time server is asked (the machine may
 * have no internet): the year must be plausible, and Redis (which other service processes share)
 * must agree within a few seconds.
 */
async function clockCheck(redisUrl: string): Promise<Finding> {
  const now = new Date();
  if (now.getUTCFullYear() < 2024 || now.getUTCFullYear() > 2100) return fail(`the clock says ${now.toISOString()}`, 'set the clock (an NTP client such as chrony or systemd-timesyncd)');
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 3_000, enableOfflineQueue: false });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const before = Date.now();
    const [seconds, micros] = await redis.time();
    const theirs = Number(seconds) * 1000 + Number(micros) / 1000;
    const skew = Math.abs(theirs - (before + Date.now()) / 2);
    if (skew > MAX_CLOCK_SKEW_MS) return fail(`${now.toISOString()}, ${Math.round(skew / 1000)} s apart from Redis's clock`, 'run an NTP client on both machines');
    return ok(`${now.toISOString()}, within ${Math.ceil(skew)} ms of Redis's clock`);
  } catch {
    return ok(`${now.toISOString()} (Redis not reachable to compare)`);
  } finally {
    redis.disconnect();
  }
}

function subRange(text: string | undefined, user: string): { start: number; count: number } | undefined {
  const line = (text ?? '').split('\n').find((l) => l.startsWith(`${user}:`));
  if (!line) return undefined;
  const [, start, count] = line.split(':');
  return { start: Number(start), count: Number(count) };
}

function freeBytes(dir: string): number {
  const stat = fs.statfsSync(nearestExisting(dir));
  return stat.bavail * stat.bsize;
}

function nearestExisting(dir: string): string {
  let current = path.resolve(dir);
  while (!fs.existsSync(current) && path.dirname(current) !== current) current = path.dirname(current);
  return current;
}

function isWritable(dir: string): boolean {
  try {
    fs.accessSync(dir, fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function message(err: unknown): string {
  return (err as Error)?.message || String(err);
}

async function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms); })]);
  } finally {
    clearTimeout(timer);
  }
}
