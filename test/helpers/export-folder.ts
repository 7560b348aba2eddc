import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { TestService } from '../../harness/service.ts';

const run = promisify(execFile);

/**
 * A sandbox's export folder as its owner gets it: GET /api/sandboxes/<sandbox>/export saved as
 * <into>/export.zip and unzipped with unzip into `into`. Returns the folder (<into>/<sandbox>) and the
 * token its svc.env carries.
 */
export async function downloadExport(t: TestService, sandbox: string, token: string, into: string): Promise<{ folder: string; token: string }> {
  const zip = await fetch(`${t.url}/api/sandboxes/${sandbox}/export`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(zip.status, 200);
  const file = path.join(into, 'export.zip');
  fs.writeFileSync(file, Buffer.from(await zip.arrayBuffer()));
  await run('unzip', ['-q', file, '-d', into]);
  const folder = path.join(into, sandbox);
  const exported = /^SVC_TOKEN=(.*)$/m.exec(fs.readFileSync(path.join(folder, 'svc.env'), 'utf8'))?.[1];
  assert.ok(exported, 'svc.env carries a token');
  return { folder, token: exported };
}
