import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WebSocketServer } from 'ws';
import { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { incusRun } from '../../lifecycle/runtime/incus/incus-exec.ts';

/**
 * An exec whose output sockets Incus refuses (a 500 on the websocket's upgrade, as when the member that
 * runs the operation goes away) fails that one call, and nothing else: the cluster test saw such a
 * refusal become an uncaught exception of the whole process (the readers' own errors, unheard). A stand-in
 * for Incus on a unix socket: the exec operation, its control socket accepted, its data sockets refused.
 */
describe('Incus exec whose sockets are refused', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-incus-exec-'));
  const socketPath = path.join(dir, 'incus.sock');
  const server = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'POST' && req.url?.startsWith('/1.0/instances/s1/exec')) {
      const metadata = { id: 'op1', status: 'Running', status_code: 103, err: '', metadata: { fds: { control: 'c', 0: 'i', 1: 'o', 2: 'e' } } };
      return res.end(JSON.stringify({ type: 'async', status_code: 100, metadata, operation: '/1.0/operations/op1' }));
    }
    res.statusCode = 404;
    res.end(JSON.stringify({ type: 'error', error: 'not found', error_code: 404 }));
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    socket.on('error', () => undefined); // the stand-in's own side: the client may close first
    if (new URL(req.url ?? '', 'http://incus').searchParams.get('secret') === 'c') return wss.handleUpgrade(req, socket, head, (ws) => ws.on('error', () => undefined));
    socket.end('HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n');
  });
  const uncaught: unknown[] = [];
  const heard = (err: unknown) => { uncaught.push(err); };
  let client: IncusClient;

  before(async () => {
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    client = new IncusClient({ socketPath });
    process.on('uncaughtException', heard);
    process.on('unhandledRejection', heard);
  });
  after(async () => {
    process.off('uncaughtException', heard);
    process.off('unhandledRejection', heard);
    await client?.close();
    wss.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('rejects the call with the refusal, and leaves no error unheard', async () => {
    await assert.rejects(incusRun(client, 's1', ['true']), /Unexpected server response: 500/);
    // the readers' errors come a tick or two later, if at all
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(uncaught.map(String), []);
  });
});
