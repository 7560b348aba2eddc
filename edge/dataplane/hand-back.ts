import http from 'node:http';
import net from 'node:net';
import type { Logger } from '../../core/logger.ts';
import { bindPort, type BoundPort } from '../listener/bound-port.ts';
import { readProxyHeader } from '../listener/proxy-header.ts';
import type { RegistryBypassAnswer } from '../registry-bypass.ts';
import { routeFor } from '../router/host-router.ts';
import { plainIp } from '../services/headers.ts';
import type { AppHttpProxy } from '../services/http-proxy.ts';
import { REGISTRY_VERDICT_HEADER, type DataPlaneFiles } from './haproxy-config.ts';

/** The registry front's answer to HAProxy's question per blob request (StartEdgeOptions.registryBypass). */
export interface RegistryBypass {
  upstreamSocket: string;
  mayBypass(method: string, url: string, authorization: string | undefined): Promise<RegistryBypassAnswer>;
}

/**
 * The unix sockets on which Node's edge takes what HAProxy hands back after ending TLS itself:
 * decrypted app requests HAProxy does not serve (the app went to sleep, Host ≠ SNI), plain registry
 * requests, and HAProxy's question whether a blob request may go straight to the upstream registry.
 * Each hand-over starts with a PROXY header naming the client (and, for apps, the SNI as its authority).
 */
export async function listenForHandBacks(o: {
  files: DataPlaneFiles;
  domain: string;
  /** Deadline for the PROXY header. */
  headerTimeoutMs: number;
  apps: AppHttpProxy;
  registry: http.Server;
  registryBypass?: RegistryBypass;
  logger: Logger;
}): Promise<{ close(): Promise<void> }> {
  const log = o.logger;
  const bound: BoundPort[] = [];
  const close = async () => void (await Promise.all(bound.map((b) => b.close())));
  try {
    bound.push(await bindPort(net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
      socket.on('error', (err) => log.debug({ err }, 'edge: data plane app socket error'));
      readProxyHeader(socket, o.headerTimeoutMs).then((h) => {
        const route = routeFor(h.authority, o.domain);
        if (route.kind !== 'app-http') return void socket.destroy();
        o.apps.accept(socket, { serverName: h.authority!, label: route.label, clientIp: plainIp(socket.remoteAddress) });
        socket.resume(); // the bytes after the PROXY header, put back, flow to the HTTP parser
      }, () => socket.destroy());
    }), o.files.nodeAppsSocket));
    // registry.<domain> with TLS ended by HAProxy: the front gets plain HTTP (Node no longer encrypts layers)
    bound.push(await bindPort(net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
      socket.on('error', (err) => log.debug({ err }, 'edge: data plane registry socket error'));
      readProxyHeader(socket, o.headerTimeoutMs).then(() => {
        // the client's connection is TLS (ended by HAProxy): the front builds https:// token realms from this
        Object.defineProperty(socket, 'encrypted', { value: true });
        o.registry.emit('connection', socket);
        socket.resume();
      }, () => socket.destroy());
    }), o.files.nodeRegistrySocket));
    const bypass = o.registryBypass;
    // HAProxy's question per blob request (registry-bypass.lua): 204 lets it through, anything else sends it to the front
    if (bypass) bound.push(await bindPort(http.createServer((req, res) => answerBypass(bypass, req, res, log)), o.files.nodeRegistryBypassSocket));
  } catch (err) {
    await close();
    throw err;
  }
  return { close };
}

function answerBypass(bypass: RegistryBypass, req: http.IncomingMessage, res: http.ServerResponse, log: Logger): void {
  const method = req.headers['x-svc-method'];
  const url = req.headers['x-svc-url'];
  const answer = typeof method === 'string' && typeof url === 'string' ? bypass.mayBypass(method, url, req.headers.authorization) : Promise.resolve<RegistryBypassAnswer>({ bypass: false });
  answer.then((a) => {
    if (a.verdict) res.setHeader(REGISTRY_VERDICT_HEADER, a.verdict);
    res.writeHead(a.bypass ? 204 : 403).end();
  }, (err) => {
    log.warn({ err }, 'edge: the registry front could not decide on a blob request; the front gets it');
    res.writeHead(500).end();
  });
}
