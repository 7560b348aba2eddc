import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { EngineCli } from '../../harness/engine-cli.ts';

const run = promisify(execFile);

/** The MCP tools at /api/mcp, driven by the SDK's own client against a real sandbox. */
describe('MCP tools', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let name: string;
  let agent: Client;
  const clients: Client[] = [];

  const connect = async (token: string | undefined) => {
    const client = new Client({ name: 'test-agent', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${t.url}/api/mcp`), {
      requestInit: { headers: token ? { authorization: `Bearer ${token}` } : {} },
    });
    await client.connect(transport);
    clients.push(client);
    return client;
  };
  /** A tool's JSON result as `value`, or its error text as `error` ('' when it succeeded). */
  const call = async (client: Client, tool: string, args: Record<string, unknown> = {}): Promise<{ value: any; error: string }> => {
    const res = await client.callTool({ name: tool, arguments: args });
    const text = (res.content as Array<{ type: string; text: string }>)[0]!.text;
    return res.isError ? { value: undefined, error: text } : { value: JSON.parse(text), error: '' };
  };
  const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `mcp-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    agent = await connect(await t.limitedToken(alice.id, name));
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await t?.close();
  });

  it('refuses a client without a valid token', async () => {
    await assert.rejects(connect(undefined), /401|Unauthorized|SVC_UNAUTHENTICATED/i);
    await assert.rejects(connect('svc_not-a-token'), /401|Unauthorized|SVC_UNAUTHENTICATED/i);
  });

  it('lists the tools', async () => {
    const { tools } = await agent.listTools();
    assert.deepEqual(tools.map((x) => x.name).sort(), [
      'create_sandbox_folder', 'delete_sandbox_file', 'fork_sandbox', 'get_sandbox_status', 'keep_sandbox_awake', 'list_sandbox_files', 'list_sandbox_volumes',
      'list_sandboxes', 'read_sandbox_file', 'read_sandbox_logs', 'run_sandbox_command', 'start_sandbox', 'write_sandbox_file',
    ]);
    assert.ok(tools.every((x) => x.description && x.inputSchema));
  });

  it('shows the limited token its one sandbox, without engine keys', async () => {
    const list = await call(agent, 'list_sandboxes');
    assert.deepEqual(list.value.map((s: { name: string }) => s.name), [name]);
    const got = await call(agent, 'get_sandbox_status');
    assert.equal(got.value.name, name);
    assert.equal(got.value.status, 'running');
    assert.equal(got.value.client_key, undefined);
    assert.ok((await call(agent, 'keep_sandbox_awake', { sandbox: name })).value.stops_at);
  });

  it('does file work with the same rules as the routes', async () => {
    assert.deepEqual((await call(agent, 'create_sandbox_folder', { path: '/srv/site' })).value, { path: '/srv/site' });
    assert.deepEqual((await call(agent, 'write_sandbox_file', { path: '/srv/site/index.html', text: '<h1>héllo</h1>\n' })).value, { path: '/srv/site/index.html', size: 16 });
    assert.equal((await inSandbox('stat -c "%U %a" /srv/site/index.html && cat /srv/site/index.html')), 'root 644\n<h1>héllo</h1>\n');
    const listing = (await call(agent, 'list_sandbox_files', { path: '/srv' })).value;
    assert.equal(listing.path, '/srv');
    assert.deepEqual(listing.entries.map((e: { name: string; type: string }) => [e.name, e.type]), [['site', 'dir']]);
    assert.deepEqual((await call(agent, 'read_sandbox_file', { path: '/srv/site/index.html' })).value, { path: '/srv/site/index.html', text: '<h1>héllo</h1>\n' });
    assert.deepEqual((await call(agent, 'delete_sandbox_file', { path: '/srv/site' })).value, { path: '/srv/site', deleted: true });
    assert.equal((await inSandbox('ls -A /srv')).trim(), '');
    // a volume of the sandbox's own engine: listed, and its path works with the file tools
    await inSandbox('docker volume create mcp-data >/dev/null');
    const volumes = (await call(agent, 'list_sandbox_volumes')).value as Array<{ name: string; path: string; project: string | null; containers: unknown[] }>;
    const volume = volumes.find((v) => v.name === 'mcp-data');
    assert.deepEqual(volume, { name: 'mcp-data', path: '/var/lib/docker/volumes/mcp-data/_data', project: null, containers: [] }, JSON.stringify(volumes));
    assert.deepEqual((await call(agent, 'write_sandbox_file', { path: `${volume!.path}/note.txt`, text: 'kept\n' })).value, { path: `${volume!.path}/note.txt`, size: 5 });
    const mountpoint = (await inSandbox("docker volume inspect mcp-data --format '{{.Mountpoint}}'")).trim();
    assert.equal(mountpoint, volume!.path, 'the engine mounts the volume from the listed path');
    assert.equal(await inSandbox(`cat ${mountpoint}/note.txt`), 'kept\n');
  });

  it('gives tool errors with the API\'s codes for bad input', async () => {
    await inSandbox('ln -sfn /etc /root/etc-link');
    assert.match((await call(agent, 'read_sandbox_file', { path: '/etc/passwd' })).error, /^SVC_PATH_NOT_ALLOWED/);
    assert.match((await call(agent, 'read_sandbox_file', { path: '/root/../etc/passwd' })).error, /^SVC_BAD_PATH/);
    assert.match((await call(agent, 'read_sandbox_file', { path: '/root/etc-link/passwd' })).error, /^SVC_PATH_ESCAPES/);
    assert.match((await call(agent, 'write_sandbox_file', { path: '/root/etc-link/evil', text: 'x' })).error, /^SVC_PATH_ESCAPES/);
    assert.match((await call(agent, 'write_sandbox_file', { path: '/root/a\nb', text: 'x' })).error, /^SVC_BAD_PATH/);
    assert.match((await call(agent, 'delete_sandbox_file', { path: '/root' })).error, /^SVC_TOP_FOLDER/);
    assert.equal((await inSandbox('test -e /etc/evil || echo absent')).trim(), 'absent');
    const bob = await t.user('bob');
    const other = await connect(bob.token);
    assert.match((await call(other, 'list_sandbox_files', { sandbox: name })).error, /^SVC_SANDBOX_NOT_FOUND/);
    assert.match((await call(other, 'list_sandbox_files', {})).error, /^SVC_BAD_REQUEST: name the sandbox/);
  });

  it('runs commands with exit codes, both streams, input and a timeout; other users get not found', async () => {
    const ran = (await call(agent, 'run_sandbox_command', { command: 'cat; echo to-err >&2; exit 7', stdin: 'from stdin\n' })).value;
    assert.deepEqual([ran.exit_code, ran.stdout, ran.stderr, ran.truncated, ran.timed_out], [7, 'from stdin\n', 'to-err\n', false, false]);
    assert.equal((await call(agent, 'run_sandbox_command', { command: ['printf', '%s|', 'a b', 'c'] })).value.stdout, 'a b|c|');
    const slow = (await call(agent, 'run_sandbox_command', { command: 'sleep 60', timeout: 1 })).value;
    assert.deepEqual([slow.exit_code, slow.timed_out], [124, true]);
    const carol = await t.user('carol');
    const other = await connect(carol.token);
    assert.match((await call(other, 'run_sandbox_command', { sandbox: name, command: 'touch /root/carol' })).error, /^SVC_SANDBOX_NOT_FOUND/);
    assert.equal((await inSandbox('test -e /root/carol && echo yes || echo no')).trim(), 'no');
  });

  it('reads the last log lines of the sandbox\'s apps', async () => {
    const view = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
    const cli = new EngineCli(view.engine_access.host, (await t.service.lifecycle.status(name)).address!, 2376, view);
    try {
      await cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
      await cli.docker(['run', '--name', 'shop-web-1', '--label', 'com.docker.compose.project=shop', '--label', 'com.docker.compose.service=web',
        'busybox-app', 'sh', '-c', 'for i in 1 2 3 4 5; do echo "line $i"; done; sleep 0.5; echo failed >&2']);
    } finally {
      cli.dispose();
    }
    const lines = (await call(agent, 'read_sandbox_logs', { tail: 3 })).value;
    assert.deepEqual(lines.map((l: { line: string; stream: string }) => [l.stream, l.line]), [['stdout', 'line 4'], ['stdout', 'line 5'], ['stderr', 'failed']]);
    assert.deepEqual([lines[0].container, lines[0].service, lines[0].project], ['shop-web-1', 'web', 'shop']);
    assert.equal((await call(agent, 'read_sandbox_logs', { container: 'no-such' })).value.length, 0);
  });

  it('runs a session across sleep: asleep is an error that says to start it, start_sandbox wakes it', async () => {
    await call(agent, 'write_sandbox_file', { path: 'notes.txt', text: 'kept over sleep' });
    await t.service.lifecycle.sleep(name, 'test');
    assert.match((await call(agent, 'read_sandbox_file', { path: 'notes.txt' })).error, /^SVC_SANDBOX_NOT_RUNNING: .*asleep: start it first/);
    const started = await call(agent, 'start_sandbox');
    assert.equal(started.value.status, 'running');
    assert.equal((await call(agent, 'read_sandbox_file', { path: 'notes.txt' })).value.text, 'kept over sleep');
  });
});
