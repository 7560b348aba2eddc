import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { scanText } from '../../scanner/content-scanner.ts';
import { scanLayer } from '../../scanner/layer-reader.ts';
import { builtInRules } from '../../scanner/rule-set.ts';

/**
 * The full rule set on the images this project builds (Debian trixie and bookworm root file
 * systems with docker, sshd and their libraries; the management tool's node image): no finding at
 * all, vendored or not. Each image comes from the host engine's `docker save`; every layer goes
 * through the layer reader as the registry would read it, and the config's Env and history too.
 */
const IMAGES = ['svc-sandbox:latest', 'svc-sandbox:bookworm', 'svc-manager:latest'];

describe('scan of the project\'s own images', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-scan-images-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  for (const image of IMAGES) {
    it(`finds nothing in ${image}`, async () => {
      const out = path.join(dir, image.replace(/[:/]/g, '-'));
      fs.mkdirSync(out);
      try {
        execFileSync('sh', ['-c', 'docker save "$1" | tar -x -C "$2"', 'sh', image, out], { stdio: ['ignore', 'ignore', 'pipe'] });
        const [manifest] = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8')) as Array<{ Config: string; Layers: string[] }>;
        const config = JSON.parse(fs.readFileSync(path.join(out, manifest!.Config), 'utf8')) as { rootfs: { diff_ids: string[] }; config?: { Env?: string[] }; history?: Array<{ created_by?: string }> };
        const findings: string[] = [];
        let bytes = 0;
        let entries = 0;
        for (const [i, layer] of manifest!.Layers.entries()) {
          const r = await scanLayer(fs.createReadStream(path.join(out, layer), { highWaterMark: 1 << 20 }), { digest: config.rootfs.diff_ids[i]! });
          assert.equal(r.state === 'unscannable', false, `layer ${i}: ${r.reason}`);
          bytes += r.bytes;
          entries += r.entries;
          findings.push(...r.findings.map((f) => `${f.path}:${f.line ?? ''} ${f.rule}${f.vendored ? ' (vendored)' : ''}`));
        }
        for (const e of config.config?.Env ?? []) findings.push(...scanText(builtInRules(), e).map((h) => `Env ${e.split('=')[0]} ${h.rule}`));
        for (const h of config.history ?? []) findings.push(...scanText(builtInRules(), h.created_by ?? '').map((x) => `history ${x.rule}`));
        console.log(`${image}: ${manifest!.Layers.length} layers, ${entries} entries, ${(bytes / 1e6).toFixed(0)} MB read, ${findings.length} findings`);
        assert.deepEqual(findings, [], `${image} (paths and rules only)`);
      } finally {
        fs.rmSync(out, { recursive: true, force: true });
      }
    });
  }
});
