import assert from 'node:assert/strict';
import { it } from 'node:test';
import { UNAVAILABLE_HEADER } from '../../edge/index.ts';
import { eventually } from '../../harness/service.ts';
import { rig } from '../../harness/test-cluster.ts';
import { navigate } from '../helpers/navigate.ts';
import { sha256, type MemberSandbox, type OnCluster } from './cluster-clients.ts';
import type { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { incusClient } from './endpoint.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A member killed under the service (scripts/test-cluster.sh kill): the successor of
 * test/hosts/host-away.test.ts and test/lifecycle/host-unavailable.test.ts on the cluster.
 */
export function memberLost(c: OnCluster): void {
  it('a member killed: its sandbox unavailable through the API, the user CLI, MCP, the web UI and its app address; the other members\' sandboxes answer; back with its files when it returns', async (tc) => {
    const { t, user } = c;
    const [a, b, d] = c.sandboxes as [MemberSandbox, MemberSandbox, MemberSandbox];
    const status = async (s: MemberSandbox) => (await user.api('GET', `/api/sandboxes/${s.name}`)).body;
    const page = await user.page();
    await navigate(page, () => page.goto(`${user.site}/#/sandboxes`));
    await page.locator('ul.sandboxes > li').filter({ hasText: b.name }).locator('.badge.running').waitFor({ timeout: 30_000 });

    // the panel's usage figures asked all through the loss and the return, as the open panel asks them:
    // an answer or a 503 (unavailable), never a 500 (Incus's failed forward to the member leaked as one)
    const usage: number[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        usage.push((await user.api('GET', `/api/sandboxes/${b.name}/usage`)).status);
        await sleep(300);
      }
    })();
    tc.after(async () => { polling = false; await poller.catch(() => undefined); });
    await rig('kill', b.member);
    const t0 = Date.now();
    const slowest = { record: 0, app: 0, list: 0, exec: 0 };
    const timed = async <T>(what: keyof typeof slowest, work: () => Promise<T>) => {
      const t1 = Date.now();
      const value = await work();
      slowest[what] = Math.max(slowest[what], Date.now() - t1);
      return value;
    };
    try {
      // the runtime's lists (reconcile passes, the metrics) at once: not held up by the lost member, whose
      // sandbox is left out (Incus's own list waits 20 s on it until Incus marks it offline)
      const lists = async () => {
        const t1 = Date.now();
        const [listed, kept] = await Promise.all([t.service.runtime.list(), t.service.runtime.withVolumes()]);
        const ms = Date.now() - t1;
        assert.ok(ms < 10_000, `list and withVolumes took ${ms} ms: held up by the lost member`);
        const ours = new Set(c.sandboxes.map((s) => s.name));
        assert.deepEqual(listed.filter((x) => ours.has(x.name)).map((x) => [x.name, x.running]).sort(), [[a.name, true], [d.name, true]].sort());
        assert.deepEqual(kept.filter((n) => ours.has(n)).sort(), [a.name, d.name].sort());
        return ms;
      };
      const firstList = await lists();
      // until the API says so, the other members' sandboxes answer every round: record, app, the list, a command
      for (;;) {
        for (const s of [a, d]) {
          assert.equal((await timed('record', () => status(s))).status, 'running', `${s.name} while ${b.member} is away`);
          const app = await timed('app', () => user.app(`${s.name}-web`));
          assert.equal(app.status, 200, `${s.name}'s app while ${b.member} is away`);
          const ran = await timed('exec', () => user.api('POST', `/api/sandboxes/${s.name}/exec`, { command: 'hostname' }));
          assert.equal(ran.body.stdout, `${s.name}\n`);
        }
        await timed('list', () => user.api('GET', '/api/sandboxes'));
        assert.notEqual((await t.service.runtime.read(b.name)).status, 'deep_sleep', 'a lost member\'s sandbox is never taken for gone');
        if ((await status(b)).status === 'unavailable') break;
        assert.ok(Date.now() - t0 < 60_000, `${b.name} unavailable within a minute of the kill`);
        await sleep(200);
      }
      console.log(`# ${b.member} killed: ${b.name} unavailable through the API after ${Date.now() - t0} ms; meanwhile, slowest on the other members: record ${slowest.record} ms, app ${slowest.app} ms, command ${slowest.exec} ms, the API's list ${slowest.list} ms`);
      console.log(`# the runtime's list and withVolumes: ${firstList} ms at the kill, ${await lists()} ms once the member is known lost`);
      const list = await timed('list', () => user.api('GET', '/api/sandboxes'));
      assert.deepEqual(list.body.map((s: { name: string; status: string }) => [s.name, s.status]).sort(), [[a.name, 'running'], [b.name, 'unavailable'], [d.name, 'running']].sort());
      assert.match((await status(b)).hint, /does not answer/);
      const started = await user.api('POST', `/api/sandboxes/${b.name}/start`);
      assert.equal(started.status, 503);
      assert.equal(started.body.error.code, 'SVC_BUSY');
      // every route that asks its member answers 503 (SVC_BUSY: unavailable): usage, a command, a file, its containers
      for (const [method, route, body] of [
        ['GET', `/api/sandboxes/${b.name}/usage`], ['POST', `/api/sandboxes/${b.name}/exec`, { command: 'hostname' }],
        ['GET', `/api/sandboxes/${b.name}/files/content?path=%2Froot%2Fkept.bin`], ['GET', `/api/sandboxes/${b.name}/containers`],
      ] as Array<[string, string, unknown?]>) {
        const res = await user.api(method, route, body);
        assert.deepEqual([res.status, res.body?.error?.code], [503, 'SVC_BUSY'], `${method} ${route}: ${JSON.stringify(res.body).slice(0, 300)}`);
      }

      // its app's address: the host-unavailable page once the edge's kept running state runs out (a request
      // the edge still sent to the lost member's address waits for HAProxy's connect timeout), no wake
      await eventually(async () => (await user.app(`${b.name}-web`, 'GET', 5)).status === 503, 'the host-unavailable page', 30_000, 200);
      const shown = await user.app(`${b.name}-web`);
      assert.match(shown.head, new RegExp(`^${UNAVAILABLE_HEADER}: 1$`, 'm'));
      assert.match(shown.body, /host is unavailable/);

      // the user CLI and an MCP tool call
      const cli = await user.svc(b.name, 'status');
      assert.equal(cli.code, 0, cli.stderr);
      assert.match(cli.stdout, new RegExp(`^${b.name}  unavailable\\n.*does not answer`));
      const listed = (await user.svc(b.name, 'ls')).stdout;
      assert.match(listed, new RegExp(`^${b.name} +unavailable$`, 'm'));
      assert.match(listed, new RegExp(`^${a.name} +running `, 'm'));
      const tool = await user.tool('get_sandbox_status', { sandbox: b.name });
      assert.equal(tool.value?.status, 'unavailable', tool.error);
      assert.match((await user.tool('start_sandbox', { sandbox: b.name })).error, /^SVC_BUSY: the sandbox is unavailable/);

      // the web UI (Chromium started before the kill): the list's badge and the panel's words
      await navigate(page, () => page.reload());
      const row = page.locator('ul.sandboxes > li').filter({ hasText: b.name });
      await row.locator('.badge.unavailable', { hasText: 'unavailable' }).waitFor({ timeout: 30_000 });
      await row.getByText('its host does not answer').waitFor();
      await page.locator('ul.sandboxes > li').filter({ hasText: a.name }).locator('.badge.running').waitFor();
      await navigate(page, () => page.goto(`${user.site}/#/sandboxes/${b.name}`));
      await page.getByText('Unavailable: the host that holds this sandbox does not answer').waitFor({ timeout: 30_000 });

      // the operator: a move off the lost member is refused, saying why
      const move = await c.operator('hosts', 'move', b.name, '--to', 'm3');
      assert.equal(move.code, 1, move.stdout);
      assert.match(move.stderr, new RegExp(`host "${b.member}" does not answer`));
    } finally {
      await rig('up', '3');
    }
    await eventually(async () => (await status(b)).status === 'running', `${b.name} running once ${b.member} is back`, 60_000, 500);
    await page.getByRole('heading', { level: 1, name: new RegExp(b.name) }).locator('.badge.running').waitFor({ timeout: 30_000 });
    assert.equal(sha256(await eventually(() => user.download(b.name, '/root/kept.bin'), `${b.name}'s file`, 30_000, 1000)), sha256(b.file));
    await eventually(async () => (await user.app(`${b.name}-web`)).body.includes(`app-on-${b.member}`), `${b.name}'s app back`, 30_000, 500);
    await eventually(async () => usage.at(-1) === 200, `${b.name}'s usage figures back`, 30_000, 300);
    polling = false;
    await poller;
    console.log(`# ${b.name}'s usage asked ${usage.length} times through the loss and back: ${[...new Set(usage)].sort().join(', ')}`);
    assert.deepEqual(usage.filter((s) => s >= 500 && s !== 503), [], 'usage answers (its figures, or 503 unavailable) while the member is lost or coming back, never a 500');
    assert.ok(usage.includes(503), 'usage said unavailable while the member was lost');
  });
}

