import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { keepingStranded } from '../../lifecycle/runtime/stranded-sandboxes.ts';
import { writeRunnerRows } from '../helpers/runner-rows.ts';
import { svcCli } from '../helpers/svc-cli.ts';

/** A logger whose lines the test reads. */
function capturing(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({ write(chunk: Buffer, _enc, done) { lines.push(JSON.parse(chunk.toString())); done(); } });
  return { logger: pino({ level: 'info' }, sink), lines };
}

/**
 * The upgrade from a release with runner hosts (issue 34 §5; docs/scale-out.md, "Upgrading from runner
 * hosts"): the real service started on a store that names a sandbox on a runner host shows it
 * unavailable and changes nothing of it, says what to do in one error line, lists the runner host in
 * `svc hosts list`; once the previous release has moved it back (its placement `local`), a start removes
 * what runner hosts left, and the sandbox is this machine's.
 */
describe('a store that names sandboxes on runner hosts', () => {
  let t: TestService;
  let user: { id: string; token: string };
  let here: string; // made on this machine through the API
  let away: string; // its volumes on runner-a, as the old release left it
  const rows = () => ({ url: `sqlite://${t.config.dataDir}/svc.sqlite`, table: t.config.storeTable });

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    user = await t.user('upgrader');
    const made = await t.api('POST', '/api/sandboxes', user.token, { name: `here-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(made.status, 201, answerOf(made));
    here = made.body.name;
    away = `svc-away-${t.config.redisPrefix}`;
    await t.service.store.sandboxes.insert({ name: away, owner_id: user.id, template: 'default', idle_timeout: '1h', deep_sleep_after: '24h', created_at: new Date().toISOString() });
    assert.equal(t.service.config.storeUrl, rows().url, 'the test writes the store the service reads');
    await writeRunnerRows(rows().url, rows().table, { hosts: ['runner-a', 'local'], placements: { [away]: 'runner-a', [here]: 'local' } });
    await t.restart();
  });
  after(async () => { await t?.close(); });

  it('shows it unavailable, refuses every action with 503 and changes nothing; the other sandbox works', async () => {
    const record = await t.api('GET', `/api/sandboxes/${away}`, user.token);
    assert.equal(record.status, 200, answerOf(record));
    assert.equal(record.body.status, 'unavailable');
    const list = await t.api('GET', '/api/sandboxes', user.token);
    assert.deepEqual(list.body.map((s: { name: string; status: string }) => [s.name, s.status]).sort(), [[away, 'unavailable'], [here, 'running']].sort());
    for (const [method, route] of [['POST', `/api/sandboxes/${away}/start`], ['DELETE', `/api/sandboxes/${away}`], ['POST', `/api/sandboxes/${away}/fork`]] as const) {
      const res = await t.api(method, route, user.token, method === 'POST' && route.endsWith('fork') ? { name: `fork-${t.config.redisPrefix}` } : undefined);
      assert.equal(res.status, 503, `${method} ${route}: ${answerOf(res)}`);
      assert.equal(res.body.error.code, 'SVC_BUSY');
    }
    assert.ok(await t.service.store.sandboxes.get(away), 'its record stays');
    assert.equal((await t.service.store.runnerLeftovers.read()).stranded.get(away), 'runner-a', 'its placement stays for the previous release to move it');
    const admin = await t.user('upgrade-admin', { admin: true });
    const all = await t.api('GET', '/api/admin/sandboxes', admin.token);
    assert.equal(all.body.find((s: { name: string }) => s.name === away)?.host, 'runner-a', 'admins see where it is');
    const exec = await t.api('POST', `/api/sandboxes/${here}/exec`, user.token, { command: ['echo', 'still here'] });
    assert.equal(exec.status, 200, answerOf(exec));
  });

  it('says which sandboxes, where, and what to do, in one error line at every start', async () => {
    const { logger, lines } = capturing();
    await keepingStranded(t.service.runtime, t.service.store.runnerLeftovers, logger);
    const said = lines.filter((l) => l.level === 50);
    assert.equal(said.length, 1, JSON.stringify(lines));
    assert.deepEqual(said[0]!.stranded, { [away]: 'runner-a' });
    assert.deepEqual(said[0]!.hosts, ['runner-a']);
    assert.match(String(said[0]!.msg), /^1 sandbox\(es\) are on runner hosts \(runner-a\), which this release no longer runs: they are shown unavailable and nothing of them is changed or removed; start the previous release again/);
    assert.match(String(said[0]!.advice), /svc hosts drain runner-a; svc hosts evacuate runner-a; svc hosts remove runner-a\. .*docs\/scale-out\.md, "Upgrading from runner hosts"/);
  });

  it('svc hosts list shows this machine and the runner host that holds it', async () => {
    const listed = await svcCli(t.config, 'hosts', 'list', '--json');
    assert.equal(listed.code, 0, listed.stderr);
    const hosts = JSON.parse(listed.stdout) as Array<{ name: string; state: string; sandboxes: number; reason?: string; address: string }>;
    assert.deepEqual(hosts.map((h) => [h.address, h.state, h.sandboxes]), [['(this machine)', 'ready', 1], ['(a runner host of an earlier release)', 'away', 1]]);
    assert.equal(hosts[1]!.name, 'runner-a');
    assert.match(hosts[1]!.reason!, /until the previous release moves them here/);
  });

  it('once moved back by the previous release: the next start removes what runner hosts left, and the sandbox is this machine\'s', async () => {
    await writeRunnerRows(rows().url, rows().table, { placements: { [away]: 'local' } });
    await t.restart();
    assert.deepEqual(await t.service.store.runnerLeftovers.read(), { hosts: [], stranded: new Map(), rows: 0 });
    // nothing of it was on this engine in this test (the previous release's move would have put its volumes here)
    assert.equal((await t.api('GET', `/api/sandboxes/${away}`, user.token)).body.status, 'deep_sleep');
    const { logger, lines } = capturing();
    assert.equal(await keepingStranded(t.service.runtime, t.service.store.runnerLeftovers, logger), t.service.runtime, 'nothing left to keep');
    assert.deepEqual(lines, [], 'nothing more to say');
  });
});
