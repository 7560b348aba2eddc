import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, it } from 'node:test';
import { TransferPipes } from '../../files/index.ts';
import { tempDir } from '../store/helpers.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

const tmp = tempDir('svc-scale-pipes-');
after(() => tmp.remove());

it('a second process starting on the same transfer folder leaves the first one\'s pipes alone, and clears those of processes that are gone', async () => {
  const root = path.join(tmp.dir, 'transfer');
  const folder = path.join(root, 'svc-shared');
  fs.mkdirSync(folder, { recursive: true });
  const gone = path.join(folder, 'p999999999'); // no such process
  fs.mkdirSync(gone);
  fs.writeFileSync(path.join(gone, 'left.pipe'), '');
  const first = await TransferPipes.open(root);
  const pipe = await first.create('upload', { folder, mount: '/run/svc-transfer' });
  const onHost = path.join(folder, pipe.path.replace('/run/svc-transfer/', ''));
  try {
    assert.ok(fs.statSync(onHost).isFIFO(), 'the upload\'s pipe is in place');
    // another service process starts on the same folder (the same data folder, or its containers)
    const script = `const { TransferPipes } = await import(${JSON.stringify(path.join(ROOT, 'files/index.ts'))}); await (await TransferPipes.open(${JSON.stringify(root)})).close();`;
    await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT });
    assert.ok(fs.existsSync(onHost), 'the first process\'s upload still has its pipe');
    assert.equal(fs.existsSync(gone), false, 'a gone process\'s folder is cleared');
  } finally {
    await pipe.close();
    await first.close();
  }
});
