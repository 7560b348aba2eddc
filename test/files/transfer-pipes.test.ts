import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TransferPipes } from '../../files/transfer-pipes.ts';

/**
 * Issue 14, hole 2: the sandbox's root can remount its transfer folder and put a folder where a
 * pipe was; removing the pipe then failed, and the close that nobody awaited took the service down.
 */
/** Where the sandbox would see its transfer folder (the runtime reports it). */
const MOUNT = '/run/svc-transfer';

describe('transfer pipes', () => {
  let root: string;
  let pipes: TransferPipes;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-pipes-'));
    fs.mkdirSync(path.join(root, 'svc-x'));
    pipes = await TransferPipes.open(root);
  });
  after(async () => {
    await pipes?.close();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('closes without rejecting when the sandbox replaced its pipe by a folder', async () => {
    const pipe = await pipes.create('upload', { folder: path.join(root, 'svc-x'), mount: MOUNT });
    const shared = path.join(root, 'svc-x', path.relative(MOUNT, pipe.path));
    assert.ok(fs.statSync(shared).isFIFO());
    fs.rmSync(shared);
    fs.mkdirSync(shared);
    fs.writeFileSync(path.join(shared, 'planted'), 'x');
    await pipe.close();
    assert.ok(pipe.stream.destroyed);
  });

  it('removes its pipe on close', async () => {
    const pipe = await pipes.create('download', { folder: path.join(root, 'svc-x'), mount: MOUNT });
    const shared = path.join(root, 'svc-x', path.relative(MOUNT, pipe.path));
    await pipe.close();
    assert.equal(fs.existsSync(shared), false);
  });
});
