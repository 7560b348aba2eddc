/**
 * A whole service that does everything that arms timers — a sandbox running an app reached through
 * the edge, idle sleep, a wake by app request, a log stream, an upload, a registry push and its scan —
 * then closes while a wake and a reconcile are still in flight, and ends without process.exit().
 * Run by close.test.ts as a process of its own: what it prints after the close is what is left.
 */
import fs from 'node:fs';
import path from 'node:path';
import { openEdgeSandbox } from '../../harness/edge-sandbox.ts';
import { eventually, startTestService } from '../../harness/service.ts';
import { gzip, LAYER_GZIP, makeTar, OciClient } from '../../harness/oci.ts';

const step = (what: string) => process.stdout.write(`step ${what}\n`);

const t = await startTestService();
const sb = await openEdgeSandbox(t, 'close');
const token = sb.user.token;
const status = async () => (await sb.record()).status as string;

step('app');
await sb.cli.docker(['build', '-q', '-t', 'web', path.resolve('fixtures/busybox')]);
await sb.cli.docker(['run', '-d', '--restart', 'unless-stopped', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'web',
  'sh', '-c', 'mkdir -p /w && echo up > /w/index.html && while :; do echo tick; sleep 1; done & exec httpd -f -p 8080 -h /w']);
await eventually(async () => /up/.test(await sb.curl(`${sb.name}-web`)), 'the app through the edge', 60_000, 250);

step('log stream');
const stream = await fetch(`${t.url}/api/sandboxes/${sb.name}/logs/stream`, { headers: { authorization: `Bearer ${token}` } });
const reader = stream.body!.getReader();
for (let seen = ''; !seen.includes('tick');) seen += new TextDecoder().decode((await reader.read()).value);

step('upload');
const put = await fetch(`${t.url}/api/sandboxes/${sb.name}/files/content?path=/srv/close.txt`, {
  method: 'PUT', headers: { authorization: `Bearer ${token}` }, body: Buffer.alloc(1 << 20, 'x'),
});
if (put.status >= 300) throw new Error(`upload answered ${put.status}`);

step('scan');
const registry = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca: fs.readFileSync(sb.ca, 'utf8'), auth: OciClient.basic(token) });
const pushed = await registry.pushImage(`${sb.name}/app`, 'v1', [{ blob: gzip(await makeTar([{ path: 'etc/app.conf', content: 'port = 80\n' }])), mediaType: LAYER_GZIP }]);
if (pushed.status !== 201) throw new Error(`push answered ${pushed.status}`);
await eventually(async () => {
  const report = (await t.api('GET', `/api/sandboxes/${sb.name}/registry`, token)).body;
  return report.images?.[0]?.versions?.[0]?.scan?.state === 'clean';
}, 'the scan', 60_000, 250);
registry.close();

step('sleep');
await t.api('PATCH', `/api/sandboxes/${sb.name}`, token, { idle_timeout: '2s' });
await reader.cancel();
await eventually(async () => (await status()) === 'exited', 'idle sleep', 60_000, 250);

step('wake by app request');
await sb.curl(`${sb.name}-web`);
await eventually(async () => (await status()) === 'running', 'the wake', 60_000, 250);
await t.api('PATCH', `/api/sandboxes/${sb.name}`, token, { idle_timeout: '1h' });
await eventually(async () => /up/.test(await sb.curl(`${sb.name}-web`)), 'the app after the wake', 60_000, 250);

step('close with work in flight');
// A client still following the logs as the service stops (a browser tab left open).
const follower = await fetch(`${t.url}/api/sandboxes/${sb.name}/logs/stream`, { headers: { authorization: `Bearer ${token}` } });
const following = follower.body!.getReader();
await following.read();
const followed = (async () => { while (!(await following.read()).done); })().catch(() => undefined);
// What a real shutdown meets: a reconcile pass (the schedule's job) and app refreshes still running.
const inFlight = [t.service.lifecycle.reconcile(), t.api('POST', `/api/sandboxes/${sb.name}/start`, token)].map((p) => p.catch(() => undefined));
sb.close();
await t.close();
await Promise.all([...inFlight, followed]);
// Work that was in flight may still arm something a moment after the close: look once it had its chance.
await new Promise((r) => setTimeout(r, 2_000));
process.stdout.write(`left ${JSON.stringify(process.getActiveResourcesInfo())}\n`);
