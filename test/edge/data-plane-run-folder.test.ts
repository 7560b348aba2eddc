import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../harness/service.ts';

/**
 * HAProxy's private run folder (edge/dataplane/run-folder.ts) does not outlive the service process
 * that made it: not when the process alone is killed (its reaper removes the folder), and not when
 * the reaper is killed with it (the next start removes it). Real processes, the real HAProxy; the
 * services run with a temporary folder of this test's own, so no one else's folders are judged.
 */
describe('the data plane\'s run folder', () => {
  let tmp: string;
  before(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dp-run-folder-test-'));
  });
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));

  /** A service process (an edge with HAProxy) on `tmp`; resolves once it printed its folder. */
  const startOwner = async (opts: { group: boolean }) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/edge/data-plane-run-folder-child.ts'], {
      env: { ...process.env, TMPDIR: tmp },
      stdio: ['ignore', 'pipe', 'inherit'],
      detached: opts.group, // a process group of its own, to kill it with everything it started
    });
    const info = await new Promise<{ dir: string; haproxy: number }>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!));
      });
      child.once('exit', (code) => reject(new Error(`the service process exited (${code}) before it printed its run folder`)));
    });
    return { child, ...info };
  };
  const exited = (child: ChildProcess) => new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r())));
  const gone = (pid: number) => {
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  };
  const runFolders = () => fs.readdirSync(tmp).filter((n) => n.startsWith('svc-dp-')).sort();

  it('a service process killed with SIGKILL leaves neither HAProxy nor its run folder', async () => {
    const owner = await startOwner({ group: false });
    assert.ok(fs.existsSync(path.join(owner.dir, 'admin.sock')), 'the folder holds HAProxy\'s admin socket');
    assert.equal(fs.statSync(owner.dir).mode & 0o777, 0o700);
    owner.child.kill('SIGKILL');
    await exited(owner.child);
    await eventually(async () => !fs.existsSync(owner.dir), 'the run folder removed', 10_000, 50);
    await eventually(async () => gone(owner.haproxy), 'HAProxy gone with its service', 10_000, 50);
  });

  it('a folder whose owner and reaper were killed together is removed at the next start; any other stays', async () => {
    const killed = await startOwner({ group: true });
    process.kill(-killed.child.pid!, 'SIGKILL'); // the service, its HAProxy and its reaper at once
    await exited(killed.child);
    await eventually(async () => gone(killed.haproxy), 'HAProxy gone', 10_000, 50);
    assert.ok(fs.existsSync(killed.dir), 'nothing was left to remove it');

    // folders the next start must not touch: one whose owner lives, one without an owner record,
    // one named otherwise, one that is a symbolic link to a folder of a dead owner
    const keep = (name: string, owner?: number) => {
      const dir = path.join(tmp, name);
      fs.mkdirSync(dir);
      if (owner !== undefined) fs.writeFileSync(path.join(dir, 'owner.pid'), `${owner}\n`);
      return name;
    };
    const kept = [keep('svc-dp-alive1', process.pid), keep('svc-dp-noown1'), keep('svc-dp-cert-abcdef', killed.child.pid!)];
    const target = fs.mkdtempSync(path.join(tmp, 'elsewhere-'));
    fs.writeFileSync(path.join(target, 'owner.pid'), `${killed.child.pid}\n`);
    fs.symlinkSync(target, path.join(tmp, 'svc-dp-link01'));
    kept.push('svc-dp-link01');

    const next = await startOwner({ group: false });
    try {
      assert.ok(!fs.existsSync(killed.dir), 'the dead owner\'s folder is gone');
      assert.deepEqual(runFolders(), [...kept, path.basename(next.dir)].sort());
      assert.ok(fs.existsSync(path.join(target, 'owner.pid')), 'a link is not followed');
    } finally {
      next.child.kill('SIGTERM');
      await exited(next.child);
    }
  });
});
