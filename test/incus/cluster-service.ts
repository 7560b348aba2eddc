import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService } from '../../harness/service.ts';
import { rig } from '../../harness/test-cluster.ts';
import { svcCli, svcCliBackground } from '../helpers/svc-cli.ts';
import { SERVICE_POOL, sha256, userClients, type MemberSandbox, type OnCluster } from './cluster-clients.ts';
import { archivedOnCluster } from './cluster-archive.ts';
import { filesOnCluster } from './cluster-files.ts';
import { memberCrashed, memberLost, moves } from './cluster-loss.ts';
import { clientTour } from './service-tour.ts';

const FIXTURE = path.resolve('fixtures/busybox');
/**
 * The service on the 3-member test cluster (cluster.test.ts brings it up), as users and its operator
 * reach it: the successor of the runner hosts' tests at service level (test/hosts/two-hosts, host-away,
 * move). One user's sandbox on every member, each through the docker CLI (build, run), compose, its
 * app's HTTPS address, ssh over the TLS port, files and the log stream; the whole client tour on one
 * more; a member killed (cluster-loss.ts); moves as the operator runs them.
 */
export function serviceOnCluster(): void {
  describe('the service on the 3-member cluster', { concurrency: false }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `svc-on-cluster-${randomBytes(3).toString('hex')}-`));
    const c = { sandboxes: [] as MemberSandbox[] } as OnCluster;

    before(async () => {
      const { runtime, incus } = loadConfig({ ...process.env, SVC_RUNTIME: 'incus', SVC_INCUS_ADDRESS_POOL: SERVICE_POOL });
      // a domain of its own: inside a sandbox, registry.<domain> is one line of its /etc/hosts (the tour's push)
      c.t = await startTestService({ runtime, incus, sseHeartbeatMs: 300, domain: 'svc-incus.test' });
      const t = c.t;
      // the members' firewall lets sandboxes reach this service's public port (registry pushes from inside)
      await rig('ports', String(t.config.httpsPort));
      c.user = await userClients(t, dir, 'bob');
      const operatorConfig = { ...t.config, env: { SVC_INCUS_ADDRESS_POOL: SERVICE_POOL } };
      c.operator = (...args) => svcCli(operatorConfig, ...args);
      c.operatorBackground = (...args) => svcCliBackground(operatorConfig, ...args);
      // each sandbox made while the two other members are drained: Incus's scheduler has one member left
      const hosts = t.service.runtime.hosts!;
      for (const member of ['m1', 'm2', 'm3']) {
        const others = ['m1', 'm2', 'm3'].filter((m) => m !== member);
        for (const m of others) await hosts.setDrained(m, true);
        try {
          const res = await c.user.api('POST', '/api/sandboxes', { name: `b${member}-${t.config.redisPrefix}`, idle_timeout: '1h' });
          assert.equal(res.status, 201, answerOf(res));
          const address = (await t.service.lifecycle.status(res.body.name)).address!;
          c.sandboxes.push({ name: res.body.name, member, cli: new EngineCli(res.body.engine_access.host, '127.0.0.1', t.config.httpsPort, res.body), file: randomBytes(512 * 1024) });
          assert.ok(address, `${res.body.name} runs with an address`);
        } finally {
          for (const m of others) await hosts.setDrained(m, false);
        }
      }
    });
    after(async () => {
      // every member back first (a failed case may have left one killed), then the sandboxes deleted through the service
      await rig('up', '3').catch(() => undefined);
      for (const s of c.sandboxes) {
        await c.user.api('DELETE', `/api/sandboxes/${s.name}`).catch(() => undefined);
        s.cli.dispose();
      }
      await c.user?.close();
      await c.t?.close();
      // the service's close let go of its Incus client: nothing of it is left open
      if (c.t) await assert.rejects(c.t.service.runtime.ping(), (err: { reason?: string }) => /The client is (closed|destroyed)/.test(err.reason ?? ''));
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('puts one sandbox on each member; on every member the docker CLI builds and runs, compose\'s app answers at its HTTPS address, ssh over 443, files and the log stream work through the edge', async () => {
      const { t, user } = c;
      assert.deepEqual(await Promise.all(c.sandboxes.map((s) => t.service.runtime.hostOf(s.name))), ['m1', 'm2', 'm3']);
      await Promise.all(c.sandboxes.map(async (s) => {
        await s.cli.docker(['build', '-q', '-t', 'app:1', FIXTURE], { timeoutMs: 300_000 });
        assert.equal((await s.cli.docker(['run', '--rm', 'app:1', 'sh', '-c', 'echo ran in $0', s.member])).stdout.trim(), `ran in ${s.member}`);
        const project = path.join(dir, s.member);
        fs.mkdirSync(project);
        fs.writeFileSync(path.join(project, 'compose.yaml'), `services:
  web:
    image: app:1
    labels:
      tunnel.subdomain: web
    ports: ["8080:8080"]
    restart: unless-stopped
    command: ["sh", "-c", "mkdir -p /www && echo app-on-${s.member} > /www/index.html && echo web started on ${s.member} && exec httpd -f -p 8080 -h /www"]
`);
        await s.cli.compose(project, ['-p', 'shop', 'up', '-d'], { timeoutMs: 300_000 });
        await eventually(async () => (await user.app(`${s.name}-web`)).body.includes(`app-on-${s.member}`), `${s.name}'s app at its address`, 60_000, 500);
        const shell = await eventually(() => user.ssh(s.name, 'hostname && docker ps --format "{{.Names}}"'), `ssh into ${s.name}`, 60_000, 1000);
        assert.deepEqual(shell.trim().split('\n'), [s.name, 'shop-web-1']);
        await user.upload(s.name, '/root/kept.bin', s.file);
        assert.equal(sha256(await user.download(s.name, '/root/kept.bin')), sha256(s.file));
        assert.deepEqual(await user.logLines(s.name, 'shop-web-1', 1), [`web started on ${s.member}`]);
      }));
    });

    it('shows a user only their own sandboxes, wherever they run', async () => {
      const mine = await c.user.api('GET', '/api/sandboxes');
      assert.deepEqual(mine.body.map((s: { name: string }) => s.name).sort(), c.sandboxes.map((s) => s.name).sort());
      const stranger = await c.t.user('eve');
      for (const s of c.sandboxes) {
        assert.equal((await c.t.api('GET', `/api/sandboxes/${s.name}`, stranger.token)).status, 404);
      }
      assert.deepEqual((await c.t.api('GET', '/api/sandboxes', stranger.token)).body, []);
    });

    clientTour('one more sandbox through every client (the tour)', () => c.t);

    filesOnCluster(c);
    archivedOnCluster(c);
    memberLost(c);
    memberCrashed(c);
    moves(c);
  });
}
