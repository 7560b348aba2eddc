import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { scanLayer } from '../../scanner/layer-reader.ts';
import { LayerThreads } from '../../scanner/layer-threads.ts';
import { parseRules } from '../../scanner/operator-rules.ts';
import { builtInRules } from '../../scanner/rule-set.ts';
import { gzip, makeTar, privateKeyPem, sha256 } from '../../harness/oci.ts';

const RULES = `
[[rules]]
id = "acme-session"
regex = '''acmesess_[a-z0-9]{24}'''
keywords = ["acmesess_"]
`;

/** `blob` as a stream of `size`-byte chunks, as the upstream hands a layer over. */
const chunked = (blob: Buffer, size = 1000) => Readable.from(Array.from({ length: Math.ceil(blob.length / size) }, (_, i) => blob.subarray(i * size, (i + 1) * size)));
const summary = (r: Awaited<ReturnType<typeof scanLayer>>) => ({ state: r.state, reason: r.reason, findings: r.findings, bytes: r.bytes, entries: r.entries });

describe('layer scans in worker threads', () => {
  const threads = new LayerThreads(1, undefined);
  after(() => threads.close());

  it('gives what a scan on this thread gives, for layers queued behind each other on one thread', async () => {
    const layers = await Promise.all([
      [{ path: 'app/config.py', content: `API_TOKEN = "Zq8vN3xK7pL2mR9tW4yB6cD1"\n` }, { path: 'srv/id_rsa', content: privateKeyPem() }],
      [{ path: 'etc/motd', content: 'hello' }],
      [{ path: 'a/../../etc/shadow', content: 'x' }],
    ].map(async (files) => gzip(await makeTar(files))));
    const rules = builtInRules();
    const off = await Promise.all(layers.map((blob) => threads.scan(chunked(blob), { digest: sha256(blob) })));
    const on = await Promise.all(layers.map((blob) => scanLayer(chunked(blob), { digest: sha256(blob), rules })));
    assert.deepEqual(off.map(summary), on.map(summary));
    assert.deepEqual(off.map((r) => r.state), ['flagged', 'clean', 'unscannable']);
  });

  it('rejects with the source\'s own error when the upstream fails mid-layer, and scans the next layer', async () => {
    const blob = gzip(await makeTar([{ path: 'big', content: Buffer.alloc(4 * 1024 * 1024, 'a') }]));
    const failing = new Readable({ read() {} });
    failing.push(blob.subarray(0, 100_000));
    setImmediate(() => failing.destroy(new Error('upstream went away')));
    await assert.rejects(threads.scan(failing, { digest: sha256(blob) }), /upstream went away/);
    const next = gzip(await makeTar([{ path: 'ok.txt', content: 'fine' }]));
    assert.equal((await threads.scan(chunked(next), { digest: sha256(next) })).state, 'clean');
  });

  it('runs an operator\'s rules in the thread', async () => {
    const custom = new LayerThreads(1, RULES);
    try {
      const blob = gzip(await makeTar([{ path: 'srv/session', content: 'acmesess_q8vn3xk7pl2mr9tw4yb6cd1z\n' }]));
      const r = await custom.scan(chunked(blob), { digest: sha256(blob) });
      assert.deepEqual(r.findings.map((f) => [f.path, f.rule]), [['srv/session', 'acme-session']]);
      assert.equal(parseRules(RULES).source, RULES);
    } finally {
      await custom.close();
    }
  });
});
