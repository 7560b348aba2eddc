import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { svcCli } from '../helpers/svc-cli.ts';

/**
 * A user disabled by another process (`npx svc user disable`, which has no engine of its own): the
 * running service puts that user's running sandboxes to sleep within seconds, a sandbox that never
 * sleeps by itself included, and leaves other users' sandboxes alone. Issue 33, an acceptance finding.
 */
describe('a user disabled from another process', () => {
  let t: TestService;

  before(async () => {
    t = await startTestService();
  });
  after(async () => {
    await t?.close();
  });

  const status = async (name: string, token: string) => (await t.api('GET', `/api/sandboxes/${name}`, token)).body.status as string;

  it('sleeps the user\'s running sandboxes at once (idle_timeout off too); another user\'s keep running', async () => {
    const alice = await t.user('alice');
    const bob = await t.user('bob');
    const made = await t.api('POST', '/api/sandboxes', alice.token, { name: `dis-${t.config.redisPrefix}`, idle_timeout: 'off' });
    assert.equal(made.status, 201, answerOf(made));
    const other = await t.api('POST', '/api/sandboxes', bob.token, { name: `keep-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(other.status, 201, answerOf(other));

    const disabled = await svcCli(t.config, 'user', 'disable', `alice-${t.config.redisPrefix}`);
    assert.equal(disabled.code, 0, disabled.stderr);
    // the reconcile pass runs every 30 s: 10 s tells the service acting on the news from one that waits for it
    const engine = t.service.lifecycle;
    await eventually(async () => (await engine.status(made.body.name)).status === 'exited', 'the disabled user\'s sandbox asleep', 10_000, 100);
    assert.equal((await engine.status(other.body.name)).status, 'running', 'another user\'s sandbox is not touched');
    assert.equal(await status(other.body.name, bob.token), 'running');
    // and it stays asleep: no wake is admitted for a disabled owner
    await assert.rejects(engine.start(made.body.name), /disabled/);
  });
});
