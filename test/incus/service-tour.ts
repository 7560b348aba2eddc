// The service on Incus (SVC_RUNTIME=incus, issue 34 §2), end to end with the clients users have:
// the API creates a sandbox, the docker CLI reaches its engine through the engine address on the TLS
// port, `docker compose up` publishes an app that curl reaches at its HTTPS address, ssh over the TLS
// port, files up and down, a push from the sandbox's engine to the service's registry, the log stream
// (SSE), a terminal, exec, sleep and a wake by a request, deep sleep and a wake, a fork, a manager
// sandbox. Run on the test cluster by cluster.test.ts (in `npm test`), on this machine's Incus by
// service.incus.ts.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EventSource } from 'eventsource';
import WebSocket from 'ws';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { answerOf, eventually, type TestService } from '../../harness/service.ts';
import type { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { sshThroughEdge } from '../helpers/ssh-through-edge.ts';
import { incusClient } from './endpoint.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

/**
 * One sandbox of the service `service()` gives (on Incus: SVC_RUNTIME=incus, the domain svc-incus.test,
 * whose registry.<domain> a sandbox is told in its /etc/hosts) through every client. Its sandboxes are
 * deleted at its end; nothing else of the service is touched.
 */
export function clientTour(title: string, service: () => TestService): void {
  describe(title, () => {
    let t: TestService;
    let incus: IncusClient;
    let sb: EdgeSandbox;
    let name: string;
    const others: string[] = []; // the forks and the manager sandbox, deleted at the end
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    const note = randomBytes(256 * 1024);
    const api = (method: string, route: string, body?: unknown) => t.api(method, route, sb.user.token, body);
    const record = () => sb.record();
    const settings = (body: object) => api('PATCH', `/api/sandboxes/${name}`, body);
    /** This tour's instances (the service may have others) */
    const instances = async () => (await incus.get<Array<{ name: string; status: string; location: string; config: Record<string, string> | null }>>('/1.0/instances?recursion=1'))
      .filter((i) => i.config?.['user.svc.instance'] === t.config.redisPrefix && (i.name === name || others.includes(i.name)));
    const download = async (sandbox: string, file: string) => {
      const res = await fetch(`${t.url}/api/sandboxes/${sandbox}/files/content?path=${encodeURIComponent(file)}`, { headers: { authorization: `Bearer ${sb.user.token}` } });
      if (res.status !== 200) assert.fail(`GET ${file} of ${sandbox}: ${res.status} ${await res.text()}`);
      return Buffer.from(await res.arrayBuffer());
    };
    const app = () => sb.curl(`${name}-web`);

    before(async () => {
      t = service();
      incus = incusClient();
      sb = await openEdgeSandbox(t, 'inc');
      name = sb.name;
    });
    after(async () => {
      for (const f of others) await t?.api('DELETE', `/api/sandboxes/${f}`, sb.user.token).catch(() => undefined);
      if (sb) await t.api('DELETE', `/api/sandboxes/${name}`, sb.user.token).catch(() => undefined);
      sb?.close();
      const left = t ? await instances().catch(() => []) : [];
      // whatever a failed step left of this run's sandboxes
      for (const i of left) {
        await incus.act('PUT', `/1.0/instances/${i.name}/state`, { action: 'stop', force: true }).catch(() => undefined);
        await incus.act('DELETE', `/1.0/instances/${i.name}`).catch(() => undefined);
      }
      await incus?.close();
    });

    it('makes the sandbox an Incus instance whose own engine answers the docker CLI through the engine address (TLS port, mutual TLS)', async () => {
      const mine = await instances();
      assert.deepEqual(mine.map((i) => [i.name, i.status]), [[name, 'Running']]);
      assert.equal((await record()).status, 'running');
      const { stdout } = await sb.cli.docker(['version', '--format', '{{.Server.Version}}']);
      assert.match(stdout.trim(), /^\d+\.\d+/);
    });

    it('`docker compose up` of an app: curl reaches it at its HTTPS address through the edge', async () => {
      await sb.cli.docker(['build', '-q', '-t', 'incus-app:1', FIXTURE], { timeoutMs: 300_000 });
      fs.writeFileSync(path.join(sb.dir, 'compose.yaml'), `services:
    web:
      image: incus-app:1
      labels:
        tunnel.subdomain: web
      ports: ["8080:8080"]
      restart: unless-stopped
      command: ["sh", "-c", "mkdir -p /www && echo incus-web > /www/index.html && echo web started && exec httpd -f -p 8080 -h /www"]
  `);
      await sb.cli.compose(sb.dir, ['-p', 'shop', 'up', '-d'], { timeoutMs: 300_000 });
      await eventually(async () => /incus-web/.test(await app()), 'the app at its address', 60_000, 500);
    });

    it('ssh over the TLS port runs commands in the sandbox, its engine included', async () => {
      const ssh = await sshThroughEdge(t, sb.user.token, sb.dir);
      const { stdout } = await eventually(() => ssh(name, 'hostname && docker ps --format "{{.Names}}"'), 'ssh into the sandbox', 60_000, 1000);
      assert.deepEqual(stdout.trim().split('\n'), [name, 'shop-web-1']);
    });

    it('files go up and come down through the API with the same bytes', async () => {
      const res = await fetch(`${t.url}/api/sandboxes/${name}/files/content?path=${encodeURIComponent('/root/note.bin')}`, {
        method: 'PUT', body: note, headers: { authorization: `Bearer ${sb.user.token}` },
      });
      assert.equal(res.status, 200, await res.text());
      assert.equal(sha(await download(name, '/root/note.bin')), sha(note));
      const listing = await api('GET', `/api/sandboxes/${name}/files?path=/root`);
      assert.ok(listing.body.some((e: { name: string; size: number }) => e.name === 'note.bin' && e.size === note.length), answerOf(listing));
    });

    it('the sandbox\'s own engine pushes an image to the service\'s registry (the service\'s public port, from inside)', async () => {
      const sh = async (script: string, input?: string) => {
        const r = await t.service.runtime.exec.run(name, ['sh', '-c', script], input);
        return { code: r.exitCode, out: `${r.stdout.toString()}${r.stderr}` };
      };
      const registry = `registry.${t.config.domain}:${t.config.httpsPort}`;
      // the service's host as the sandbox reaches it: the address this machine sends to the sandbox from
      const address = (await t.service.lifecycle.status(name)).address!;
      const gateway = /\bsrc (\S+)/.exec((await run('ip', ['-4', 'route', 'get', address])).stdout)?.[1];
      assert.ok(gateway, `no route from this machine to ${address}`);
      const ca = (await t.api('GET', '/ca.pem', undefined)).body as string;
      await sh(`echo "${gateway} registry.${t.config.domain}" >> /etc/hosts && mkdir -p /etc/docker/certs.d/${registry} && cat > /etc/docker/certs.d/${registry}/ca.crt`, ca);
      // Go's resolver reads /etc/hosts again at most every 5 s
      await eventually(async () => /Login Succeeded/.test((await sh(`docker login ${registry} -u alice --password-stdin 2>&1`, sb.user.token)).out), 'docker login from inside', 30_000, 1000);
      const pushed = await sh(`docker tag incus-app:1 ${registry}/${name}/app:1 && docker push -q ${registry}/${name}/app:1 2>&1`);
      assert.equal(pushed.code, 0, pushed.out);
      const listed = await api('GET', `/api/sandboxes/${name}/registry`);
      assert.ok(listed.body.images.some((i: { name: string }) => i.name === `${name}/app`), answerOf(listed));
    });

    it('streams the apps\' log lines (SSE)', async () => {
      await sb.cli.docker(['run', '-d', '--name', 'ticker', 'incus-app:1', 'sh', '-c', 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.2; done']);
      const lines: string[] = [];
      const es = new EventSource(`${t.url}/api/sandboxes/${name}/logs/stream?tail=100`, {
        fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), authorization: `Bearer ${sb.user.token}` } }),
      });
      es.addEventListener('log', (e) => { const l = JSON.parse(e.data) as { container: string; line: string }; lines.push(`${l.container} ${l.line}`); });
      try {
        await eventually(async () => lines.filter((l) => l.startsWith('ticker tick')).length >= 3, 'three lines of the ticker', 30_000, 100);
        await eventually(async () => lines.some((l) => l === 'shop-web-1 web started'), 'the app\'s line', 30_000, 100);
      } finally {
        es.close();
      }
      await sb.cli.docker(['rm', '-f', 'ticker']);
    });

    it('a terminal (the web UI\'s websocket) runs a shell on a pty in the sandbox and follows a resize', async () => {
      const ws = new WebSocket(`${t.url.replace('http', 'ws')}/api/sandboxes/${name}/terminal?cols=80&rows=24`, { headers: { authorization: `Bearer ${sb.user.token}` } });
      let seen = '';
      ws.on('message', (data: Buffer) => { seen += data.toString('utf8'); });
      await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
      const closed = new Promise<number>((resolve) => ws.once('close', (code: number) => resolve(code)));
      try {
        ws.send(JSON.stringify({ type: 'resize', cols: 101, rows: 33 }));
        await eventually(async () => {
          ws.send(JSON.stringify({ type: 'input', data: 'stty size; tty\r' }));
          return /33 101/.test(seen) && /\/dev\/pts\//.test(seen);
        }, 'the shell\'s answer on its terminal', 30_000, 1000);
        // the shell's end ends the websocket, as the service says it
        ws.send(JSON.stringify({ type: 'input', data: 'exit\r' }));
        assert.equal(await closed, 1000);
      } finally {
        ws.close();
      }
    });

    it('exec through the API: stdin in, stdout, stderr and the exit code out; a timeout ends the command', async () => {
      const ran = await api('POST', `/api/sandboxes/${name}/exec`, { command: 'read x; echo "got $x"; echo oops >&2; exit 3', stdin: 'hi\n' });
      assert.equal(ran.status, 200, answerOf(ran));
      assert.deepEqual([ran.body.exit_code, ran.body.stdout, ran.body.stderr], [3, 'got hi\n', 'oops\n']);
      const late = await api('POST', `/api/sandboxes/${name}/exec`, { command: 'sleep 30', timeout: 1 });
      assert.deepEqual([late.body.exit_code, late.body.timed_out], [124, true]);
    });

    it('asleep (the instance stopped), a request to the app wakes it and is answered by the app', async () => {
      await settings({ idle_timeout: '3s' });
      await eventually(async () => (await record()).status === 'exited', 'idle sleep', 60_000, 500);
      assert.deepEqual((await instances()).map((i) => i.status), ['Stopped']);
      await settings({ idle_timeout: '1h' });
      // the edge holds the request while the sandbox wakes; a later try once the app's restart policy has run
      await eventually(async () => /incus-web/.test(await app()), 'the app after a wake by its request', 90_000, 1000);
      assert.equal((await record()).status, 'running');
    });

    it('from deep sleep, a start brings it back with its files, its app and its engine', async () => {
      await settings({ idle_timeout: '3s', deep_sleep_after: '2s' });
      await eventually(async () => (await record()).status === 'deep_sleep', 'deep sleep', 90_000, 500);
      await settings({ idle_timeout: '1h', deep_sleep_after: 'off' });
      const started = await api('POST', `/api/sandboxes/${name}/start`);
      assert.ok(started.status < 300, answerOf(started));
      await eventually(async () => (await record()).status === 'running', 'wake from deep sleep', 120_000, 500);
      assert.equal(sha(await download(name, '/root/note.bin')), sha(note));
      await eventually(async () => /incus-web/.test(await app()), 'the app after deep sleep', 90_000, 1000);
      assert.match((await sb.cli.docker(['ps', '--format', '{{.Names}}'])).stdout, /^shop-web-1$/m);
    });

    it('a fork is a running copy with the files and its own engine; the source runs on', async () => {
      const res = await api('POST', `/api/sandboxes/${name}/fork`, { name: `incf-${t.config.redisPrefix}` });
      assert.equal(res.status, 201, answerOf(res));
      const fork = res.body;
      others.push(fork.name);
      assert.equal(fork.status, 'running');
      assert.notEqual(fork.engine_access.host, (await record()).engine_access.host);
      assert.equal(sha(await download(fork.name, '/root/note.bin')), sha(note));
      const mine = new Map((await instances()).map((i) => [i.name, i.status]));
      assert.equal(mine.get(fork.name), 'Running');
      assert.equal(mine.get(name), 'Running');
      assert.match(await app(), /incus-web/);
    });

    it('a manager sandbox gets the management tool (its image from this host\'s Docker engine), answering at its address', async () => {
      const res = await api('POST', '/api/sandboxes', { name: `incm-${t.config.redisPrefix}`, template: 'manager', idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      others.push(res.body.name);
      const url = new URL(res.body.extras.manager_url as string);
      const { stdout } = await run('curl', ['-sS', '--max-time', '60', '--cacert', sb.ca, '--resolve', `${url.hostname}:${t.config.httpsPort}:127.0.0.1`, `${url.origin}/api/status`]);
      assert.ok(JSON.parse(stdout).Version, stdout);
    });
  });
}
