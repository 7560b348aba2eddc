import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import contentDisposition from 'content-disposition';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');
const MB = 1024 * 1024;
const LIMIT = 60 * MB;

/** Spec 4.2 against a real sandbox: every file route, the volume list, and the bad input of issue 5. */
describe('file routes on a real sandbox', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let limited: string;
  let name: string;
  let cli: EngineCli;
  let tmp: string;

  const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout;
  const files = (q: string) => `/api/sandboxes/${name}/files${q}`;
  const enc = encodeURIComponent;
  const raw = (method: string, route: string, body?: BodyInit | null, token = limited, headers: Record<string, string> = {}) =>
    fetch(t.url + route, { method, body, headers: { authorization: `Bearer ${token}`, ...headers }, duplex: 'half' } as RequestInit);
  const put = (p: string, body: BodyInit) => raw('PUT', files(`/content?path=${enc(p)}`), body);
  const api = (method: string, route: string, body?: unknown) => t.api(method, route, limited, body);

  before(async () => {
    t = await startTestService({ filesMaxUpload: LIMIT });
    alice = await t.user('alice');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-files-test-'));
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `files-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    limited = await t.limitedToken(alice.id, name);
    const state = await t.service.lifecycle.status(name);
    cli = new EngineCli(res.body.engine_access.host, state.address!, 2376, res.body);
  });
  after(async () => {
    cli?.dispose();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
    await t?.close();
  });

  it('lists /root by default, folders first, with name, type, size and mtime (limited token)', async () => {
    await inSandbox('mkdir -p /root/zdir /root/adir && printf hello > /root/b.txt && ln -sfn b.txt /root/alink && mkfifo /root/fifo');
    const res = await api('GET', files(''));
    assert.equal(res.status, 200, answerOf(res));
    const names = res.body.map((e: { name: string }) => e.name);
    assert.ok(names.indexOf('adir') < names.indexOf('zdir') && names.indexOf('zdir') < names.indexOf('alink'), names.join(','));
    const byName = Object.fromEntries(res.body.map((e: { name: string }) => [e.name, e]));
    assert.equal(byName['b.txt'].type, 'file');
    assert.equal(byName['b.txt'].size, 5);
    assert.ok(Math.abs(Date.parse(byName['b.txt'].mtime) - Date.now()) < 60_000);
    assert.equal(byName.adir.type, 'dir');
    assert.equal(byName.alink.type, 'link');
    assert.equal(byName.fifo.type, 'other');
    const dirs = res.body.filter((e: { type: string }) => e.type === 'dir').length;
    assert.ok(res.body.slice(0, dirs).every((e: { type: string }) => e.type === 'dir'));
    for (const folder of ['/home', '/srv', '/opt']) assert.equal((await api('GET', files(`?path=${folder}`))).status, 200, folder);
  });

  it('uploads raw bytes as root:root 0644, reads text back, and replaces on a second upload', async () => {
    let res = await put('/srv/hello.txt', 'héllo wörld\n');
    const body = await res.text();
    assert.equal(res.status, 200, body);
    assert.deepEqual(JSON.parse(body), { path: '/srv/hello.txt', size: 14 });
    assert.equal((await inSandbox('stat -c "%U:%G %a" /srv/hello.txt')).trim(), 'root:root 644');
    const text = await api('GET', files(`/text?path=${enc('/srv/hello.txt')}`));
    assert.deepEqual(text.body, { path: '/srv/hello.txt', text: 'héllo wörld\n' });
    res = await put('/srv/hello.txt', 'second');
    assert.equal(res.status, 200);
    assert.equal((await inSandbox('cat /srv/hello.txt')), 'second');
    res = await put('/srv/empty', '');
    assert.equal(res.status, 200);
    assert.equal((await inSandbox('stat -c %s /srv/empty')).trim(), '0');
  });

  it('round-trips a 50 MB file with the same sha256 (streamed both ways)', async () => {
    const file = path.join(tmp, 'big.bin');
    fs.writeFileSync(file, randomBytes(50 * MB));
    const sha = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    // chunked (no length up front: committed by a second operation) and with a length
    const chunked = await put('/root/big.bin', Readable.toWeb(fs.createReadStream(file)) as unknown as BodyInit);
    assert.equal(chunked.status, 200, await chunked.text());
    assert.equal((await inSandbox('sha256sum /root/big.bin')).split(' ')[0], sha);
    await inSandbox('rm /root/big.bin');
    const sized = await put('/root/big.bin', fs.readFileSync(file));
    assert.equal(sized.status, 200, await sized.text());
    assert.equal((await inSandbox('sha256sum /root/big.bin && stat -c "%U:%G %a" /root/big.bin')).replace(/ +\/root\/big.bin/, ''), `${sha}\nroot:root 644\n`);
    const down = await raw('GET', files(`/content?path=${enc('/root/big.bin')}`));
    assert.equal(down.status, 200);
    assert.equal(down.headers.get('content-length'), String(50 * MB));
    assert.equal(down.headers.get('content-type'), 'application/octet-stream');
    const hash = createHash('sha256');
    for await (const chunk of down.body as unknown as AsyncIterable<Uint8Array>) hash.update(chunk);
    assert.equal(hash.digest('hex'), sha);
    assert.equal((await inSandbox('ls -a /root | grep -c svc-upload || true')).trim(), '0', 'no temporary file left');
  });

  describe('transfer pipes', () => {
    const slowUpload = (target: string) => {
      const url = new URL(t.url + files(`/content?path=${enc(target)}`));
      const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'PUT',
        headers: { authorization: `Bearer ${limited}`, 'content-length': String(MB) } });
      req.on('error', () => undefined);
      req.on('response', (res) => res.resume());
      req.write('x');
      return req;
    };
    // this process's own folder in the sandbox's transfer folder (several processes may share it)
    const transferFolder = () => path.join(t.config.dataDir, 'transfer', name, `p${process.pid}`);

    it('carry uploads through a folder the sandbox sees read-only, and leave nothing in it', async () => {
      const mount = (await t.service.lifecycle.status(name)).transferFolder;
      assert.equal(mount, path.join(t.config.dataDir, 'transfer', name));
      await assert.rejects(inSandbox('touch /run/svc-transfer/x'), /Read-only file system/);
      for (let i = 0; i < 3; i++) assert.equal((await put(`/srv/piped-${i}.txt`, `content ${i}`)).status, 200);
      assert.equal(await inSandbox('cat /srv/piped-2.txt'), 'content 2');
      // the sandbox may pass through the folder but not list it (0711; in a user namespace its root is
      // "others" there): the service's side is the one to look at
      assert.deepEqual(fs.readdirSync(transferFolder()), []);
      // a set-group-ID folder would hand its group down: the upload still becomes root's
      await inSandbox('mkdir -p /srv/sgid && chgrp 1000 /srv/sgid && chmod 2775 /srv/sgid');
      assert.equal((await put('/srv/sgid/f.txt', 'f')).status, 200);
      assert.equal((await inSandbox('stat -c "%U:%G %a" /srv/sgid/f.txt')).trim(), 'root:root 644');
    });

    it('a client that goes away before the sandbox opened its pipe leaves no operation waiting', async () => {
      // every shell a sandbox may have for transfers (2 + 4) busy with an upload whose client is
      // slow: the next upload's operation waits for one
      const slow = Array.from({ length: 6 }, (_, i) => slowUpload(`/srv/slow-${i}.bin`));
      await eventually(async () => fs.readdirSync(transferFolder()).length === 6 || undefined, 'six uploads under way', 10_000, 20);
      const waiting = slowUpload('/srv/waiting.bin');
      await eventually(async () => fs.readdirSync(transferFolder()).length === 7 || undefined, 'one more upload waiting', 10_000, 20);
      waiting.destroy();
      await new Promise((r) => setTimeout(r, 200));
      // other operations still have their shells meanwhile
      assert.equal((await api('GET', files('?path=/srv'))).status, 200);
      for (const req of slow) req.destroy();
      // a pipe is removed once its operation has ended: a `cat` left waiting would keep it
      await eventually(async () => fs.readdirSync(transferFolder()).length === 0 || undefined, 'pipes removed', 10_000, 50);
      await eventually(async () => {
        const listing = await api('GET', files('?path=/srv'));
        assert.equal(listing.status, 200);
        return !listing.body.some((e: { name: string }) => /slow|waiting|svc-upload/.test(e.name)) || undefined;
      }, 'no file of the stopped uploads', 10_000, 100);
    });

    it('carry downloads, and a reader that goes away stops the sandbox\'s writer', async () => {
      await inSandbox(': > /srv/empty.bin && head -c 20000000 /dev/urandom > /srv/big.bin');
      const empty = await raw('GET', files(`/content?path=${enc('/srv/empty.bin')}`));
      assert.equal(empty.headers.get('content-length'), '0');
      assert.equal((await empty.arrayBuffer()).byteLength, 0);
      const ac = new AbortController();
      const res = await fetch(t.url + files(`/content?path=${enc('/srv/big.bin')}`), { headers: { authorization: `Bearer ${limited}` }, signal: ac.signal });
      const reader = res.body!.getReader();
      await reader.read();
      ac.abort();
      await eventually(async () => fs.readdirSync(transferFolder()).length === 0 || undefined, 'pipe removed', 10_000, 50);
      await eventually(async () => (await inSandbox('pgrep -x cat || true')).trim() === '' || undefined, 'no cat left', 10_000, 100);
    });

    it('a sandbox made before transfer pipes gets its uploads on a command\'s stdin', async () => {
      await inSandbox('mkdir -p /srv/a-folder');
      const lifecycle = t.service.lifecycle;
      const status = lifecycle.status.bind(lifecycle);
      lifecycle.status = async (sandbox: string) => ({ ...(await status(sandbox)), transferFolder: undefined });
      try {
        assert.equal((await put('/srv/stdin-sized.txt', 'sized')).status, 200);
        const chunked = await put('/srv/stdin-chunked.txt', Readable.toWeb(Readable.from([Buffer.from('chun'), Buffer.from('ked')])) as unknown as BodyInit);
        assert.equal(chunked.status, 200, await chunked.text());
        assert.equal((await put('/srv/a-folder', 'x')).status, 400);
        const down = await raw('GET', files(`/content?path=${enc('/srv/stdin-sized.txt')}`));
        assert.equal(down.status, 200);
        assert.equal(await down.text(), 'sized');
      } finally {
        lifecycle.status = status;
      }
      assert.equal(await inSandbox('cat /srv/stdin-sized.txt; cat /srv/stdin-chunked.txt; stat -c "%U:%G %a" /srv/stdin-chunked.txt'), 'sizedchunkedroot:root 644\n');
    });
  });

  it('downloads a folder as a tar that tar -t reads, with links stored as links', async () => {
    assert.equal((await api('POST', files('/mkdir'), { path: '/opt/proj/src/deep' })).status, 201);
    await put('/opt/proj/src/main.c', 'int main(){}\n');
    await put('/opt/proj/README', 'readme\n');
    await inSandbox('ln -s /etc/passwd /opt/proj/passwd-link');
    const res = await raw('GET', files(`/content?path=${enc('/opt/proj')}`));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/x-tar');
    assert.match(res.headers.get('content-disposition') ?? '', /proj\.tar/);
    const tar = path.join(tmp, 'proj.tar');
    fs.writeFileSync(tar, Buffer.from(await res.arrayBuffer()));
    const listing = (await run('tar', ['-tvf', tar])).stdout;
    for (const entry of ['proj/README', 'proj/src/main.c', 'proj/src/deep/']) assert.ok(listing.includes(entry), `${entry} in\n${listing}`);
    assert.match(listing, /^l.* proj\/passwd-link -> \/etc\/passwd$/m, 'the link is a link, not /etc/passwd');
    assert.ok(!listing.includes('root:x:0:0'));
  });

  it('names a download in Content-Disposition that clients parse back, whatever the name (apostrophe, quotes, non-ASCII)', async () => {
    for (const name of ["it's.txt", 'say "hi".txt', 'café ünï.txt', 'semi;colon, 100%.txt']) {
      assert.equal((await put(`/root/${name}`, 'x')).status, 200, name);
      const res = await raw('GET', files(`/content?path=${enc(`/root/${name}`)}`));
      assert.equal(res.status, 200);
      const parsed = contentDisposition.parse(res.headers.get('content-disposition') ?? '');
      assert.equal(parsed.type, 'attachment');
      assert.equal(parsed.parameters.filename, name);
    }
  });

  it('creates folders owned by root with mode 0644, and deletes files and folders', async () => {
    const res = await api('POST', files('/mkdir'), { path: '/home/a/b/c' });
    assert.deepEqual(res.body, { path: '/home/a/b/c' });
    assert.equal((await inSandbox('stat -c "%U:%G %a" /home/a/b/c')).trim(), 'root:root 644');
    assert.equal((await api('POST', files('/mkdir'), { path: '/home/a/b/c' })).status, 201, 'idempotent');
    await put('/home/a/b/f.txt', 'x');
    assert.equal((await api('POST', files('/mkdir'), { path: '/home/a/b/f.txt' })).body.error.code, 'SVC_FILE_EXISTS');
    assert.deepEqual((await api('DELETE', files(`?path=${enc('/home/a/b/f.txt')}`))).body, { path: '/home/a/b/f.txt', deleted: true });
    assert.equal((await api('DELETE', files(`?path=${enc('/home/a')}`))).status, 200);
    assert.equal((await inSandbox('ls -A /home')).trim(), '');
    assert.equal((await api('DELETE', files(`?path=${enc('/home/a')}`))).body.error.code, 'SVC_FILE_NOT_FOUND');
    assert.equal((await api('GET', files(`?path=${enc('/srv/nope')}`))).status, 404);
  });

  it('never deletes a top folder or a volume\'s own folder', async () => {
    await cli.docker(['volume', 'create', 'keepme']);
    for (const p of ['/root', '/home/', '/srv/.', '/opt', '/var/lib/docker/volumes/keepme/_data']) {
      const res = await api('DELETE', files(`?path=${enc(p)}`));
      assert.equal(res.status, 403, p);
      assert.equal(res.body.error.code, 'SVC_TOP_FOLDER');
    }
    assert.equal((await inSandbox('test -d /root && test -d /var/lib/docker/volumes/keepme/_data && echo ok')).trim(), 'ok');
  });

  it('lists volumes with project and containers, and sees an app\'s files through the volume path', async () => {
    await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await cli.docker(['run', '-d', '--name', 'writer', '--label', 'com.docker.compose.project=demo', '--label', 'com.docker.compose.service=db',
      '-v', 'demo_data:/data', 'busybox-app', 'sh', '-c', 'mkdir -p /data/db && echo "written by the app" > /data/db/state.txt; exec sleep 100000']);
    const vols = await eventually(async () => {
      const res = await api('GET', `/api/sandboxes/${name}/volumes`);
      return res.status === 200 && res.body.find((v: { name: string }) => v.name === 'demo_data') ? res.body : null;
    }, 'volume listed', 20_000);
    const demo = vols.find((v: { name: string }) => v.name === 'demo_data');
    assert.deepEqual(demo, {
      name: 'demo_data',
      path: '/var/lib/docker/volumes/demo_data/_data',
      project: 'demo',
      containers: [{ name: 'writer', service: 'db', running: true, mount: '/data' }],
    });
    assert.ok(vols.some((v: { name: string; containers: unknown[] }) => v.name === 'keepme' && v.containers.length === 0));
    const text = await eventually(async () => (await api('GET', files(`/text?path=${enc(demo.path + '/db/state.txt')}`))).body.text, 'app file');
    assert.equal(text, 'written by the app\n');
    const listing = await api('GET', files(`?path=${enc(demo.path)}`));
    assert.deepEqual(listing.body.map((e: { name: string }) => e.name), ['db']);
    assert.equal((await put(demo.path + '/db/from-api.txt', 'hi app')).status, 200);
    assert.equal((await cli.docker(['exec', 'writer', 'cat', '/data/db/from-api.txt'])).stdout, 'hi app');
  });

  describe('bad input: clear errors, nothing changed', () => {
    // Everything under /etc with type, size and mtime (not `ls -la`, whose `..` line moves with any change in /).
    const before = async () => inSandbox("find /etc -printf '%p %y %s %T@\\n' | sort | md5sum; md5sum /etc/passwd /etc/hostname");

    it('.. and absolute-path tricks', async () => {
      const snapshot = await before();
      for (const p of ['/root/../etc/passwd', '../etc/passwd', '/root/./../../etc', '/var/lib/docker/volumes/keepme/_data/../../../image']) {
        for (const route of [files(`?path=${enc(p)}`), files(`/text?path=${enc(p)}`), files(`/content?path=${enc(p)}`)]) {
          const res = await api('GET', route);
          assert.equal(res.status, 400, `${route}: ${answerOf(res)}`);
          assert.equal(res.body.error.code, 'SVC_BAD_PATH');
        }
        assert.equal((await put(p, 'evil')).status, 400);
        assert.equal((await api('DELETE', files(`?path=${enc(p)}`))).status, 400);
        assert.equal((await api('POST', files('/mkdir'), { path: p })).status, 400);
      }
      assert.equal(await before(), snapshot);
    });

    it('paths to /etc or to /var/lib/docker outside a volume\'s _data', async () => {
      const snapshot = await before();
      for (const p of ['/etc/passwd', '//etc/passwd', '/etc', '/', '/var/lib/docker/image', '/var/lib/docker/volumes', '/var/lib/docker/volumes/keepme',
        '/var/lib/docker/volumes/metadata.db', '/var/lib/docker/containers']) {
        const res = await api('GET', files(`/content?path=${enc(p)}`));
        assert.equal(res.status, 403, p);
        assert.equal(res.body.error.code, 'SVC_PATH_NOT_ALLOWED');
        assert.equal((await put(p + '/x', 'evil')).status, 403, p);
        assert.equal((await api('DELETE', files(`?path=${enc(p)}`))).status, 403, p);
      }
      assert.equal(await before(), snapshot);
      assert.equal((await inSandbox('test -e /var/lib/docker/volumes/metadata.db && echo ok')).trim(), 'ok');
    });

    it('symbolic links that lead out of the allowed folder are never followed (read, list, write, delete, tar)', async () => {
      await inSandbox('ln -sfn /etc /root/etc-link && ln -sfn /etc/passwd /root/passwd-link && ln -sfn /etc/hostname /root/host-link && ln -sfn /var/lib/docker /srv/docker-link');
      const snapshot = await before();
      const refused = async (res: { status: number; body: any }, what: string) => {
        assert.equal(res.status, 403, `${what}: ${answerOf(res)}`);
        assert.equal(res.body.error.code, 'SVC_PATH_ESCAPES', what);
      };
      await refused(await api('GET', files(`/text?path=${enc('/root/passwd-link')}`)), 'text through a link');
      await refused(await api('GET', files(`/content?path=${enc('/root/passwd-link')}`)), 'download through a link');
      await refused(await api('GET', files(`/content?path=${enc('/root/etc-link')}`)), 'tar through a link');
      await refused(await api('GET', files(`?path=${enc('/root/etc-link')}`)), 'list through a link');
      await refused(await api('GET', files(`/text?path=${enc('/root/etc-link/hostname')}`)), 'read below a link');
      await refused(await api('GET', files(`?path=${enc('/srv/docker-link/volumes')}`)), 'list below a link');
      let res = await put('/root/etc-link/evil.conf', 'evil');
      assert.equal(res.status, 403, await res.text());
      await refused(await api('DELETE', files(`?path=${enc('/root/etc-link/hostname')}`)), 'delete below a link');
      await refused(await api('POST', files('/mkdir'), { path: '/root/etc-link/newdir' }), 'mkdir below a link');
      assert.equal(await before(), snapshot, '/etc unchanged');
      assert.equal((await inSandbox('test -e /etc/evil.conf || test -e /etc/newdir || echo absent')).trim(), 'absent');

      // acting on the link itself is fine and never touches its target
      res = await put('/root/host-link', 'replaced the link, not /etc/hostname');
      assert.equal(res.status, 200);
      assert.equal((await inSandbox('test -L /root/host-link || echo "a regular file now"')).trim(), 'a regular file now');
      assert.equal((await api('DELETE', files(`?path=${enc('/root/passwd-link')}`))).status, 200);
      assert.equal((await api('DELETE', files(`?path=${enc('/root/etc-link')}`))).status, 200);
      assert.equal(await before(), snapshot, '/etc unchanged after deleting links to it');
      // a tar of a folder that holds links stores them as links
      const tar = await raw('GET', files(`/content?path=${enc('/srv')}`));
      const tarFile = path.join(tmp, 'srv.tar');
      fs.writeFileSync(tarFile, Buffer.from(await tar.arrayBuffer()));
      assert.match((await run('tar', ['-tvf', tarFile])).stdout, /srv\/docker-link -> \/var\/lib\/docker/);
      // links that stay inside the folder are followed
      await inSandbox('mkdir -p /root/real && echo inside > /root/real/f && ln -sfn /root/real /root/inner-link');
      assert.equal((await api('GET', files(`/text?path=${enc('/root/inner-link/f')}`))).body.text, 'inside\n');
    });

    it('non-UTF-8 and over-1-MB text reads', async () => {
      await inSandbox('printf "\\377\\376bad" > /root/latin && head -c 1048577 /dev/zero | tr "\\0" a > /root/big.txt && head -c 1048576 /dev/zero | tr "\\0" b > /root/max.txt');
      let res = await api('GET', files(`/text?path=${enc('/root/latin')}`));
      assert.equal(res.status, 422);
      assert.equal(res.body.error.code, 'SVC_NOT_TEXT');
      res = await api('GET', files(`/text?path=${enc('/root/big.txt')}`));
      assert.equal(res.status, 422);
      assert.equal(res.body.error.code, 'SVC_TEXT_TOO_LARGE');
      res = await api('GET', files(`/text?path=${enc('/root/max.txt')}`));
      assert.equal(res.status, 200);
      assert.equal(res.body.text.length, MB);
      res = await api('GET', files(`/text?path=${enc('/root/adir')}`));
      assert.equal(res.body.error.code, 'SVC_IS_A_FOLDER');
    });

    it('names with newlines or NUL', async () => {
      for (const p of ['/root/a\nb', '/root/a\0b', '/root/x\r\ny']) {
        for (const route of [files(`?path=${enc(p)}`), files(`/text?path=${enc(p)}`), files(`/content?path=${enc(p)}`)]) {
          const res = await api('GET', route);
          assert.equal(res.status, 400, JSON.stringify(p));
          assert.equal(res.body.error.code, 'SVC_BAD_PATH');
        }
        assert.equal((await put(p, 'x')).status, 400);
        assert.equal((await api('POST', files('/mkdir'), { path: p })).status, 400);
        assert.equal((await api('DELETE', files(`?path=${enc(p)}`))).status, 400);
      }
      assert.equal((await inSandbox('find /root -maxdepth 1 \\( -name "a?b" -o -name "x*y" \\) | wc -l')).trim(), '0', 'nothing created');
    });

    it('an upload that stops halfway leaves nothing under the final name (and no old content is lost)', async () => {
      await put('/root/keep.txt', 'old content');
      for (const target of ['/root/half.bin', '/root/keep.txt']) {
        await new Promise<void>((resolve) => {
          const url = new URL(t.url + files(`/content?path=${enc(target)}`));
          const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'PUT',
            headers: { authorization: `Bearer ${limited}`, 'content-type': 'application/octet-stream', 'content-length': String(10 * MB) } });
          req.on('error', () => resolve());
          req.on('response', (res) => { res.resume(); resolve(); });
          req.write(randomBytes(MB), () => setTimeout(() => { req.destroy(); resolve(); }, 300));
        });
      }
      await eventually(async () => (await inSandbox('ls -a /root | grep -c svc-upload || true')).trim() === '0', 'temporary file removed', 10_000);
      assert.equal((await inSandbox('test -e /root/half.bin || echo absent')).trim(), 'absent');
      assert.equal(await inSandbox('cat /root/keep.txt'), 'old content');
    });

    it('leftovers of a crashed upload are swept by the next upload into their folder once an hour old', async () => {
      await inSandbox("mkdir -p /srv/up && printf x > /srv/up/.svc-upload-old && touch -d '2 hours ago' /srv/up/.svc-upload-old && printf y > /srv/up/.svc-upload-recent");
      assert.equal((await put('/srv/up/new.txt', 'new')).status, 200);
      assert.equal((await inSandbox('ls -A /srv/up')).split('\n').filter(Boolean).sort().join(','), '.svc-upload-recent,new.txt');
    });

    it('an upload just over FILES_MAX_UPLOAD is refused with 413, announced or streamed', async () => {
      const over = Buffer.alloc(LIMIT + 1, 1);
      const announced = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const url = new URL(t.url + files(`/content?path=${enc('/root/over.bin')}`));
        const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'PUT',
          headers: { authorization: `Bearer ${limited}`, 'content-length': String(over.length) } });
        req.on('response', (res) => { let b = ''; res.on('data', (c) => (b += c)); res.on('end', () => resolve({ status: res.statusCode!, body: b })); });
        req.on('error', reject);
        req.end(over);
      });
      assert.equal(announced.status, 413);
      assert.equal(JSON.parse(announced.body).error.code, 'SVC_UPLOAD_TOO_LARGE');
      // chunked: no length up front; refused once the count passes the limit
      const streamed = await put('/root/over.bin', Readable.toWeb(Readable.from((function* () {
        for (let i = 0; i < over.length; i += MB) yield over.subarray(i, i + MB);
      })())) as unknown as BodyInit);
      assert.equal(streamed.status, 413);
      assert.equal((await streamed.json()).error.code, 'SVC_UPLOAD_TOO_LARGE');
      await eventually(async () => (await inSandbox('ls -a /root | grep -c -e svc-upload -e over.bin || true')).trim() === '0', 'nothing left', 10_000);
      // exactly at the limit is fine
      const at = await put('/root/at-limit.bin', over.subarray(0, LIMIT));
      assert.equal(at.status, 200);
      assert.equal((await inSandbox('stat -c %s /root/at-limit.bin')).trim(), String(LIMIT));
    });

    it('an upload to a folder, to a top folder, or into a missing folder', async () => {
      assert.equal((await (await put('/root/adir', 'x')).json()).error.code, 'SVC_IS_A_FOLDER');
      assert.equal((await (await put('/root', 'x')).json()).error.code, 'SVC_BAD_PATH');
      assert.equal((await (await put('/root/missing/x', 'x')).json()).error.code, 'SVC_FILE_NOT_FOUND');
    });
  });

  it('a token of another user sees nothing; no token is 401', async () => {
    const bob = await t.user('bob');
    assert.equal((await t.api('GET', files(''), bob.token)).status, 404);
    assert.equal((await t.api('GET', files(''), undefined)).status, 401);
    assert.equal((await raw('PUT', files(`/content?path=${enc('/root/x')}`), 'x', bob.token)).status, 404);
  });

  it('answers 409 with a message to start it while the sandbox is asleep', async () => {
    await t.service.lifecycle.sleep(name, 'test');
    for (const [method, route, body] of [
      ['GET', files('')], ['GET', files(`/text?path=${enc('/srv/hello.txt')}`)], ['GET', files(`/content?path=${enc('/srv/hello.txt')}`)],
      ['POST', files('/mkdir'), { path: '/root/x' }], ['DELETE', files(`?path=${enc('/root/b.txt')}`)], ['GET', `/api/sandboxes/${name}/volumes`],
    ] as Array<[string, string, unknown?]>) {
      const res = await api(method, route, body);
      assert.equal(res.status, 409, `${method} ${route}`);
      assert.equal(res.body.error.code, 'SVC_SANDBOX_NOT_RUNNING');
      assert.match(res.body.error.message, /asleep: start it first/);
    }
    const up = await put('/root/x', 'x');
    assert.equal(up.status, 409);
  });

  it('serves many operations at once, and again after a sleep ended the shells that served them', async () => {
    await t.service.lifecycle.start(name); // asleep since the test before
    // operations run in at most two shells per sandbox; the rest wait their turn
    const reads = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      i % 2 ? api('GET', files('?path=/srv')) : api('POST', files('/mkdir'), { path: `/opt/many/d${i}` })));
    assert.deepEqual(reads.map((r) => r.status), [201, 200, 201, 200, 201, 200, 201, 200]);
    assert.equal((await inSandbox('ls /opt/many')).split('\n').filter(Boolean).length, 4);
    await t.service.lifecycle.sleep(name, 'test');
    await t.service.lifecycle.start(name);
    const after = await api('GET', files('?path=/opt/many'));
    assert.equal(after.status, 200, answerOf(after));
    assert.equal(after.body.length, 4);
  });
});
