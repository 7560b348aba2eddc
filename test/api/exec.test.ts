import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { OUTPUT_LIMIT } from '../../exec/index.ts';
import { curl } from '../helpers/curl.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);

/** POST exec and exec/stream with the real curl against a real sandbox. */
describe('exec API', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let limited: string;
  let name: string;
  let bobs: string;

  const exec = async (token: string | undefined, body: unknown, sandbox = name) => {
    const res = await curl(`${t.url}/api/sandboxes/${sandbox}/exec`, { token, json: body });
    return { status: res.status, body: JSON.parse(res.body) };
  };
  const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    bob = await t.user('bob');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `exec-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    limited = await t.limitedToken(alice.id, name);
    const other = await t.api('POST', '/api/sandboxes', bob.token, { name: `exb-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(other.status, 201, answerOf(other));
    bobs = other.body.name;
  });
  after(async () => t?.close());

  it('runs argv and shell strings as root in /root, stdout and stderr apart, exit codes passed through', async () => {
    const argv = await exec(limited, { command: ['sh', '-c', 'id -u; pwd; echo oops >&2; exit 3'] });
    assert.equal(argv.status, 200, answerOf(argv));
    assert.deepEqual({ ...argv.body, duration_ms: 0 }, { exit_code: 3, stdout: '0\n/root\n', stderr: 'oops\n', truncated: false, timed_out: false, woke: false, duration_ms: 0 });
    const shell = await exec(limited, { command: 'tr a-z A-Z | tee /root/shout.txt', stdin: 'héllo\n' });
    assert.equal(shell.body.exit_code, 0);
    assert.equal(shell.body.stdout, 'HéLLO\n');
    assert.equal(await inSandbox('cat /root/shout.txt'), 'HéLLO\n');
    const missing = await exec(limited, { command: ['no-such-command'] });
    assert.equal(missing.body.exit_code, 127);
  });

  it('cuts long output at the bound and says so; the command still runs to its end', async () => {
    const res = await exec(alice.token, { command: `head -c ${OUTPUT_LIMIT + 4096} /dev/zero | tr '\\0' a; echo done >&2; echo end > /root/end.txt` });
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(res.body.stdout.length, OUTPUT_LIMIT);
    assert.equal(res.body.truncated, true);
    assert.equal(res.body.stderr, 'done\n');
    assert.equal(await inSandbox('cat /root/end.txt'), 'end\n');
  });

  it('kills a command at its timeout, with the processes it started', async () => {
    const res = await exec(alice.token, { command: 'sleep 300 & echo $! > /root/bg.pid; echo started; wait', timeout: 1 });
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(res.body.timed_out, true);
    assert.equal(res.body.exit_code, 124);
    assert.equal(res.body.stdout, 'started\n');
    assert.ok(res.body.duration_ms < 10_000, `answered after ${res.body.duration_ms} ms`);
    assert.equal((await inSandbox('kill -0 "$(cat /root/bg.pid)" 2>/dev/null && echo alive || echo gone')).trim(), 'gone');
    const quick = await exec(alice.token, { command: 'exit 124', timeout: 5 });
    assert.equal(quick.body.timed_out, false, 'a command that exits 124 by itself did not time out');
  });

  it('keeps a limited token in its sandbox and other users out', async () => {
    assert.equal((await exec(limited, { command: 'true' }, bobs)).status, 404);
    assert.equal((await exec(alice.token, { command: 'true' }, bobs)).body.error.code, 'SVC_SANDBOX_NOT_FOUND');
    assert.equal((await exec(bob.token, { command: 'touch /root/bob-was-here' })).status, 404);
    assert.equal((await exec(undefined, { command: 'true' })).status, 401);
    assert.equal((await inSandbox('test -e /root/bob-was-here && echo yes || echo no')).trim(), 'no');
  });

  it('refuses bad input with a message that says what to send', async () => {
    for (const body of [{}, { command: '' }, { command: [] }, { command: 'true', timeout: 0 }, { command: 'true', timeout: 99_999 }, { command: 'true', cwd: '/' }]) {
      const res = await exec(alice.token, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.error.code, 'SVC_BAD_REQUEST');
    }
  });

  it('streams long output as NDJSON, both streams, then the exit code', async () => {
    const size = 5 * 1024 * 1024;
    const res = await curl(`${t.url}/api/sandboxes/${name}/exec/stream`, {
      token: limited,
      json: { command: `echo first; echo warn >&2; head -c ${size} /dev/zero | tr '\\0' b; exit 5` },
      args: ['-N'],
    });
    assert.equal(res.status, 200);
    const lines = res.body.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    const text = (stream: string) => lines.filter((l) => l.stream === stream).map((l) => l.data).join('');
    assert.equal(text('stdout'), `first\n${'b'.repeat(size)}`);
    assert.equal(text('stderr'), 'warn\n');
    assert.equal(lines.at(-1).exit_code, 5);
    assert.equal(lines.at(-1).timed_out, false);
    assert.ok(lines.length > 3, 'the output came in several lines');
  });

  it('wakes an asleep sandbox to run the command', async () => {
    await t.service.lifecycle.sleep(name, 'test');
    assert.equal((await t.service.lifecycle.status(name)).status, 'exited');
    const res = await exec(limited, { command: 'cat /root/shout.txt' });
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(res.body.woke, true);
    assert.equal(res.body.stdout, 'HéLLO\n');
    assert.equal((await t.service.lifecycle.status(name)).status, 'running');
  });
});
