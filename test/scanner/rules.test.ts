import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { ContentScanner, scanText } from '../../scanner/content-scanner.ts';
import { scanLayer } from '../../scanner/layer-reader.ts';
import { builtInRules } from '../../scanner/rule-set.ts';
import { isVendored, matchPath } from '../../scanner/rules.ts';
import { gzip, makeTar, sha256, zstd } from '../../harness/oci.ts';

const rules = builtInRules();
/** The rules that match in a text (each once). */
const scanBuffer = (text: string, path?: string) => [...new Set(scanText(rules, text, path ? { path } : {}).map((h) => h.rule))];
const pem = (type: string) => execFileSync('openssl', ['genpkey', '-algorithm', type], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();

/** Scan rules on byte buffers and paths: pure logic, no registry. */
describe('scan rules', () => {
  it('flags env files by name: .env, .env.*, *.env, svc.env; not examples', () => {
    for (const p of ['.env', 'app/.env', 'app/.env.production', 'srv/prod.env', 'root/svc-demo/svc.env', 'svc.env']) {
      assert.deepEqual(matchPath(p).map((m) => m.rule), ['env-file'], p);
    }
    for (const p of ['app/.env.example', 'app/.envrc', 'usr/bin/env', 'app/environment.txt', 'etc/default/env']) {
      assert.deepEqual(matchPath(p).map((m) => m.rule), [], p);
    }
  });

  it('flags key and credential files by name (some only with credentials inside)', () => {
    assert.deepEqual(matchPath('root/.ssh/id_rsa').map((m) => m.rule), ['ssh-private-key-file']);
    assert.deepEqual(matchPath('root/.ssh/id_rsa.pub').map((m) => m.rule), []);
    assert.deepEqual(matchPath('certs/client.p12').map((m) => m.rule), ['pkcs12']);
    assert.deepEqual(matchPath('certs/CLIENT.P12').map((m) => m.rule), ['pkcs12'], 'file names match in any case');
    assert.deepEqual(matchPath('root/.SSH/ID_RSA').map((m) => m.rule), ['ssh-private-key-file']);
    assert.deepEqual(matchPath('root/.aws/credentials').map((m) => m.rule), ['aws-credentials']);
    const docker = matchPath('root/.docker/config.json');
    assert.equal(docker[0]!.rule, 'docker-registry-credentials');
    assert.ok(docker[0]!.content!.test('{"auths":{"r":{"auth":"dXNlcjpwYXNz"}}}'));
    assert.ok(!docker[0]!.content!.test('{"auths":{}}'));
    assert.ok(matchPath('home/u/.npmrc')[0]!.content!.test('//registry.npmjs.org/:_authToken=abc'));
  });

  it('finds private keys with a body (PKCS#8, EC, OpenSSH, inside JSON), not certificates, public keys or docs', () => {
    assert.deepEqual(scanBuffer(pem('RSA')), ['private-key']);
    assert.deepEqual(scanBuffer(pem('ed25519')), ['private-key']);
    const ec = execFileSync('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
    assert.deepEqual(scanBuffer(ec), ['private-key'], 'SEC1 EC keys (base64 starting MH) too');
    assert.deepEqual(scanBuffer(JSON.stringify({ type: 'service_account', private_key: pem('RSA') })), ['private-key'], 'a key inside JSON with \\n escapes');
    const openssh = `-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACB0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdAAAAJA=\n-----END OPENSSH PRIVATE KEY-----\n`;
    assert.deepEqual(scanBuffer(openssh), ['private-key']);
    const cert = execFileSync('openssl', ['req', '-x509', '-newkey', 'ed25519', '-nodes', '-keyout', '/dev/null', '-subj', '/CN=x', '-days', '1'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
    assert.deepEqual(scanBuffer(cert), [], 'a certificate');
    assert.deepEqual(scanBuffer('-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA' + 'A'.repeat(40) + '\n-----END PUBLIC KEY-----\n'), [], 'a public key');
    assert.deepEqual(scanBuffer('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx me@host'), []);
    assert.deepEqual(scanBuffer('Keys look like -----BEGIN RSA PRIVATE KEY----- ... -----END RSA PRIVATE KEY----- in a file.'), [], 'docs that mention a key');
  });

  it('finds this service\'s tokens and well-known provider tokens, not look-alikes', () => {
    const cases: Array<[string, string]> = [
      ['SVC_TOKEN=svc_' + 'Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1Fb6Gy0Ne2Ua8Qs4Ko1M', 'svc-access-token'],
      ['ghp_' + 'k8Fq2Lr7Zt4Wm1Np6Xc3Vb9Hd5Js0Ye2Ua7G', 'github-token'],
      ['glpat-' + 'Xk3Zr8Qm2Lw7Nt5Vp9Hc', 'gitlab-token'],
      ['AKIA' + 'Q7W2E6R4T3Y6U3I5', 'aws-access-key-id'],
      ['xoxb-4829105736-7391046285-Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1', 'slack-token'],
      ['sk_live_' + 'Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1', 'stripe-secret-key'],
      ['AIza' + 'SyD8k2Lq9Rm3Xw7Tn5Vp1Hc4Jd6Fb0Gz2Ne', 'gcp-api-key'],
      ['npm_' + 'Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1Fb6Gy0Ne2Ua8', 'npm-token'],
      ['hf_' + 'ZkLqRmXwTnVpHcJdFbGyNeUaQsKoMiBrEv', 'huggingface-token'],
    ];
    for (const [text, rule] of cases) assert.deepEqual(scanBuffer(`x ${text} y`), [rule], rule);
    for (const placeholder of ['ghp_' + 'x'.repeat(36), 'glpat-XXXXXXXXXXXXXXXXXXXX', 'sk_live_<your-secret-key-goes-here>', 'AKIA' + 'ABCDEFGHIJKLMNOP', 'npm_${NPM_TOKEN_VALUE_FROM_THE_ENVIRONMENT}']) {
      assert.deepEqual(scanBuffer(placeholder), [], 'a placeholder');
    }
    assert.deepEqual(scanBuffer('svc_short'), []);
    assert.deepEqual(scanBuffer('AKIAIOSFODNN7EXAMPLE'), [], "AWS's documentation key");
    assert.deepEqual(scanBuffer('the ghp_ prefix marks GitHub tokens'), []);
  });

  it('finds generic secret assignments in every syntax and file, not identifiers, paths, versions, hashes or references', () => {
    const secret = 'q8Zr2vLx9TfW3mKp7NcY';
    for (const [text, path] of [
      [`DB_PASSWORD=${secret}`, 'app/.env'], [`/bin/sh -c #(nop)  ENV DB_PASSWORD=${secret}`, undefined], [`RUN |1 API_TOKEN=${secret} /bin/sh -c make`, undefined],
      [`  "api_key": "${secret}",`, 'app/config.json'], [`db.password = '${secret}'`, 'app/application.properties'], [`client_secret: ${secret}`, 'app/config.yaml'],
      [`SOME_KEY = "${secret}"`, 'app/config.py'], [`const apiKey: string = "${secret}";`, 'src/api.ts'], [`apiToken := "${secret}"`, 'main.go'],
      [`var apiToken string = "${secret}"`, 'main.go'], [`'api_key' => '${secret}',`, 'config.php'], [`api_key <- "${secret}"`, 'run.R'],
      [`API_TOKEN ?= ${secret}`, 'Makefile'], [`const key = process.env.API_KEY || "${secret}";`, 'index.js'], [`os.environ.setdefault("API_KEY", "${secret}")`, 'settings.py'],
      [`export AUTH_TOKEN=${secret}`, 'run.sh'], [`ENV API_SECRET ${secret}`, 'Dockerfile'], [`<add key="ApiKey" value="${secret}" />`, 'web.config'],
      [`<apiKey>${secret}</apiKey>`, 'pom.xml'], [`$env:API_TOKEN = "${secret}"`, 'setup.ps1'], [`    "api_key = \\"${secret}\\"\\n",`, 'notebook.ipynb'],
      [`private const string ClientSecret = "${secret}";`, 'Program.cs'], [`api_token = "${secret}"`, 'main.tf'], [`--api-key ${secret}`, 'deploy.sh'],
    ] as Array<[string, string | undefined]>) assert.deepEqual(scanBuffer(text, path), ['generic-secret'], text);
    for (const [text, path] of [
      ['PORT=8080', undefined], ['DB_PASSWORD=changeme', undefined], ['API_KEY=$API_KEY', undefined], ['API_KEY=${SECRET}', undefined], ['TOKEN_FILE=/run/secrets/token', undefined],
      ['TOKEN_TTL=3600', undefined], ['AUTH_URL=https://auth.example.com/login', undefined], ['GPG_KEY=A035C8C19219BA821ECEA86B64E628F8D684696D', undefined],
      ['JAVA_VERSION=17.0.2+8', undefined], ['PasswordAuthentication no', undefined], ['auth_method = session_cookie_name', undefined], [`DB_PASSWORD=${'x'.repeat(151)}`, undefined],
      ['PASSWORD=aB3$', undefined], [`DB_HOST=${secret}`, undefined], ['api_key = config.apiKey', 'app.py'], [`apiKey = ${secret}`, 'app.js'],
      ['cache_key = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"', 'app.py'], ['"integrity": "sha512-q8Zr2vLx9TfW3mKp7NcY=="', 'package-lock.json'],
      ['sha256_key = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"', 'a.txt'], ['request_id_key = "550e8400-e29b-41d4-a716-446655440000"', 'a.py'],
      ['client_vpn_endpoint_id = aws_ec2_client_vpn_endpoint.client-vpn-endpoint.id', 'main.tf'], ['API_KEY = "your-api-key-here"', 'a.py'],
      ['private_key = "keys/server.pem"', 'a.py'], ['api_version = "2023-10-16.preview"', 'a.py'], ['csrf-token=Mj2qykJO5rELyHgezQ69nzUX0i3OH67V7+V4eUrLfpu', 'a.html'],
      ['administrator_login_password = var.db_password', 'main.tf'], ['KeyPair = X25519.KeyPair', 'a.txt'], ['slf4j-api:jar:1.7.8.:compile', 'a.txt'],
      ["const user = { name: 'john', password: 'secret123' };", 'test.js'], ["simple: { password: 'real-secret-6-levels' }", 'test.js'],
      ['[![codecov](https://codecov.io/gh/acme/shop/graph/badge.svg?token=bRzR3RyOXZ)](https://codecov.io/gh/acme/shop)', 'README.md'],
      ["'Lock-Token': 'urn:uuid:a515cfa4-5da4-22e1-f5b5-00a0451e6bf7'", 'a.js'], ['  - Release GPG key: F3EF5F62A87FC27A22E643F714CE4FF5015AA242', 'README.md'],
      ["        'make-continuation-mark-key', 'make-continuation-prompt-tag',", 'lisp.py'], ["const X_KEY = 'grpc-previous-rpc-attempts';", 'a.ts'],
      ["findMyWay.on('GET', '/test/hello', () => {}, { token: 'df123-4567' })", 'README.md'], ['"ScrollLock": { "keyCode": 145, "key": "ScrollLock" },', 'a.js'],
    ] as Array<[string, string | undefined]>) assert.deepEqual(scanBuffer(text, path), [], text);
    assert.deepEqual(scanBuffer('GITHUB_TOKEN=ghp_k8Fq2Lr7Zt4Wm1Np6Xc3Vb9Hd5Js0Ye2Ua7G'), ['github-token'], 'a specific rule says more');
    assert.deepEqual(scanBuffer(`curl -H "Authorization: Bearer ${secret}Xy7" https://api.example.com/`), ['http-authorization']);
    assert.deepEqual(scanBuffer(`Authorization: Basic ${Buffer.from('deploy:Wz8Kp3Rt6Ym1').toString('base64')}`), ['http-authorization']);
    for (const text of ['Authorization: Bearer $TOKEN', 'Authorization: Bearer <your-token-here>', `Authorization: Basic ${Buffer.from('user:password').toString('base64')}`]) assert.deepEqual(scanBuffer(text), [], text);
  });

  it('leaves the generic rule out of package folders, where provider formats still count', () => {
    assert.deepEqual(scanBuffer('module.exports = { apiToken: "Hk4Jr8Tw2Lq9Zm5Xn7Bv" };', 'app/node_modules/pkg/config.js'), []);
    assert.deepEqual(scanBuffer('module.exports = { apiToken: "Hk4Jr8Tw2Lq9Zm5Xn7Bv" };', 'app/src/config.js'), ['generic-secret']);
    assert.deepEqual(scanBuffer('TOKEN = "ghp_k8Fq2Lr7Zt4Wm1Np6Xc3Vb9Hd5Js0Ye2Ua7G"', 'usr/lib/python3/site-packages/pkg/x.py'), ['github-token']);
  });

  it('says low confidence where the value is ambiguous (a bare hash, a UUID, a name that only says key)', () => {
    const of = (text: string) => scanText(rules, text, { path: 'app/settings.py' }).map((h) => [h.rule, h.confidence ?? 'high']);
    assert.deepEqual(of('API_TOKEN = "q8Zr2vLx9TfW3mKp7NcY"'), [['generic-secret', 'high']]);
    assert.deepEqual(of('SOME_KEY = "81c5b11abb3d9dc7974f15ea0759c5c0"'), [['generic-secret', 'low']]);
    assert.deepEqual(of('SERVICE_KEY = "0f3a9c2e-7b1d-4e8a-9c6f-2d5b8a1e4c7f"'), [['generic-secret', 'low']]);
    assert.deepEqual(of('DISCORD_CLIENT_SECRET = "84709147203674859374983759847392"'), [['generic-secret', 'low']]);
    assert.deepEqual(of('private_key = "-----BEGIN PRIVATE KEY-----\nanything\n-----END PRIVATE KEY-----"'), [['private-key', 'low']]);
  });

  it('reads hostile lines of assignment words in linear time (the runner\'s timeout is the bound)', () => {
    for (const text of ['api_key='.repeat(800_000), 'key:'.repeat(1_500_000), `${'a'.repeat(39)}key=`.repeat(150_000), 'api_key=Hk4Jr8Tw2Lq9Zm5Xn7Bv\n'.repeat(100_000), '<apiKey>'.repeat(750_000)]) {
      const hits = scanText(rules, text, { path: 'app/flood.txt' });
      assert.ok(hits.length <= 1, `${text.slice(0, 20)}…: ${hits.length} findings`);
    }
  });

  it('reads assignments whole even across chunks', () => {
    const text = Buffer.from('# settings\n' + 'a=b\n'.repeat(3000) + 'DB_PASSWORD=q8Zr2vLx9TfW3mKp7NcY\nPORT=8080\n');
    for (const step of [7, 1000, text.length]) {
      const scanner = new ContentScanner(rules);
      for (let i = 0; i < text.length; i += step) scanner.feed(text.subarray(i, i + step));
      assert.deepEqual(scanner.end().map((h) => [h.rule, h.line]), [['generic-secret', 3002]], `chunks of ${step}`);
    }
    const last = new ContentScanner(rules);
    last.feed(Buffer.from('PORT=8080\nDB_PASSWORD=q8Zr2vLx9TfW3mKp7NcY'));
    assert.deepEqual(last.end().map((h) => [h.rule, h.line]), [['generic-secret', 2]], 'a last line without a newline');
  });

  it('finds a token or key split across chunks, with its line and a fingerprint that is not the secret', () => {
    const token = 'svc_' + 'Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1Fb6Gy0Ne2Ua8Qs4Ko1M';
    const key = pem('RSA');
    const text = Buffer.from('a'.repeat(1000) + ' ' + token + '\n' + 'b'.repeat(5000) + '\n' + key);
    const scanner = new ContentScanner(rules);
    for (let i = 0; i < text.length; i += 777) scanner.feed(text.subarray(i, i + 777));
    const hits = scanner.end().sort((a, b) => a.line - b.line);
    assert.deepEqual(hits.map((h) => [h.rule, h.line]), [['svc-access-token', 1], ['private-key', 3]]);
    assert.match(hits[0]!.fingerprint, /^[a-f0-9]{16}$/);
    assert.ok(!token.includes(hits[0]!.fingerprint));
    const again = scanText(rules, `elsewhere\n\nTOKEN=${token}`);
    assert.equal(again[0]!.fingerprint, hits[0]!.fingerprint, 'the same secret elsewhere has the same fingerprint');
    const inJson = scanText(rules, JSON.stringify({ type: 'x', private_key: key }));
    const indented = scanText(rules, `tls:\n  key: |\n${key.trimEnd().split('\n').map((l) => `    ${l}`).join('\n')}\n`);
    assert.deepEqual([inJson[0]!.fingerprint, indented[0]!.fingerprint], [hits[1]!.fingerprint, hits[1]!.fingerprint], 'one key, one fingerprint: in a PEM file, in JSON, indented in YAML');
  });

  it('marks vendored package folders', () => {
    for (const p of ['app/node_modules/x/test/key.pem', 'usr/lib/python3/dist-packages/x/t.py', 'usr/local/lib/python3.12/site-packages/a.py', 'src/vendor/github.com/x/y.go', 'root/go/pkg/mod/x/y.go']) assert.ok(isVendored(p), p);
    for (const p of ['app/src/key.pem', 'srv/vendors.txt', 'app/my_node_modules.js']) assert.ok(!isVendored(p), p);
  });
});

describe('layer reader', () => {
  const layer = async (files: Parameters<typeof makeTar>[0]) => makeTar(files);

  it('reads gzip, zstd and plain tar layers and reports each finding once with its path', async () => {
    const tarball = await layer([{ path: 'app/.env', content: 'A=1' }, { path: './etc/key.pem', content: pem('RSA') }, { path: 'ok.txt', content: 'fine' }]);
    for (const blob of [gzip(tarball), zstd(tarball), tarball]) {
      const r = await scanLayer(Readable.from([blob]), { digest: sha256(blob) });
      assert.equal(r.state, 'flagged', r.reason);
      assert.deepEqual(r.findings.map((f) => [f.path, f.rule, f.line]), [['app/.env', 'env-file', undefined], ['etc/key.pem', 'private-key', 1]]);
      assert.ok(r.findings.every((f) => /^[a-f0-9]{16}$/.test(f.fingerprint!)), 'every finding has a fingerprint');
    }
  });

  it('marks a digest mismatch, a bomb, absurd paths, garbage and truncation unscannable', async () => {
    const ok = gzip(await layer([{ path: 'a', content: 'b' }]));
    assert.match((await scanLayer(Readable.from([ok]), { digest: sha256(Buffer.from('x')) })).reason!, /digest mismatch/);
    const bomb = gzip(Buffer.alloc(64 * 1024 * 1024));
    const r = await scanLayer(Readable.from([bomb]), { digest: sha256(bomb), limits: { ratioFloor: 1024 * 1024, maxRatio: 100 } });
    assert.match(r.reason!, /compression bomb/);
    const escape = await layer([{ path: 'a/../../etc/shadow', content: 'x' }]);
    assert.match((await scanLayer(Readable.from([escape]), { digest: sha256(escape) })).reason!, /escapes the layer root/);
    const longName = await layer([{ path: 'd/'.repeat(3000) + 'f', content: 'x' }]);
    assert.match((await scanLayer(Readable.from([longName]), { digest: sha256(longName) })).reason!, /longer than 4096/);
    const garbage = Buffer.from('x'.repeat(2000));
    assert.equal((await scanLayer(Readable.from([garbage]), { digest: sha256(garbage) })).state, 'unscannable');
    const truncated = ok.subarray(0, ok.length - 10);
    assert.equal((await scanLayer(Readable.from([truncated]), { digest: sha256(truncated) })).state, 'unscannable');
    const badZstd = Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), Buffer.alloc(100, 1)]);
    assert.match((await scanLayer(Readable.from([badZstd]), { digest: sha256(badZstd) })).reason!, /zstd/);
  });

  it('fails (for a retry) rather than deciding a zstd layer when zstd cannot run here', async () => {
    const blob = zstd(await layer([{ path: 'a', content: 'b' }]));
    const path = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      await assert.rejects(scanLayer(Readable.from([blob]), { digest: sha256(blob) }), (err: Error) => err.name === 'ScanEnvironmentError' && /cannot run zstd/.test(err.message));
    } finally {
      process.env.PATH = path;
    }
    assert.equal((await scanLayer(Readable.from([blob]), { digest: sha256(blob) })).state, 'clean');
  });

  it('reads a file that quotes the tar magic as text (tar-stream\'s own headers.js), and opens a tar however its first bytes are cut', async () => {
    // "ustar" at offset 257 with no valid header checksum: a source file, not an archive
    const quoting = Buffer.concat([Buffer.from('// tar headers\n'.padEnd(257, '/')), Buffer.from('ustar\0\n'), Buffer.from(`${pem('RSA')}\n`)]);
    const text = gzip(await layer([{ path: 'app/node_modules/tar-stream/headers.js', content: quoting }, { path: 'app/src/headers.js', content: quoting }]));
    const r = await scanLayer(Readable.from([text]), { digest: sha256(text) });
    assert.equal(r.state, 'flagged', r.reason);
    assert.ok(r.findings.some((f) => f.path === 'app/src/headers.js' && f.rule === 'private-key'), JSON.stringify(r.findings));
    // a plain (uncompressed) layer streamed in 100-byte chunks: each member's first chunk is shorter than a tar header
    const inner = await layer([{ path: 'conf/key.pem', content: pem('RSA') }]);
    const outer = await layer([{ path: 'srv/bundle.tar', content: inner }]);
    const chunks = Array.from({ length: Math.ceil(outer.length / 100) }, (_, i) => outer.subarray(i * 100, (i + 1) * 100));
    const nested = await scanLayer(Readable.from(chunks), { digest: sha256(outer) });
    assert.deepEqual(nested.findings.map((f) => [f.path, f.rule]), [['srv/bundle.tar!/conf/key.pem', 'private-key']]);
  });

  it('does not read the content of ELF binaries (libraries embed self-test keys) or xz files; opens gzip, and a corrupt one is unscannable', async () => {
    const elf = Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46]), Buffer.from(pem('RSA'))]);
    const xz = Buffer.concat([Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0]), Buffer.from(pem('RSA'))]);
    const clean = gzip(await layer([{ path: 'usr/lib/libx.so', content: elf }, { path: 'usr/share/doc/x.xz', content: xz }]));
    assert.equal((await scanLayer(Readable.from([clean]), { digest: sha256(clean) })).state, 'clean');
    const zipped = gzip(await layer([{ path: 'srv/keys.pem.gz', content: gzip(Buffer.from(pem('RSA'))) }]));
    assert.deepEqual((await scanLayer(Readable.from([zipped]), { digest: sha256(zipped) })).findings.map((f) => [f.path, f.rule]), [['srv/keys.pem.gz!/keys.pem', 'private-key']]);
    const corrupt = gzip(await layer([{ path: 'usr/share/doc/x.gz', content: Buffer.concat([Buffer.from([0x1f, 0x8b, 8, 0]), Buffer.from(pem('RSA'))]) }]));
    const r = await scanLayer(Readable.from([corrupt]), { digest: sha256(corrupt) });
    assert.equal(r.state, 'unscannable');
    assert.match(r.reason!, /^usr\/share\/doc\/x\.gz: not a readable gzip archive/);
  });

  it('flags vendored findings too, marked as such', async () => {
    const t = gzip(await layer([{ path: 'app/node_modules/pkg/test/fixture.pem', content: pem('RSA') }, { path: 'app/server.pem', content: pem('RSA') }]));
    const r = await scanLayer(Readable.from([t]), { digest: sha256(t) });
    assert.equal(r.state, 'flagged');
    assert.deepEqual(r.findings.map((f) => [f.path, f.vendored]), [['app/node_modules/pkg/test/fixture.pem', true], ['app/server.pem', undefined]]);
  });
});
