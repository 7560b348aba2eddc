import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * The sandbox image's debootstrap layer (a real Debian root filesystem), gzip-compressed, cached in
 * the temporary folder across runs; `work` is a scratch folder for `docker save`.
 */
export function debianLayer(work: string): string {
  const cached = path.join(os.tmpdir(), 'svc-bench-debian-rootfs.tar.gz');
  if (fs.existsSync(cached)) return cached;
  const image = execFileSync('docker', ['images', 'svc-sandbox-base', '--format', '{{.Repository}}:{{.Tag}}']).toString().split('\n')[0]?.trim()
    || execFileSync('docker', ['images', 'svc-sandbox', '--format', '{{.Repository}}:{{.Tag}}']).toString().split('\n')[0]?.trim();
  if (!image) throw new Error('no svc-sandbox-base or svc-sandbox image: run "npm run setup" (builds it with debootstrap)');
  const dir = path.join(work, 'save');
  fs.mkdirSync(dir);
  execFileSync('sh', ['-c', 'docker save "$1" | tar -x -C "$2"', 'sh', image, dir]);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as Array<{ Layers: string[] }>;
  const layer = path.join(dir, manifest[0]!.Layers[0]!);
  execFileSync('sh', ['-c', 'gzip -c "$1" > "$2.part" && mv "$2.part" "$2"', 'sh', layer, cached]);
  fs.rmSync(dir, { recursive: true, force: true });
  return cached;
}

export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}