/**
 * A member's incusd gone while its machine answers (a crash, a restart): the cluster's requests to it
 * are refused at once, and Incus answered the runtime's reads with a 500 of its own failed forward
 * (`Get "https://100.64.1.2:8443/…": dial tcp …: connection refused`, and while the daemon comes back
 * and serves its own certificate before the cluster's, `tls: … x509: certificate is valid for
 * 127.0.0.1, ::1, not 100.64.1.2`: the usage route's 500 in CI). Every route that asks the member
 * answers 503 (unavailable) or its answer, never a 500, from the crash until it is back.
 */
export function memberCrashed(c: OnCluster): void {
  it('a member\'s incusd gone, its machine answering (a crash, then its return): its sandbox\'s usage, commands, files and containers answer 503 or their answer, never a 500', async () => {
    const { user } = c;
    const b = c.sandboxes[1]!;
    const routes: Array<[string, string, unknown?]> = [
      ['GET', `/api/sandboxes/${b.name}/usage`], ['POST', `/api/sandboxes/${b.name}/exec`, { command: 'hostname' }],
      ['GET', `/api/sandboxes/${b.name}/files/content?path=%2Froot%2Fkept.bin`], ['GET', `/api/sandboxes/${b.name}/containers`],
    ];
    const seen: string[] = [];
    const round = async () => {
      for (const [method, route, body] of routes) {
        const res = await user.api(method, route, body);
        seen.push(`${res.status} ${method} ${route.split('/').slice(4).join('/')}${res.status >= 500 && res.status !== 503 ? ` ${JSON.stringify(res.body).slice(0, 200)}` : ''}`);
      }
      return (await user.api('GET', `/api/sandboxes/${b.name}`)).body.status as string;
    };
    await rig('crash', b.member);
    try {
      // at once (before the service knows the member lost), then until the API says it is unavailable
      await eventually(async () => (await round()) === 'unavailable', `${b.name} unavailable`, 60_000, 200);
      await round();
    } finally {
      await rig('up', '3');
    }
    // its return: the daemon starting again, until every route answers
    await eventually(async () => (await round()) === 'running' && seen.slice(-routes.length).every((s) => s.startsWith('200 ')), `${b.name}'s routes answering once ${b.member} is back`, 60_000, 200);
    console.log(`# ${b.member}'s incusd crashed and back: ${seen.length} answers, ${[...new Set(seen.map((s) => s.split(' ')[0]))].sort().join(', ')}`);
    assert.deepEqual(seen.filter((s) => Number(s.split(' ')[0]) >= 500 && !s.startsWith('503 ')), [], 'no 500 through the crash and the return');
    assert.ok(seen.some((s) => s.startsWith('503 GET usage')), 'usage said unavailable');
    assert.equal(sha256(await user.download(b.name, '/root/kept.bin')), sha256(b.file));
  });
}

