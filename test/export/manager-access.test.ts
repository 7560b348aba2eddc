import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { managerNotIncluded } from '../../export/index.ts';
import type { SandboxRecord } from '../../store/records.ts';

const record = (extra: Partial<SandboxRecord> = {}): SandboxRecord => ({
  name: 'svc-shop', owner_id: 'u1', template: 'default', idle_timeout: '30m', deep_sleep_after: '7d', created_at: '2026-01-01T00:00:00.000Z', ...extra,
});

describe('the export line of a manager not included', () => {
  it('says a manager sandbox exported without reaching it has a tool, and where to export it with its values', async () => {
    const access = await managerNotIncluded(record({ template: 'manager', manager_password: 'secret-of-the-tool' }), {});
    assert.ok('reason' in access);
    assert.match(access.reason, /management tool; export through the API .*GET \/api\/sandboxes\/svc-shop\/export/);
    assert.ok(!access.reason.includes('secret-of-the-tool'), 'never the password');
  });

  it('says a sandbox without a tool has none', async () => {
    assert.deepEqual(await managerNotIncluded(record(), {}), { reason: 'this sandbox has no management tool' });
  });
});
