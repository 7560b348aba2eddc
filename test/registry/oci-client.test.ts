import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, beforeEach, describe, it } from 'node:test';
import { OciClient } from '../../harness/oci.ts';

/**
 * The test registry client against a stand-in HTTPS server that closes a kept-alive connection
 * as the next request arrives on it, as the edge does when that request meets its idle close.
 */
describe('OciClient on a kept-alive connection the server just closed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oci-client-'));
  let server: https.Server;
  let client: OciClient;
  let ca: string;
  /** Requests the server saw, and how many of them it dropped. */
  let seen: string[] = [];
  let dropped = 0;

  before(async () => {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=registry.localhost',
      '-addext', 'subjectAltName=DNS:registry.localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' });
    ca = readFileSync(join(dir, 'cert.pem'), 'utf8');
    const served = new WeakMap<object, number>();
    server = https.createServer({ key: readFileSync(join(dir, 'key.pem')), cert: ca, keepAliveTimeout: 60_000 }, (req, res) => {
      const n = (served.get(req.socket) ?? 0) + 1;
      served.set(req.socket, n);
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push(`${req.method} ${req.url}${body ? ` ${body}` : ''}`);
        if (n === 2) {
          dropped++;
          return void req.socket.destroy(); // the second request on a connection meets its close
        }
        res.end('ok');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });

  beforeEach(() => {
    client = new OciClient({ port: (server.address() as AddressInfo).port, host: 'registry.localhost', ca });
    seen = [];
    dropped = 0;
  });

  after(() => {
    client.close();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends a GET again once on a new connection', async () => {
    assert.equal((await client.request('GET', '/v2/')).status, 200);
    const r = await client.request('GET', '/v2/a/tags/list');
    assert.equal(r.status, 200);
    assert.equal(r.body.toString(), 'ok');
    assert.deepEqual(seen, ['GET /v2/', 'GET /v2/a/tags/list', 'GET /v2/a/tags/list']);
    assert.equal(dropped, 1);
    client.close();
  });

  it('sends a PUT with a buffered body again, with the same bytes', async () => {
    await client.request('GET', '/v2/');
    const r = await client.request('PUT', '/v2/a/manifests/1', { body: Buffer.from('{}'), headers: { 'content-length': '2' } });
    assert.equal(r.status, 200);
    assert.deepEqual(seen, ['GET /v2/', 'PUT /v2/a/manifests/1 {}', 'PUT /v2/a/manifests/1 {}']);
    assert.equal(dropped, 1);
    client.close();
  });

  it('does not send again a POST, nor a body it cannot read twice', async () => {
    await client.request('GET', '/v2/');
    await assert.rejects(client.request('POST', '/v2/a/blobs/uploads/', { headers: { 'content-length': '0' } }), { code: 'ECONNRESET' });
    await client.request('GET', '/v2/');
    await assert.rejects(client.request('PUT', '/v2/a/blobs/x', { body: Readable.from([Buffer.from('abc')]), headers: { 'content-length': '3' } }), { code: 'ECONNRESET' });
    assert.equal(dropped, 2);
    client.close();
  });
});
