import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER, serviceCaPem } from '../../edge/index.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { gzip, LAYER_GZIP, LAYER_ZSTD, makeTar, OciClient, zstd } from '../../harness/oci.ts';
import { ruleFamily } from '../../monitoring/index.ts';
import { SCAN_ATTEMPTS } from '../../queue/scan-queue.ts';

const run = promisify(execFile);

let t: TestService;
let sb: EdgeSandbox;

before(async () => {
  // one wake by app traffic per hour: the second one meets the limit; no held requests: the waiting page at once
  t = await startTestService({ wakesPerHour: 1, wakeHoldMs: 0 });
  sb = await openEdgeSandbox(t, 'metrics');
});
after(async () => {
  sb?.close();
  await t?.close();
});

/** One scrape of the operator port, parsed into `name{labels}` → value. */
async function scrape(): Promise<{ text: string; values: Map<string, number> }> {
  const res = await fetch(`${t.url}/metrics`);
  assert.equal(res.status, 200);
  const text = await res.text();
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-z_:][a-z0-9_:]*(?:\{[^}]*\})?) (\S+)$/i.exec(line);
    if (m) values.set(m[1]!, Number(m[2]));
  }
  return { text, values };
}

test('a scrape after waking, sleeping, scanning and serving passes promtool, and the counters moved by exactly that', async () => {
  await sb.cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
  await sb.cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && exec httpd -f -p 8080 -h /www']);
  const host = `${sb.name}-web.${t.config.domain}`;
  const port = t.config.httpsPort;
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app', 120_000, 500);

  // everything below is counted by the test itself
  let appRequests = 0;
  let waitingPages = 0;
  let bodyBytes = 0;
  let recordReads = 0;
  const app = async () => {
    appRequests += 1;
    const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '30', '--cacert', sb.ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
    const [head, body = ''] = stdout.split('\r\n\r\n');
    bodyBytes += Buffer.byteLength(body);
    if (new RegExp(`^${WAITING_HEADER}: 1`, 'mi').test(head!)) waitingPages += 1;
    return { status: Number(/^HTTP\/1.1 (\d+)/.exec(head!)![1]), body };
  };
  const status = async () => {
    recordReads += 1;
    return (await sb.record()).status as string;
  };
  const settings = async (body: object) => assert.equal((await t.api('PATCH', `/api/sandboxes/${sb.name}`, sb.user.token, body)).status, 200);
  const before = await scrape();

  // served: three app requests to a running sandbox
  for (let i = 0; i < 3; i++) assert.equal((await app()).status, 200);

  // slept by its idle timer, then woken by app traffic (the waiting page first)
  await settings({ idle_timeout: '3s' });
  await eventually(async () => (await status()) === 'exited', 'the idle sleep', 60_000, 500);
  await settings({ idle_timeout: '1h' });
  const first = await app();
  assert.equal(first.status, 200);
  assert.equal(waitingPages, 1, 'the first request met the waiting page');
  await eventually(async () => (await app()).body.includes('hello-app'), 'the app after the wake', 120_000, 500);

  // slept again and taken down; app traffic now meets the wake limit; an API start wakes it from deep sleep
  await settings({ idle_timeout: '3s', deep_sleep_after: '2s' });
  await eventually(async () => (await status()) === 'deep_sleep', 'the deep sleep', 90_000, 500);
  await settings({ idle_timeout: '1h', deep_sleep_after: 'off' });
  assert.equal((await app()).status, 429, 'over the wake limit');
  const started = await t.api('POST', `/api/sandboxes/${sb.name}/start`, sb.user.token);
  assert.ok(started.status < 300, answerOf(started));
  await eventually(async () => (await status()) === 'running', 'the wake from deep sleep', 180_000, 500);
  await eventually(async () => (await app()).body.includes('hello-app'), 'the app after the deep wake', 120_000, 500);

  // scanned: one pushed image with an env file, then pulled once
  const oci = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca: (await serviceCaPem(t.config, t.service.store.serviceKeys))! })
    .withAuth(OciClient.basic(sb.user.token));
  const repo = `${sb.name}/metrics`;
  const layer = gzip(await makeTar([{ path: 'app/main.sh', content: 'echo hi\n' }, { path: 'app/.env', content: 'DB_PASSWORD=hunter2hunter2\n' }]));
  assert.equal((await oci.pushImage(repo, 'v1', [{ blob: layer, mediaType: LAYER_GZIP }])).status, 201);
  const scanned = (name: string, what: string) => eventually(async () => {
    const report = (await t.api('GET', `/api/sandboxes/${sb.name}/registry`, sb.user.token)).body;
    const v = report.images?.find((i: { name: string }) => i.name === name)?.versions[0];
    return v && !['pending', 'scanning'].includes(v.scan.state) ? v : undefined;
  }, what, 60_000, 250);
  const version = await scanned(repo, 'the scan');
  assert.equal((await oci.request('GET', `/v2/${repo}/manifests/v1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).status, 200);

  // a scan job that fails every attempt: a zstd layer while this process finds no zstd program
  // (nothing else here starts a program meanwhile); after the last attempt the version is unscannable
  const zstdLayer = zstd(await makeTar([{ path: 'app/main.sh', content: 'echo hi\n' }]));
  const PATH = process.env.PATH;
  process.env.PATH = '/nonexistent';
  let failing;
  try {
    assert.equal((await oci.pushImage(`${sb.name}/failing`, 'v1', [{ blob: zstdLayer, mediaType: LAYER_ZSTD }])).status, 201);
    failing = await scanned(`${sb.name}/failing`, 'the failing scan to give up');
  } finally {
    process.env.PATH = PATH;
  }
  assert.equal(failing.scan.state, 'unscannable');
  assert.match(failing.scan.reason, /^scan failed: .*zstd/);

  // every connection the test opened has closed: its bytes are in
  await eventually(async () => (await scrape()).values.get('svc_edge_open_connections{route="app-http"}') === 0, 'app connections to close', 10_000, 200);
  const afterwards = await scrape();
  const file = path.join(sb.dir, 'scrape.txt');
  fs.writeFileSync(file, afterwards.text);
  const promtool = await new Promise<{ code: number | null; out: string }>((resolve) => {
    const child = execFile('promtool', ['check', 'metrics'], (err, stdout, stderr) => resolve({ code: err ? (err as { code?: number }).code ?? 1 : 0, out: stdout + stderr }));
    child.stdin!.end(afterwards.text);
  });
  assert.equal(promtool.code, 0, `promtool check metrics: ${promtool.out}`);

  const delta = (series: string) => (afterwards.values.get(series) ?? 0) - (before.values.get(series) ?? 0);
  assert.equal(delta('svc_wakes_total{kind="asleep"}'), 1);
  assert.equal(delta('svc_wakes_total{kind="deep_sleep"}'), 1);
  assert.equal(delta('svc_wake_duration_seconds_count{kind="asleep"}'), 1);
  assert.equal(delta('svc_wake_duration_seconds_count{kind="deep_sleep"}'), 1);
  assert.equal(delta('svc_sleeps_total{kind="sleep"}'), 2);
  assert.equal(delta('svc_sleeps_total{kind="deep_sleep"}'), 1);
  assert.equal(delta('svc_wake_limits_hit_total'), 1);
  assert.equal(delta('svc_edge_http_requests_total{route="app-http"}'), appRequests);
  assert.equal(delta('svc_edge_connections_total{route="app-http"}'), appRequests);
  assert.equal(delta('svc_edge_waiting_pages_total'), waitingPages);
  assert.ok(delta('svc_edge_bytes_total{route="app-http",direction="out"}') > bodyBytes, 'bytes out hold at least the bodies');
  assert.ok(delta('svc_edge_bytes_total{route="app-http",direction="in"}') > 0);
  assert.equal(delta(`svc_scans_total{result="${version.scan.state}"}`), 1);
  assert.equal(delta('svc_scans_total{result="failed"}'), SCAN_ATTEMPTS, 'each attempt of the failing job');
  assert.equal(delta('svc_scan_duration_seconds_count'), 1 + SCAN_ATTEMPTS);
  const families = new Map<string, number>();
  for (const f of version.findings as Array<{ rule: string }>) families.set(ruleFamily(f.rule), (families.get(ruleFamily(f.rule)) ?? 0) + 1);
  assert.ok(families.size > 0, 'the env file was found');
  for (const [family, n] of families) assert.equal(delta(`svc_scan_findings_total{family="${family}"}`), n, `findings of family ${family}`);
  assert.equal(delta('svc_registry_pushes_total'), 2);
  assert.equal(delta('svc_registry_pulls_total'), 1);
  assert.equal(delta('svc_api_requests_total{method="GET",route="/api/sandboxes/:name",status="200"}'), recordReads);
  assert.equal(delta('svc_api_requests_total{method="PATCH",route="/api/sandboxes/:name",status="200"}'), 4);
  assert.equal(afterwards.values.get('svc_sandboxes{status="running"}'), 1);
  assert.equal(afterwards.values.get('svc_scan_queue_jobs{state="waiting"}'), 0);
  assert.ok((afterwards.values.get('process_resident_memory_bytes') ?? 0) > 0, 'process metrics');
  // no sandbox name in any series: labels are bounded
  assert.ok(!afterwards.text.includes(sb.name), 'no sandbox name in the scrape');
});
