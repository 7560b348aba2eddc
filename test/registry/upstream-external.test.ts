import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { logger } from '../../core/logger.ts';
import { externalUpstream } from '../../registry/index.ts';

describe("an operator's registry upstream", () => {
  it('is refused with credentials in its URL, which no message repeats', async () => {
    await assert.rejects(externalUpstream('http://svc:hunter2-secret@127.0.0.1:1/', logger), (err: Error) => {
      assert.ok(!err.message.includes('hunter2-secret'), 'the password is not in the message');
      assert.match(err.message, /SVC_REGISTRY_UPSTREAM carries a user name or password/);
      return true;
    });
  });
});
