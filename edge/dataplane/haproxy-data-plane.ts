import fs from 'node:fs';
import net from 'node:net';
import type { Logger } from '../../core/logger.ts';
import type { DataPlaneTraffic } from '../../core/metrics.ts';
import type { EdgeBackend } from '../backend.ts';
import type { EdgeCertificates } from '../certs/edge-certificates.ts';
import { badGatewayPage, waitingPage } from '../pages/pages.ts';
import { rawPageHead } from '../pages/respond.ts';
import { DataPlaneActivity } from './activity-poll.ts';
import { dataPlaneFiles, renderHaproxyConfig, type DataPlaneFiles, type HaproxyConfigOptions } from './haproxy-config.ts';
import { superviseHaproxy, type HaproxyProcess } from './haproxy-process.ts';
import { RouteMirror } from './route-mirror.ts';
import { makeRunFolder } from './run-folder.ts';
import { DataPlaneTrafficReader } from './traffic-stats.ts';

export interface HaproxyDataPlane {
  readonly files: DataPlaneFiles;
  /** The backend Node's edge must use: it mirrors every route it resolves into HAProxy's maps. */
  readonly backend: RouteMirror;
  /** Starts HAProxy on the public port once Node listens on `files.nodeSocket` and `files.nodeAppsSocket`. */
  start(): Promise<{ port: number }>;
  /** HAProxy's pid (tests and the bench kill or measure it). */
  readonly pid: number | undefined;
  /** What HAProxy carried itself since the service started (the edge's metrics add it to Node's counts). */
  traffic(): Promise<DataPlaneTraffic>;
  /** Resolves when HAProxy's Runtime API answers (readiness); throws saying what is wrong otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface HaproxyDataPlaneOptions extends Omit<HaproxyConfigOptions, 'files'> {
  domain: string;
  backend: EdgeBackend;
  certificates: EdgeCertificates;
  logger: Logger;
}

/**
 * HAProxy as the data plane in front of Node's edge (docs/data-plane.md): a private run folder for
 * its sockets, maps and pages, the route mirror, the activity poller and the supervised process.
 */
export function haproxyDataPlane(o: HaproxyDataPlaneOptions): HaproxyDataPlane {
  const log = o.logger.child({ component: 'data-plane' });
  const runFolder = makeRunFolder(log);
  const dir = runFolder.path;
  const files = dataPlaneFiles(dir);
  const mirror = new RouteMirror(o.backend, { domain: o.domain, files, certificates: o.certificates, logger: log, fixedNames: [`registry.${o.domain}`], recheckMs: o.timeouts.routeRecheckMs });
  let proc: HaproxyProcess | null = null;
  const activity = new DataPlaneActivity({
    api: () => proc?.api ?? null,
    pid: () => proc?.pid,
    maps: mirror.maps,
    engineProofs: mirror.engineProofs,
    backend: o.backend,
    enginePort: o.enginePort,
    shellProofMs: o.timeouts.shellProofMs,
    logger: log,
  });
  const traffic = new DataPlaneTrafficReader(() => proc?.api ?? null, () => proc?.pid);

  return {
    files,
    backend: mirror,
    get pid() {
      return proc?.pid;
    },
    traffic: () => traffic.read(),
    async ping() {
      if (!proc) throw new Error('HAProxy has not started');
      if (!(await proc.api.send('show info')).includes('Name: HAProxy')) throw new Error('HAProxy\'s Runtime API answers, but not as HAProxy');
    },
    async start() {
      const port = o.port || (await freePort(o.host));
      await mirror.certificates.writeDefault();
      fs.writeFileSync(files.crtList, `${files.defaultCert}\n`);
      fs.writeFileSync(files.engineMap, '');
      fs.writeFileSync(files.appsMap, '');
      fs.writeFileSync(files.tunnelsMap, '');
      const waiting = waitingPage('this address', 'starting');
      // served when an app's address refuses (not up yet): 200, as the waiting page always is
      fs.writeFileSync(files.waitingPage, rawPageHead(waiting) + waiting.body);
      const bad = badGatewayPage('this address', 'it closed the connection or did not answer in time');
      fs.writeFileSync(files.badGatewayPage, rawPageHead(bad) + bad.body);
      fs.writeFileSync(files.config, renderHaproxyConfig({ ...o, files, port }), { mode: 0o600 });
      proc = await superviseHaproxy({
        configFile: files.config,
        adminSocket: files.adminSocket,
        logger: o.logger,
        onReady: (api) => mirror.attach(api),
      });
      log.info({ port, dir }, 'data plane: HAProxy owns the public port');
      return { port };
    },
    async close() {
      activity.close();
      mirror.close();
      await proc?.close();
      runFolder.remove();
    },
  };
}

/** A port free right now (HAProxy binds it a moment later; tests and benches ask for port 0). */
function freePort(host?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}
