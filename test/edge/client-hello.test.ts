import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { test } from 'node:test';
import { parseClientHello } from '../../edge/listener/client-hello.ts';

/** Captures the first bytes a real TLS client (Node's OpenSSL) sends. */
async function captureHello(opts: tls.ConnectionOptions): Promise<Buffer> {
  let got: (b: Buffer) => void;
  const captured = new Promise<Buffer>((r) => (got = r));
  const server = net.createServer((s) => {
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => {
      chunks.push(c);
      const all = Buffer.concat(chunks);
      if (parseClientHello(all).status !== 'incomplete') {
        got(all);
        s.destroy();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  const c = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...opts });
  c.on('error', () => {});
  const hello = await captured;
  c.destroy();
  server.close();
  return hello;
}

test('reads SNI and ALPN from a real ClientHello', async () => {
  const hello = await captureHello({ servername: 'svc-foo-web.localhost', ALPNProtocols: ['h2', 'http/1.1'] });
  const r = parseClientHello(hello);
  assert.deepEqual(r, { status: 'ok', serverName: 'svc-foo-web.localhost', alpn: ['h2', 'http/1.1'] });
});

test('a ClientHello without SNI parses with a null name', async () => {
  const hello = await captureHello({}); // connecting by IP: no SNI
  const r = parseClientHello(hello);
  assert.equal(r.status, 'ok');
  assert.equal(r.status === 'ok' && r.serverName, null);
});

test('every cut of the ClientHello is incomplete until the last byte', async () => {
  const hello = await captureHello({ servername: 'a.localhost' });
  for (let i = 0; i < hello.length; i++) {
    assert.equal(parseClientHello(hello.subarray(0, i)).status, 'incomplete', `cut at ${i}`);
  }
  assert.equal(parseClientHello(hello).status, 'ok');
});

test('a ClientHello split over two TLS records is reassembled', async () => {
  const hello = await captureHello({ servername: 'split.localhost' });
  const body = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const cut = 40;
  const rec = (b: Buffer) => Buffer.concat([Buffer.from([0x16, 0x03, 0x01, b.length >> 8, b.length & 0xff]), b]);
  const two = Buffer.concat([rec(body.subarray(0, cut)), rec(body.subarray(cut))]);
  assert.deepEqual(parseClientHello(two), { status: 'ok', serverName: 'split.localhost', alpn: [] });
  assert.equal(parseClientHello(two.subarray(0, 5 + cut + 3)).status, 'incomplete');
});

test('garbage is not TLS', () => {
  assert.equal(parseClientHello(Buffer.from('GET / HTTP/1.1\r\n')).status, 'not-tls');
  assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 0x02, 0, 0, 1, 0])).status, 'not-tls'); // ServerHello
  assert.equal(parseClientHello(Buffer.from([0x16, 0x09, 0x01, 0x00, 0x05])).status, 'not-tls');
  assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff])).status, 'not-tls'); // record too long
  assert.equal(parseClientHello(Buffer.from([0x80, 0x2e, 0x01])).status, 'not-tls'); // SSLv2
  // A ClientHello whose extension overruns the message.
  const bad = Buffer.from([0x16, 0x03, 0x01, 0x00, 0x2c, 0x01, 0x00, 0x00, 0x28, 0x03, 0x03, ...Buffer.alloc(32), 0x00, 0x00, 0x02, 0x13, 0x01, 0x01, 0x00, 0x00, 0x10]);
  assert.equal(parseClientHello(bad).status, 'not-tls');
});
