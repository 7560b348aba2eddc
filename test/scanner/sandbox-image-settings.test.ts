import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import tar from 'tar-stream';
import { loadConfig } from '../../core/config.ts';
import { ContentScanner } from '../../scanner/content-scanner.ts';
import { builtInRules } from '../../scanner/rule-set.ts';
import { isEnvLike } from '../../scanner/rules.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';

/**
 * The generic assignment rule against real settings files: every env-like file of the sandbox image
 * (Debian's /etc/*.conf, /etc/default/*, YAML…) is read as the layer reader would and gives no
 * finding. A user's image built FROM it must not be flagged for what Debian ships.
 */
describe('generic assignments in the sandbox image', () => {
  it("finds nothing in the image's own env-like files", async () => {
    const docker = sandboxDocker();
    const container = await docker.createContainer({ Image: loadConfig().sandboxImage, name: `svc-test-scan-settings-${process.pid}`, Labels: { 'svc.test': 'scan-settings' } });
    try {
      const extract = tar.extract();
      (await container.export()).pipe(extract as unknown as NodeJS.WritableStream);
      const checked: string[] = [];
      const flagged: string[] = [];
      for await (const entry of extract) {
        const path = entry.header.name.replace(/^\/+/, '');
        if (entry.header.type !== 'file' || !isEnvLike(path)) {
          entry.resume();
          continue;
        }
        const scanner = new ContentScanner(builtInRules(), { path, settings: true });
        for await (const chunk of entry as AsyncIterable<Buffer>) scanner.feed(chunk);
        checked.push(path);
        if (scanner.end().some((h) => h.rule === 'generic-secret')) flagged.push(path);
      }
      assert.ok(checked.length >= 20, `env-like files read: ${checked.length}`);
      assert.deepEqual(flagged, [], `of ${checked.length} env-like files`);
      console.log(`# ${checked.length} env-like files read, none flagged`);
    } finally {
      await container.remove({ force: true });
    }
  });
});
