import tls from 'node:tls';
import Docker from 'dockerode';
import { pollUntil } from '../../core/poll.ts';
import type { EngineCerts } from '../../store/index.ts';

export const INNER_ENGINE_PORT = 2376;

/**
 * A dockerode client for a sandbox's own dockerd, over the same mutual TLS users get.
 * The server certificate names the sandbox, not its (changing) container address, so the
 * identity check is made against the sandbox name.
 */
export function innerEngine(sandbox: string, address: string, certs: EngineCerts, opts: { timeoutMs?: number } = {}): Docker {
  return new Docker({
    protocol: 'https',
    host: address,
    port: INNER_ENGINE_PORT,
    ca: certs.ca_cert,
    cert: certs.client_cert,
    key: certs.client_key,
    // an idle timeout; 0 for long-lived streams (log follows) that may be quiet for a while
    timeout: opts.timeoutMs === 0 ? undefined : (opts.timeoutMs ?? 10_000),
    checkServerIdentity: (_host: string, cert: tls.PeerCertificate) => tls.checkServerIdentity(sandbox, cert),
  } as Docker.DockerOptions);
}

/** Resolves once the inner engine answers `_ping`; rejects after `timeoutMs`. */
export async function waitForInnerEngine(engine: Docker, timeoutMs: number): Promise<void> {
  await pollUntil('the inner engine did not answer', async () => {
    await engine.ping();
    return true;
  }, { timeoutMs, firstMs: 20, everyMs: 250 });
}
