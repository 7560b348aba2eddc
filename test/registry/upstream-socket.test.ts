import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { logger } from '../../core/logger.ts';
import { spawnUpstream, type Upstream } from '../../registry/index.ts';
import { eventually } from '../../harness/service.ts';

function run(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 20_000 }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

/** Pids whose command line names this file (the registry is started as `docker-registry serve <config>`). */
function pidsWithArg(arg: string): number[] {
  return fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes(arg);
    } catch {
      return false; // gone meanwhile
    }
  }).map(Number);
}

/** Pids holding a listening TCP socket, as `ss` reports them. */
async function tcpListenerPids(): Promise<Set<number>> {
  const r = await run('ss', ['-H', '-ltnp']);
  assert.equal(r.code, 0, r.stderr);
  return new Set([...r.stdout.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1])));
}

/**
 * The spawned upstream registry has no auth of its own: only the front may reach it. It listens
 * on a unix socket in a 0700 folder and on no TCP port.
 */
describe('the spawned upstream registry (unix socket only)', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-upstream-'));
  const configFile = path.join(dataDir, 'registry', 'config.yml');
  let upstream: Upstream;

  before(async () => {
    upstream = await spawnUpstream(dataDir, logger);
    // Folders above the socket as open as an operator might leave them: only the socket's own folder guards it.
    fs.chmodSync(dataDir, 0o755);
    fs.chmodSync(path.join(dataDir, 'registry'), 0o755);
  });
  after(async () => {
    await upstream?.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers the front over its socket, in a 0700 folder', async () => {
    assert.equal(upstream.socketPath, path.join(dataDir, 'registry', 'socket', 'registry.sock'));
    assert.ok(fs.statSync(upstream.socketPath).isSocket());
    assert.equal(fs.statSync(path.dirname(upstream.socketPath)).mode & 0o777, 0o700);
    const res = await upstream.fetch('/v2/');
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    const asRoot = await run('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code}', '--unix-socket', upstream.socketPath, 'http://localhost/v2/']);
    assert.equal(asRoot.stdout, '200', asRoot.stderr);
  });

  it('cannot be reached by a process running as nobody', async () => {
    const asNobody = await run('runuser', ['-u', 'nobody', '--', 'curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', '--unix-socket', upstream.socketPath!, 'http://localhost/v2/']);
    assert.notEqual(asNobody.code, 0);
    assert.match(asNobody.stderr, /Permission denied|Couldn't connect/);
    assert.notEqual(asNobody.stdout, '200');
  });

  it('listens on no TCP port', async () => {
    const [pid] = pidsWithArg(configFile);
    assert.ok(pid, 'the registry process is found');
    // The check sees listeners: this process's own one is listed.
    const probe = net.createServer().listen(0, '127.0.0.1');
    await new Promise((r) => probe.once('listening', r));
    try {
      const listeners = await tcpListenerPids();
      assert.ok(listeners.has(process.pid), 'ss lists this process as a listener');
      assert.ok(!listeners.has(pid), 'the registry holds no listening TCP socket');
    } finally {
      probe.close();
    }
  });

  it('comes back after a kill, though the killed one left its socket file behind', async () => {
    const [pid] = pidsWithArg(configFile);
    process.kill(pid!, 'SIGKILL');
    await eventually(async () => !fs.existsSync(`/proc/${pid}`) || fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'), 'the registry to die');
    assert.ok(fs.existsSync(upstream.socketPath!), 'a killed registry leaves its socket');
    const status = await eventually(async () => {
      const res = await upstream.fetch('/v2/', { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      return res.status === 200 && pidsWithArg(configFile).some((p) => p !== pid) ? res.status : null;
    }, 'the restarted registry to answer', 30_000);
    assert.equal(status, 200);
  });
});
