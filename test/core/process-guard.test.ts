import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * Issue 14, hole 2: one forgotten promise (a transfer pipe the sandbox replaced by a folder)
 * rejected unowned and Node ended the process — the service for every tenant. A real process
 * with the guard main.ts installs keeps serving after such a rejection.
 */
describe('process guard', () => {
  it('logs an unhandled rejection and keeps serving', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-guard-'));
    const script = path.join(dir, 'serve.ts');
    fs.writeFileSync(script, `
      import http from 'node:http';
      import { logger } from ${JSON.stringify(path.resolve('core/logger.ts'))};
      import { guardProcess } from ${JSON.stringify(path.resolve('core/process-guard.ts'))};
      guardProcess(logger);
      const server = http.createServer((_req, res) => res.end('still serving')).listen(0, '127.0.0.1', () => {
        void Promise.reject(new Error('a tenant broke something'));
        setTimeout(async () => {
          const port = (server.address() as { port: number }).port;
          console.log(await (await fetch('http://127.0.0.1:' + port + '/')).text());
          server.close();
        }, 200);
      });
    `);
    try {
      const { stdout } = await run(path.resolve('node_modules/.bin/tsx'), [script], { env: { ...process.env, LOG_LEVEL: 'error' }, timeout: 60_000 });
      assert.match(stdout, /unhandled promise rejection; still serving/);
      assert.match(stdout, /a tenant broke something/);
      assert.match(stdout, /^still serving$/m);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
