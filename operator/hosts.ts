// `svc hosts …`: runner hosts as the operator adds, lists, drains and removes them (docs/scale-out.md).
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { pino } from 'pino';
import type { Config } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import { generateKeys, privateKeyPem, x509 } from '../core/x509.ts';
import { issueCert, loadOrCreateServiceCa } from '../edge/index.ts';
import { KeyedLock } from '../core/keyed-lock.ts';
import { RedisLeases } from '../core/redis-lease.ts';
import { applyRunnerPools, IdleSessions, mover, operatorHosts, publishUnwatch, tellNews, type HostOperations, type Mover, type MoveProgress } from '../lifecycle/index.ts';
import { createRedis } from '../queue/index.ts';
import { LOCAL_HOST, type HostRecord, type Store } from '../store/index.ts';

/** The engine port of a runner host (scripts/sandbox-engine.sh, SVC_ENGINE_TLS_DIR). */
export const HOST_ENGINE_PORT = 2376;
/** Host certificates are renewed by `svc hosts add` again; two years keeps that rare but not forgotten. */
const HOST_CERT_DAYS = 730;

/** The name a host's engine certificate carries: inside the service CA's domain, whatever its address. */
export function hostServerName(name: string, domain: string): string {
  return `${name}.hosts.${domain}`;
}

export interface AddHost {
  name: string;
  address: string;
  port?: number;
  /** PEM of the host's certificate request (its key never leaves it); without one a key is made here. */
  csrPem?: string;
  sameMachine?: boolean;
  networks?: number;
  /** The host's sandbox address pool (scripts/runner.sh --pool): kept off by this machine's sandboxes. */
  pool: string;
  /** The host's nameservers (scripts/runner.sh prints them), given to its sandboxes' inner containers. */
  dns?: string[];
}

/** An IPv4 CIDR as iptables and net.BlockList take it: "10.220.0.0/16". */
export function parsePool(pool: string): { address: string; prefix: number } | undefined {
  const m = /^([0-9.]+)\/([0-9]{1,2})$/.exec(pool);
  if (!m || !net.isIPv4(m[1]!) || Number(m[2]) < 8 || Number(m[2]) > 30) return undefined;
  return { address: m[1]!, prefix: Number(m[2]) };
}

/** The CLI's warnings (a host without a pool) go to stderr. */
const cliLogger = () => pino({ level: 'warn' }, pino.destination(2));

/**
 * Registers a host (or renews its certificates: a host added again keeps its drain state and its
 * sandboxes). The service CA signs the host's engine certificate and a client certificate of the
 * service's own for that host, kept sealed in the store: the engine lets in only clients of this CA,
 * the service trusts only that host's name. Answers what the host needs: ca.pem, cert.pem (and key.pem
 * when no request was given).
 */
export async function addHost(store: Store, config: Config, add: AddHost): Promise<{ record: HostRecord; files: Record<string, string> }> {
  if (add.name === LOCAL_HOST) throw new errors.BadRequest(`"${LOCAL_HOST}" is the machine the service runs on; it needs no adding`);
  if (!/^[a-z0-9][a-z0-9.:-]*$/i.test(add.address)) throw new errors.BadRequest(`"${add.address}" is not an address (an IP or a DNS name)`);
  if (!parsePool(add.pool)) throw new errors.BadRequest(`"${add.pool}" is not a sandbox pool (an IPv4 CIDR, /8 to /30, as scripts/runner.sh --pool)`);
  const notAddress = add.dns?.find((ns) => !net.isIPv4(ns));
  if (notAddress !== undefined) throw new errors.BadRequest(`"${notAddress}" is not a nameserver's IPv4 address (--dns takes them comma-separated)`);
  const ca = await loadOrCreateServiceCa(config.dataDir, config.domain, store.serviceKeys);
  const serverName = hostServerName(add.name, config.domain);
  const files: Record<string, string> = { 'ca.pem': ca.certPem };
  let serverKey: CryptoKey;
  if (add.csrPem) {
    const csr = new x509.Pkcs10CertificateRequest(add.csrPem);
    if (!(await csr.verify())) throw new errors.BadRequest('the certificate request is not signed by its own key');
    serverKey = await csr.publicKey.export();
  } else {
    const keys = await generateKeys();
    serverKey = keys.publicKey;
    files['key.pem'] = await privateKeyPem(keys.privateKey);
  }
  files['cert.pem'] = (await issueCert(ca, [serverName], serverKey, { usage: 'server', days: HOST_CERT_DAYS })).certPem;
  const client = await generateKeys();
  const clientCert = await issueCert(ca, [`service.hosts.${config.domain}`], client.publicKey, { usage: 'client', days: HOST_CERT_DAYS });
  const previous = await store.hosts.get(add.name);
  const record: HostRecord = {
    name: add.name,
    address: add.address,
    port: add.port ?? HOST_ENGINE_PORT,
    server_name: serverName,
    client_cert: clientCert.certPem,
    client_key: await privateKeyPem(client.privateKey),
    ca_cert: ca.certPem,
    ...(add.sameMachine ? { same_machine: true } : {}),
    ...(add.networks ? { networks: add.networks } : {}),
    pool: add.pool,
    ...(add.dns?.length ? { dns: add.dns } : {}),
    ...(previous?.drained_at ? { drained_at: previous.drained_at } : {}),
    created_at: previous?.created_at ?? new Date().toISOString(),
  };
  await store.hosts.put(record);
  await applyRunnerPools(store.hosts, config, cliLogger());
  return { record, files };
}

