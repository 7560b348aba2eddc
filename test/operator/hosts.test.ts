import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { openStore } from '../../store/index.ts';
import { svcCli } from '../helpers/svc-cli.ts';
import { tempDir, TEST_SECRET_KEY_FILE } from '../store/helpers.ts';

/**
 * `svc hosts …` on one machine's Docker engine (operator/host-commands.ts, lifecycle/runtime/one-machine-hosts.ts):
 * the machine listed with its figures from the real sandbox engine; every command that would move
 * something refused with where to grow, nothing written to the audit log; `svc hosts add` answered
 * whatever options the old runner.sh line carried.
 */
describe('svc hosts on one machine', () => {
  const tmp = tempDir('svc-hosts-');
  const config = { dataDir: path.join(tmp.dir, 'data'), secretKeyFile: TEST_SECRET_KEY_FILE, storeTable: loadConfig({}).storeTable, redisPrefix: `svch${randomBytes(3).toString('hex')}` };
  after(() => tmp.remove());

  it('lists this machine with its memory, cores and networks, ready', async () => {
    const listed = await svcCli(config, 'hosts', 'list', '--json');
    assert.equal(listed.code, 0, listed.stderr);
    const rows = JSON.parse(listed.stdout) as Array<{ name: string; address: string; state: string; sandboxes: number; running: number; memory: { total_bytes: number }; cpus: { total: number }; networks: number }>;
    assert.equal(rows.length, 1);
    const [machine] = rows;
    assert.deepEqual([machine!.name, machine!.address, machine!.state, machine!.sandboxes, machine!.running], [os.hostname(), '(this machine)', 'ready', 0, 0]);
    assert.equal(machine!.memory.total_bytes, os.totalmem());
    assert.equal(machine!.cpus.total, os.availableParallelism());
    assert.equal(machine!.networks, 4096, 'the sandbox engine cuts its /16 in /28s');
    const table = await svcCli(config, 'hosts', 'list');
    assert.match(table.stdout, new RegExp(`^${os.hostname()} +ready +0 of 4096 +0 .*\\(this machine\\)$`, 'm'));
  });

  it('refuses drain, undrain, move, evacuate and remove with where to grow, and changes nothing', async () => {
    for (const args of [['drain', os.hostname()], ['undrain', os.hostname()], ['move', 'svc-any'], ['evacuate', os.hostname()], ['remove', os.hostname()]]) {
      const r = await svcCli(config, 'hosts', ...args);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, new RegExp(`^svc: svc hosts ${args[0]}: this service runs its sandboxes on one machine's Docker engine; .*\\. Nothing was changed; to run sandboxes on several machines, put them on an Incus cluster \\(SVC_RUNTIME=incus\\): docs/scale-out\\.md, "From one machine to a cluster"\\n$`));
      assert.equal(r.stdout, '');
    }
    const store = await openStore(`sqlite://${path.join(config.dataDir, 'svc.sqlite')}`, { secretKeyFile: TEST_SECRET_KEY_FILE });
    try {
      assert.deepEqual((await store.audit.query({})).rows, [], 'no audit row: nothing was done');
    } finally {
      await store.close();
    }
  });

  it('answers svc hosts add, as a runner printed it, with how machines join now', async () => {
    const r = await svcCli(config, 'hosts', 'add', 'runner-1', '10.0.0.2', '--pool', '10.220.0.0/16', '--csr', '-', '--certs-out', path.join(tmp.dir, 'certs'));
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^svc: "svc hosts add" is gone: this release runs no runner hosts\. .*"incus cluster add" \(docs\/scale-out\.md, "From one machine to a cluster"\)\. Nothing was changed\n$/);
  });
});
