import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { it } from 'node:test';
import { sha256, type OnCluster } from './cluster-clients.ts';
import { incusClient } from './endpoint.ts';

/**
 * The files API when Incus's exec fails while the sandbox runs (docs/incus.md): the upload's command
 * refused by the engine answers the files API's retryable error, not a 500.
 */
export function filesOnCluster(c: OnCluster): void {
  it('an upload whose exec Incus refuses while the sandbox runs (frozen, as a fork\'s snapshot leaves it) answers 502 SVC_FILE_OPERATION_FAILED "try again"; the same upload then works', async () => {
    const { user } = c;
    const a = c.sandboxes[0]!;
    const incus = incusClient();
    const bytes = randomBytes(64 * 1024);
    await incus.act('PUT', `/1.0/instances/${encodeURIComponent(a.name)}/state`, { action: 'freeze', timeout: 30 });
    try {
      // Incus's exec answers `Instance is frozen` (an IncusError): it was a 500 SVC_INTERNAL
      await assert.rejects(user.upload(a.name, '/root/frozen.bin', bytes), (err: Error) => {
        assert.match(err.message, /: 502 .*"code":"SVC_FILE_OPERATION_FAILED".*Instance is frozen; try again/);
        return true;
      });
    } finally {
      await incus.act('PUT', `/1.0/instances/${encodeURIComponent(a.name)}/state`, { action: 'unfreeze', timeout: 30 });
      await incus.close();
    }
    await user.upload(a.name, '/root/frozen.bin', bytes);
    assert.equal(sha256(await user.download(a.name, '/root/frozen.bin')), sha256(bytes));
  });
}
