import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { removeInstance } from '../../harness/service.ts';
import { Peers } from '../../lifecycle/peers.ts';
import { createRedis } from '../../queue/index.ts';

/**
 * What a process joining others on one Redis prefix is told about the archive folder (the shapes it
 * refuses are checked with real processes in test/scale/process-shape.test.ts).
 */
describe('peers: the archive folder', () => {
  const prefix = `svct${randomBytes(3).toString('hex')}`;
  const redis = createRedis(loadConfig().redisUrl);
  const joined: Peers[] = [];
  const join = async (dataDir: string, archiveDir: string) => {
    const peers = new Peers(redis, prefix, { dataDir, archiveDir, storeUrl: 'postgres://svc@127.0.0.1/svc', registryUpstream: 'http://127.0.0.1:5000' });
    joined.push(peers);
    return peers.join();
  };
  after(async () => {
    for (const peers of joined) await peers.leave();
    redis.disconnect();
    await removeInstance(prefix);
  });

  it('warns a process whose archives go elsewhere than another process\'s, and names SVC_ARCHIVE_DIR; one shared folder is quiet', async () => {
    assert.deepEqual(await join('/srv/a', '/srv/a/archive'), [], 'the first process');
    const [warning, ...more] = await join('/srv/b', '/srv/b/archive');
    assert.match(warning ?? '', /writes the archives of deleted sandboxes to \/srv\/a\/archive, this one to \/srv\/b\/archive: .*set SVC_ARCHIVE_DIR to one folder all processes share/);
    assert.deepEqual(more, []);
    // the same folder as the first: only the second process's own folder is worth a word
    const third = await join('/srv/c', '/srv/a/archive');
    assert.equal(third.length, 1);
    assert.match(third[0]!, /to \/srv\/b\/archive, this one to \/srv\/a\/archive/);
  });
});