/** Moves as the operator runs them: the successor of test/hosts/move.test.ts and move-interrupted.test.ts. */
export function moves(c: OnCluster): void {
  it('svc hosts move (its own process, the service\'s lease): the sandbox asleep on the new member, woken there by a request with its files and app, also when its old member is lost right after', async () => {
    const { t, user } = c;
    const d = c.sandboxes[2]!;
    const moved = await c.operator('hosts', 'move', d.name, '--to', 'm1');
    assert.equal(moved.code, 0, moved.stderr);
    assert.match(moved.stdout, new RegExp(`${d.name}: moved m3 → m1`));
    assert.match(moved.stdout, new RegExp(`${d.name} is on m1; it wakes there at its next request`));
    // the running service was told (the lifecycle news) before the command returned: its runtime has the
    // sandbox on m1, where it looks for it once m3 is lost (nothing of this service read it since; Incus's
    // own event of the move names m3, the member it left)
    const where = (t.service.runtime as unknown as { reads: { where: Map<string, string> } }).reads.where;
    assert.equal(where.get(d.name), 'm1', 'the service knows the sandbox\'s new member when svc hosts move returns');
    // its old member lost at once, before this service read the sandbox again: the service, which last
    // saw it on m3 (the move was another process's), finds it on m1 and never takes it for lost
    await rig('kill', 'm3');
    try {
      const health = (t.service.runtime as unknown as IncusRuntime).health;
      await eventually(async () => health.lost().has('m3'), 'm3 known lost', 30_000, 200);
      await eventually(async () => (await user.api('GET', `/api/sandboxes/${d.name}`)).body.status === 'deep_sleep', `${d.name} in deep sleep (not unavailable) while m3 is lost`, 10_000, 200);
      assert.equal(await t.service.runtime.hostOf(d.name), 'm1');
      // a request to its app wakes it where it went (its address went with it)
      await eventually(async () => (await user.app(`${d.name}-web`)).body.includes(`app-on-${d.member}`), `${d.name}'s app woken on m1`, 120_000, 1000);
      assert.equal((await user.api('GET', `/api/sandboxes/${d.name}`)).body.status, 'running');
      assert.equal(sha256(await user.download(d.name, '/root/kept.bin')), sha256(d.file));
    } finally {
      await rig('up', '3');
    }
    d.member = 'm1';
  });

  it('svc hosts remove refuses a member that is not drained, and one that holds sandboxes; nothing changes', async () => {
    const b = c.sandboxes[1]!;
    const open = await c.operator('hosts', 'remove', b.member);
    assert.equal(open.code, 1);
    assert.match(open.stderr, new RegExp(`host "${b.member}" is not drained`));
    assert.equal((await c.operator('hosts', 'drain', b.member)).code, 0);
    try {
      const held = await c.operator('hosts', 'remove', b.member);
      assert.equal(held.code, 1);
      assert.match(held.stderr, new RegExp(`host "${b.member}" holds \\d+ sandbox\\(es\\) \\([^)]*${b.name}`));
    } finally {
      assert.equal((await c.operator('hosts', 'undrain', b.member)).code, 0);
    }
    const members = await c.t.service.runtime.hosts!.readings();
    assert.deepEqual(members.map((m) => [m.name, m.drained]), [['m1', false], ['m2', false], ['m3', false]]);
  });

  it('a move whose target member is lost mid-copy ends within seconds saying what to do; the sandbox stays on its member and wakes there with its files; a move there again is refused saying why', async () => {
    const { t, user } = c;
    const a = c.sandboxes[0]!;
    const target = 'm2';
    const incus = incusClient();
    const move = c.operatorBackground('hosts', 'move', a.name, '--to', target);
    const pools = (await incus.get<string[]>('/1.0/storage-pools')).map((u) => u.split('/').pop()!);
    const onTarget = async () => (await Promise.all(pools.map((p) => incus.get<string[]>(`/1.0/storage-pools/${p}/volumes?target=${target}`)))).flat();
    const copied = (volumes: string[]) => volumes.some((v) => new RegExp(`/volumes/container/${a.name}(\\?|$)`).test(v));
    try {
      // Incus's migration of the instance under way and its volume made on the target (the copy begun):
      // then the target goes (killed before the volume was made, it kept nothing: one run of this session)
      await eventually(async () => {
        const ops = await incus.get<{ running?: Array<{ description: string; resources?: { instances?: string[] } }> }>('/1.0/operations?recursion=1');
        return (ops.running ?? []).some((o) => o.description === 'Migrating instance' && o.resources?.instances?.includes(`/1.0/instances/${a.name}`)) &&
          copied(await onTarget());
      }, 'the migration under way, its volume on the target', 60_000, 100);
      await rig('kill', target);
      const t0 = Date.now();
      assert.equal(await move.closed, 1, move.output());
      console.log(`# ${target} killed mid-move: svc hosts move ended ${Date.now() - t0} ms later`);
      assert.match(move.output(), new RegExp(`host "${target}" stopped answering during the move of sandbox "${a.name}".*stays on "m1" with its files`, 's'));
      assert.equal(await t.service.runtime.hostOf(a.name), 'm1');
      // woken where it stayed, with its files, while the target is still away
      await eventually(async () => (await user.app(`${a.name}-web`)).body.includes('app-on-m1'), `${a.name}'s app woken on m1`, 120_000, 1000);
      assert.equal(sha256(await user.download(a.name, '/root/kept.bin')), sha256(a.file));

      // back: what the interrupted migration copied to it is still there (Incus's API cannot remove it),
      // and a move of the same sandbox there is refused saying what to do; the sandbox stays and wakes on m1
      await rig('up', '3');
      const volumes = await onTarget();
      assert.ok(copied(volumes), `the interrupted move's volume on ${target}: ${volumes.join(', ')}`);
      const again = await c.operator('hosts', 'move', a.name, '--to', target);
      assert.equal(again.code, 1, again.stdout);
      assert.match(again.stderr, new RegExp(`host "${target}" still holds what an earlier interrupted move of sandbox "${a.name}" left there.*stays on "m1".*move it to another host`, 's'));
      assert.equal(await t.service.runtime.hostOf(a.name), 'm1');
      await eventually(async () => (await user.app(`${a.name}-web`)).body.includes('app-on-m1'), `${a.name}'s app woken on m1 again`, 120_000, 1000);
    } finally {
      if (move.child.exitCode === null) move.signal('SIGKILL');
      await rig('up', '3');
      await incus.close();
    }
  });

  it('svc hosts evacuate (its own process): each sandbox moved off the drained member, the running service told of its new member when the command returns; undrained, the member is open again', async () => {
    const { t, user } = c;
    const b = c.sandboxes[1]!;
    const from = b.member;
    assert.equal((await c.operator('hosts', 'drain', from)).code, 0);
    try {
      const evacuated = await c.operator('hosts', 'evacuate', from);
      assert.equal(evacuated.code, 0, evacuated.stderr);
      const to = new RegExp(`${b.name}: moved ${from} → (m\\d)`).exec(evacuated.stdout)?.[1];
      assert.ok(to && to !== from, evacuated.stdout);
      // told through the lifecycle news, as for svc hosts move (nothing of this service read it since)
      const where = (t.service.runtime as unknown as { reads: { where: Map<string, string> } }).reads.where;
      assert.equal(where.get(b.name), to, 'the service knows the sandbox\'s new member when svc hosts evacuate returns');
      assert.equal(await t.service.runtime.hostOf(b.name), to);
      assert.equal((await user.api('GET', `/api/sandboxes/${b.name}`)).body.status, 'deep_sleep');
      b.member = to;
    } finally {
      assert.equal((await c.operator('hosts', 'undrain', from)).code, 0);
    }
    const members = await t.service.runtime.hosts!.readings();
    assert.deepEqual(members.map((m) => [m.name, m.drained]), [['m1', false], ['m2', false], ['m3', false]]);
  });
}
