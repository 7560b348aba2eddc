import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { writeHostFiles } from '../../operator/hosts.ts';

/** `svc hosts add --certs-out DIR` (operator/hosts.ts): what it leaves on disk. */
describe('host files', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-host-files-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes the key 0600 and the certificates 0644, also over files a first run left with other modes', async () => {
    const out = path.join(dir, 'runner-certs');
    fs.mkdirSync(out);
    fs.writeFileSync(path.join(out, 'key.pem'), 'old', { mode: 0o644 });
    await writeHostFiles(out, { 'ca.pem': 'ca', 'cert.pem': 'cert', 'key.pem': 'key' });
    const mode = (file: string) => fs.statSync(path.join(out, file)).mode & 0o777;
    assert.equal(mode('key.pem'), 0o600);
    assert.equal(fs.readFileSync(path.join(out, 'key.pem'), 'utf8'), 'key');
    assert.equal(mode('cert.pem'), 0o644);
    await writeHostFiles(path.join(dir, 'fresh'), { 'key.pem': 'key' });
    assert.equal(fs.statSync(path.join(dir, 'fresh')).mode & 0o777, 0o700);
    assert.equal(mode('../fresh/key.pem'), 0o600);
  });
});
