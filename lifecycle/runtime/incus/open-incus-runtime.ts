import fs from 'node:fs';
import Docker from 'dockerode';
import type { Config, IncusConfig } from '../../../core/config.ts';
import type { Logger } from '../../../core/logger.ts';
import type { AddressStore } from '../../../store/index.ts';
import { openPort } from '../egress-firewall.ts';
import { engineClient } from '../engine-client.ts';
import { IncusClient, type IncusEndpoint } from './incus-client.ts';
import { NIC_PREFIX, poolAddresses } from './incus-network.ts';
import { IncusRuntime } from './incus-runtime.ts';

/** The sandboxes' chain in INPUT (scripts/incus-host.sh): the service's public port is opened there. */
const INCUS_IN = 'SVC-INCUS-IN';

/** Where the runtime reaches Incus: the first member's HTTPS address (any member answers for all), else the unix socket. */
export function incusEndpoint(incus: IncusConfig): IncusEndpoint {
  if (incus.urls.length === 0) return { socketPath: incus.unixSocket };
  const read = (file: string | undefined, what: string) => {
    try {
      return fs.readFileSync(file!, 'utf8');
    } catch (err) {
      throw new Error(`cannot read ${what} ${file}: ${(err as Error).message}`);
    }
  };
  return {
    url: incus.urls[0]!,
    clientCert: read(incus.clientCertFile, 'the Incus client certificate (SVC_INCUS_CLIENT_CERT)'),
    clientKey: read(incus.clientKeyFile, 'the Incus client key (SVC_INCUS_CLIENT_KEY)'),
    serverCert: read(incus.serverCertFile, 'the Incus cluster certificate (SVC_INCUS_SERVER_CERT)'),
  };
}

/**
 * The runtime on Incus for the configuration, made at once (nothing asked): for the operator's
 * `svc hosts …` process, and for openIncusRuntime once it has checked Incus.
 */
export function incusRuntime(config: Config, logger: Logger, addresses: AddressStore, opts: { client?: IncusClient; toolImages?: Docker } = {}): IncusRuntime {
  const incus = config.incus!;
  const bits = Number(incus.addressPool.split('/')[1]);
  return new IncusRuntime(opts.client ?? new IncusClient(incusEndpoint(incus)), {
    instance: config.redisPrefix,
    addresses: poolAddresses(addresses, incus.addressPool),
    poolSize: 2 ** (32 - bits) - 3, // the network's, one for a gateway and the broadcast are not handed out
    ...(incus.nicParent ? { nicParent: incus.nicParent } : {}),
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
    ...(opts.toolImages ? { toolImages: opts.toolImages } : {}),
    logger,
  });
}

/**
 * The runtime on Incus as SVC_RUNTIME=incus asks for it (docs/incus.md): Incus, its profile and its
 * image checked before anything else starts (a clear error says what to run), the addresses from the
 * store's table. The management tool's image comes from this host's Docker engine when one answers.
 */
export async function openIncusRuntime(config: Config, logger: Logger): Promise<{
  /** The runtime, once the store (its address table) is open. */
  runtime(addresses: AddressStore): IncusRuntime;
  /** Lets sandboxes reach the service's public port (registry pushes from inside); returns its closer. */
  openServicePort(port: number): Promise<() => Promise<void>>;
}> {
  const incus = config.incus!;
  const client = new IncusClient(incusEndpoint(incus));
  const setup = incus.urls.length === 0 ? 'SVC_RUNTIME=incus npm run setup' : 'scripts/test-cluster.sh up 3 for the test cluster';
  try {
    try {
      await client.get('/1.0');
    } catch (err) {
      throw new Error(`Incus at ${client.where} does not answer (${(err as Error).message}); run "${setup}"`);
    }
    for (const [what, path] of [['profile svc-sandbox', '/1.0/profiles/svc-sandbox'], ['image alias svc-sandbox', '/1.0/images/aliases/svc-sandbox']]) {
      await client.get(path!).catch((err: Error) => {
        throw new Error(`Incus at ${client.where} has no ${what} (${err.message}); run "${setup}"`);
      });
    }
  } catch (err) {
    await client.close(); // a start that stops here leaves no connection open
    throw err;
  }
  const docker = config.dockerHost ? engineClient(config.dockerHost) : new Docker();
  const toolImages = await docker.ping().then(() => docker, (err: Error) => {
    logger.warn({ err: err.message }, 'no Docker engine answers on this host: manager sandboxes cannot get the management tool\'s image');
    return undefined;
  });
  logger.info({ incus: client.where }, 'sandboxes run on Incus (SVC_RUNTIME=incus)');
  return {
    runtime: (addresses) => incusRuntime(config, logger, addresses, { client, ...(toolImages ? { toolImages } : {}) }),
    // the chain is on this machine only where Incus is this machine's (a cluster's members have their own)
    openServicePort: (port) => (incus.urls.length === 0 ? openPort(port, { chain: INCUS_IN, interfaces: `${NIC_PREFIX}+` }) : Promise.resolve(async () => undefined)),
  };
}