/** Writes the host's files into `dir` (created 0700; the key 0600, also over a file that was there). */
export async function writeHostFiles(dir: string, files: Record<string, string>): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  for (const [file, pem] of Object.entries(files)) {
    const mode = file === 'key.pem' ? 0o600 : 0o644;
    const target = path.join(dir, file);
    // a file's mode is set only when writeFile creates it: narrowed first, before the key goes in
    await fs.chmod(target, mode).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err; });
    await fs.writeFile(target, pem, { mode });
  }
}

/** The hosts as the runtime has them (HostOperations): list, drain, evacuate, move and remove go through it. */
export function openHosts(store: Store, config: Config): HostOperations {
  return operatorHosts(store, config, cliLogger());
}

export interface HostRow {
  name: string;
  address: string;
  state: 'ready' | 'drained' | 'away';
  /** Why the host is away (the connect error): for the operator, on the command line only. */
  reason?: string;
  /** Sandboxes placed on it (with volumes there, running or not). */
  sandboxes: number;
  running?: number;
  memory?: { committed_bytes: number; total_bytes: number };
  cpus?: { committed: number; total: number };
  networks?: number;
}

/**
 * What `svc hosts evacuate` and `move` need to move sandboxes from the command line as a service process would
 * (HostOperations.move): the hosts, and the service's Redis for each sandbox's transition lease
 * (a wake under way finishes before its sandbox is taken down), its idle session and app watchers.
 */
export function openMoves(store: Store, config: Config): { hosts: HostOperations; mover: Mover; close(): Promise<void> } {
  const logger = cliLogger();
  const redis = createRedis(config.redisUrl);
  const lock = new KeyedLock(new RedisLeases(redis, `${config.redisPrefix}:lease`));
  const sessions = new IdleSessions(redis, config.redisPrefix);
  return {
    hosts: operatorHosts(store, config, logger),
    mover: mover({
      store,
      exclusive: (name, work) => lock.run(name, work),
      goingDown: async (name) => {
        await sessions.close(name);
        await publishUnwatch(redis, config.redisPrefix, name);
      },
      placed: (name) => tellNews(redis, config.redisPrefix, { op: 'placed', sandbox: name }),
      logger,
    }, config),
    close: async () => { await redis.quit().catch(() => redis.disconnect()); },
  };
}

/** One line of a move's progress, as `svc hosts evacuate` and `svc hosts move` print it. */
export function progressLine(p: MoveProgress): string {
  const mb = (n: number) => (n / 1e6).toFixed(1);
  const route = `${p.from} → ${p.to}`;
  switch (p.phase) {
    case 'copying': return `${p.sandbox}: ${route}: copied ${mb(p.bytes)} of ${mb(p.total)} MB${p.total ? ` (${Math.min(100, Math.round((p.bytes / p.total) * 100))}%)` : ''}`;
    case 'verifying': return `${p.sandbox}: ${route}: ${mb(p.bytes)} MB copied in ${(p.ms / 1000).toFixed(1)} s; checking the copy`;
    case 'moved': return `${p.sandbox}: moved ${route} (${mb(p.bytes)} MB in ${(p.ms / 1000).toFixed(1)} s)`;
    case 'rolled back': return `${p.sandbox}: move ${route} rolled back, the sandbox stays on ${p.from}: ${p.error}`;
  }
}

/** Every host with its state and figures, the service's own machine first. */
export async function listHosts(store: Store, config: Config): Promise<HostRow[]> {
  const hosts = operatorHosts(store, config, pino({ level: 'silent' }));
  const placements = await store.hosts.placements();
  const hostOf = (sandbox: string) => placements.get(sandbox) ?? LOCAL_HOST;
  const sandboxes = (await store.sandboxes.listAll()).filter((s) => !s.archived_at);
  return (await hosts.readings()).map(({ name, address, port, drained, figures: load, error }) => {
    const placed = sandboxes.filter((s) => hostOf(s.name) === name).length;
    return {
      name,
      address: address ? `${address}:${port ?? HOST_ENGINE_PORT}` : '(this machine)',
      state: !load ? 'away' : drained ? 'drained' : 'ready',
      ...(error ? { reason: error } : {}),
      // on Incus the members say what they hold (no placements in the store)
      sandboxes: config.runtime === 'incus' ? load?.sandboxes ?? 0 : placed,
      ...(load ? {
        running: load.running,
        memory: { committed_bytes: load.committedMemoryBytes, total_bytes: load.memoryBytes },
        cpus: { committed: load.committedCpus, total: load.cpus },
        networks: load.networks,
      } : {}),
    };
  });
}
