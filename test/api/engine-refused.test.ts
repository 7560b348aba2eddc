import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const ENGINE_PORT = 2376;

/**
 * A running sandbox whose own engine refuses the service's connection (its root's firewall here; a
 * dockerd still starting or restarting does the same): the routes that ask that engine answer the
 * catalogue's 503 with Retry-After, not a 500, and work again once the engine answers.
 */
describe("a sandbox's engine that refuses the connection", () => {
  let t: TestService;
  let token: string;
  let name: string;
  const firewall = (op: '-I' | '-D') => run('docker', [...SANDBOX_CLI, 'exec', name, 'iptables', op, 'INPUT', '-p', 'tcp', '--dport', String(ENGINE_PORT), '-j', 'REJECT', '--reject-with', 'tcp-reset']);

  before(async () => {
    t = await startTestService();
    token = (await t.user('alice')).token;
    const res = await t.api('POST', '/api/sandboxes', token, { name: `refused-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
  });
  after(async () => t?.close());

  it('answers 503 SVC_BUSY with Retry-After while refused, 200 once it answers again', async () => {
    assert.equal((await t.api('GET', `/api/sandboxes/${name}/containers`, token)).status, 200);
    await firewall('-I');
    try {
      for (const path of ['containers', 'logs?tail=5']) {
        const res = await fetch(`${t.url}/api/sandboxes/${name}/${path}`, { headers: { authorization: `Bearer ${token}` } });
        const body = await res.json() as { error?: { code: string; message: string } };
        assert.equal(res.status, 503, `${path}: ${JSON.stringify(body)}`);
        assert.equal(body.error?.code, 'SVC_BUSY');
        assert.match(body.error?.message ?? '', /try again/);
        assert.doesNotMatch(body.error?.message ?? '', /\d+\.\d+\.\d+\.\d+|ECONN/, 'no address or errno in the answer');
        assert.equal(res.headers.get('retry-after'), '5');
      }
    } finally {
      await firewall('-D');
    }
    const again = await t.api('GET', `/api/sandboxes/${name}/containers`, token);
    assert.equal(again.status, 200, answerOf(again));
  });
});
