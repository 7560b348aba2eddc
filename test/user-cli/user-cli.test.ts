import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { downloadExport } from '../helpers/export-folder.ts';

const run = promisify(execFile);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIXTURE = path.resolve(HERE, '../../fixtures/busybox');

interface Ran { code: number | null; stdout: string; stderr: string }

/**
 * The user CLI as a user gets it: downloaded with curl from the running service (/cli/svc.mjs)
 * into an export folder, run with node in an empty environment (PATH and a fresh HOME) in a
 * private mount namespace whose /etc/hosts maps the sandbox's names to the edge, as DNS would.
 */
describe('user CLI (svc.mjs) with only an export folder', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let name: string;
  let token: string;
  let folder: string;
  let cliFile: string;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-user-cli-'));
  const home = path.join(tmp, 'home');
  const hosts = path.join(tmp, 'hosts');
  const outputs: string[] = [];

  /** node svc.mjs ARGS in `cwd` (the export folder by default), nothing in the environment but PATH, HOME and `env`. */
  const svc = (args: string[], opts: { cwd?: string; env?: Record<string, string>; input?: string; resolver?: { hosts: string; nsswitch: string } } = {}): Promise<Ran> => {
    const script = 'mount --bind "$1" /etc/hosts && shift && { [ -z "$1" ] || mount --bind "$1" /etc/nsswitch.conf; } && shift && cd "$1" && shift && exec env -i PATH="$PATH" HOME="$HOME_DIR" "$@"';
    const extra = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
    const resolver = opts.resolver ?? { hosts, nsswitch: '' };
    const child = spawn('unshare', ['-m', 'sh', '-c', script, 'sh', resolver.hosts, resolver.nsswitch, opts.cwd ?? folder, ...extra, process.execPath, cliFile, ...args], {
      env: { PATH: process.env.PATH, HOME_DIR: home },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child.stdin.end(opts.input ?? '');
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 300_000);
    return new Promise((resolve) => child.on('close', (code) => {
      clearTimeout(timer);
      outputs.push(stdout, stderr);
      resolve({ code, stdout, stderr });
    }));
  };
  const shown = (r: Ran) => `exit ${r.code}; stderr: ${r.stderr.slice(0, 2000)}`;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `cli-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    ({ folder, token } = await downloadExport(t, name, alice.token, tmp));
    fs.mkdirSync(home);
    const names = ['engine', 'shell-tcp', 'web', 'api'].map((s) => `${name}-${s}.localhost`).join(' ');
    fs.writeFileSync(hosts, `127.0.0.1 localhost ${names}\n`);
    // downloaded as the export folder's README says, trusting its service CA
    cliFile = path.join(folder, 'svc.mjs');
    const port = t.config.httpsPort;
    await run('curl', ['-sSf', '--cacert', path.join(folder, 'service-ca.pem'), '-o', cliFile, `https://localhost:${port}/cli/svc.mjs`]);
  });
  after(async () => {
    await run('tmux', ['-L', `svc-${t?.config.redisPrefix}`, 'kill-server']).catch(() => undefined);
    await t?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
    for (const o of outputs) assert.ok(!o.includes(token), 'the token is never printed');
  });

  it('says what it does, and what to do when something is missing', async () => {
    const help = await svc(['--help']);
    assert.equal(help.code, 0);
    for (const c of ['status', 'ls', 'create', 'start', 'keep-awake', 'logs', 'exec', 'cp', 'ssh', 'docker-context', 'up', 'urls', 'names']) assert.match(help.stdout, new RegExp(`svc ${c}\\b`));
    assert.match((await svc(['cp', '--help'])).stdout, /sandbox:\/path/);
    const noToken = await svc(['status'], { cwd: tmp, env: { SVC_URL: `https://localhost:${t.config.httpsPort}/api`, SVC_SANDBOX: name } });
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /no token: set SVC_TOKEN/);
    const wrongUrl = await svc(['status'], { env: { SVC_URL: 'https://localhost:1/api' } });
    assert.equal(wrongUrl.code, 2);
    assert.match(wrongUrl.stderr, /nothing answers at https:\/\/localhost:1/);
    const untrusted = await svc(['status'], { cwd: tmp, env: { SVC_URL: `https://localhost:${t.config.httpsPort}/api`, SVC_TOKEN: token, SVC_SANDBOX: name } });
    assert.match(untrusted.stderr, /is not trusted: run in the export folder/);
    const revoked = await svc(['status'], { env: { SVC_TOKEN: 'svc_wrong' } });
    assert.equal(revoked.code, 1);
    assert.match(revoked.stderr, /the token was refused/);
  });

  it('status, ls, start, keep-awake, urls; create is refused to a limited token with the reason', async () => {
    const status = await svc(['status']);
    assert.equal(status.code, 0, shown(status));
    assert.match(status.stdout, new RegExp(`^${name}  running`));
    assert.match((await svc(['ls'])).stdout, new RegExp(`^${name} +running`));
    assert.match((await svc(['start'])).stdout, new RegExp(`^${name}  running`));
    assert.match((await svc(['keep-awake'])).stdout, /sleeps at /);
    assert.equal((await svc(['urls'])).code, 0);
    const create = await svc(['create', 'another']);
    assert.equal(create.code, 1);
    assert.match(create.stderr, /limited to one sandbox cannot create sandboxes/);
  });

  it("names says which of the sandbox's names resolve here, and for the others how and the /etc/hosts line", async () => {
    const known = await svc(['names']);
    assert.equal(known.code, 0, shown(known));
    assert.match(known.stdout, new RegExp(`^${name}-engine\\.localhost  127\\.0\\.0\\.1$`, 'm'));
    assert.match(known.stdout, new RegExp(`^${name}-shell-tcp\\.localhost  127\\.0\\.0\\.1$`, 'm'));
    // a machine that resolves only what /etc/hosts says (no myhostname), with none of the sandbox's names there
    const bare = { hosts: path.join(tmp, 'hosts-bare'), nsswitch: path.join(tmp, 'nsswitch-files') };
    fs.writeFileSync(bare.hosts, '127.0.0.1 localhost\n');
    fs.writeFileSync(bare.nsswitch, 'hosts: files\n');
    const unknown = await svc(['names'], { resolver: bare });
    assert.equal(unknown.code, 1, shown(unknown));
    assert.match(unknown.stdout, new RegExp(`^${name}-engine\\.localhost  does not resolve$`, 'm'));
    assert.match(unknown.stderr, /npm run setup makes every \*\.localhost resolve \(libnss-myhostname/);
    assert.match(unknown.stdout, new RegExp(`^127\\.0\\.0\\.1 ${name}-engine\\.localhost ${name}-shell-tcp\\.localhost`, 'm'));
    // what ssh and up would run into says the same
    const ssh = await svc(['ssh', '--', '-o', 'BatchMode=yes', 'true'], { resolver: bare });
    assert.equal(ssh.code, 1, shown(ssh));
    assert.match(ssh.stderr, new RegExp(`${name}-shell-tcp\\.localhost does not resolve on this machine: .*libnss-myhostname`));
  });

  it('exec passes the exit code through and keeps stdout and stderr apart; -i sends stdin', async () => {
    const r = await svc(['exec', '--', 'sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.equal(r.code, 3, shown(r));
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    const piped = await svc(['exec', '-i', '--', 'wc', '-c'], { input: 'twelve bytes' });
    assert.equal(piped.stdout.trim(), '12');
    // the same commands in a checkout: npx svc hands them to the user CLI
    const checkout = await run(process.execPath, ['--import', 'tsx', path.resolve(HERE, '../../operator/svc.ts'), '--env', path.join(folder, 'svc.env'), 'exec', '--', 'sh', '-c', 'echo from-checkout; exit 4'])
      .then(() => ({ code: 0, stdout: '' }), (err: { code: number; stdout: string }) => err);
    assert.deepEqual([checkout.code, checkout.stdout], [4, 'from-checkout\n']);
  });

  it('secret set takes the value on stdin, list never shows it, exec sees it, rm removes it; the folder\'s limited token is refused with the reason', async () => {
    const full = { SVC_TOKEN: alice.token };
    const refused = await svc(['secret', 'list']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /secrets.*SVC_FORBIDDEN/);
    const set = await svc(['secret', 'set', 'API_KEY', '--sandbox', name], { env: full, input: 'quiet harbour lamp\n' });
    assert.equal(set.code, 0, shown(set));
    assert.equal(set.stdout, `API_KEY set for ${name}\n`);
    const list = await svc(['secret', 'list'], { env: full });
    assert.match(list.stdout, new RegExp(`^API_KEY +${name} +\\d{4}-`));
    assert.ok(!list.stdout.includes('harbour'));
    assert.equal((await svc(['exec', '--', 'printenv', 'API_KEY'])).stdout, 'quiet harbour lamp\n');
    assert.equal((await svc(['secret', 'rm', 'API_KEY'], { env: full })).stdout, 'API_KEY removed\n');
    assert.equal((await svc(['exec', '--', 'sh', '-c', 'printenv API_KEY || echo unset'])).stdout, 'unset\n');
    assert.equal((await svc(['secret', 'set'], { env: full })).code, 2);
  });

  it('cp copies 50 MB into the sandbox and back, the same bytes', async () => {
    const data = randomBytes(50 * 1024 * 1024);
    fs.writeFileSync(path.join(folder, 'big.bin'), data);
    const up = await svc(['cp', 'big.bin', 'sandbox:/root/big.bin']);
    assert.equal(up.code, 0, shown(up));
    const down = await svc(['cp', 'sandbox:/root/big.bin', 'back.bin']);
    assert.equal(down.code, 0, shown(down));
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    assert.equal(sha(fs.readFileSync(path.join(folder, 'back.bin'))), sha(data));
    assert.equal((await svc(['exec', '--', 'sha256sum', '/root/big.bin'])).stdout.split(' ')[0], sha(data));
  });

  it('wakes an asleep sandbox for logs, and says so', async () => {
    await t.service.lifecycle.sleep(name, 'test');
    const r = await svc(['logs', '--tail', '5']);
    assert.equal(r.code, 0, shown(r));
    assert.match(r.stderr, /is asleep; waking it/);
    assert.equal((await t.service.lifecycle.status(name)).status, 'running');
  });

  it('docker-context makes `docker --context svc-<sandbox>` work; up deploys two services and prints their addresses once they answer; logs shows them', async () => {
    const ctx = await svc(['docker-context']);
    assert.equal(ctx.code, 0, shown(ctx));
    const contextName = `svc-${name.replace(/^svc-/, '')}`;
    const ps = await run('unshare', ['-m', 'sh', '-c', 'mount --bind "$1" /etc/hosts && shift && exec env -i PATH="$PATH" HOME="$HOME_DIR" docker "$@"', 'sh', hosts, '--context', contextName, 'ps'], { env: { PATH: process.env.PATH, HOME_DIR: home } });
    assert.match(ps.stdout, /CONTAINER ID/);

    const project = path.join(tmp, 'shop');
    fs.mkdirSync(project);
    fs.cpSync(FIXTURE, path.join(project, 'busybox'), { recursive: true, verbatimSymlinks: true });
    fs.writeFileSync(path.join(project, 'compose.yaml'), `services:
  web:
    build: ./busybox
    image: shop-web:1
    command: ["sh", "-c", "mkdir -p /www && echo web-page > /www/index.html && echo web up && exec httpd -f -p 0.0.0.0:8080 -h /www"]
    ports: ["8080:8080"]
    labels: { tunnel.subdomain: web }
    restart: unless-stopped
  api:
    build: ./busybox
    image: shop-api:1
    command: ["sh", "-c", "mkdir -p /www && echo api-page > /www/index.html && exec httpd -f -p 0.0.0.0:9090 -h /www"]
    ports: ["9090:9090"]
    labels: { tunnel.subdomain: api }
    restart: unless-stopped
`);
    const up = await svc(['--env', path.join(folder, 'svc.env'), 'up', '-p', 'shop'], { cwd: project });
    assert.equal(up.code, 0, shown(up));
    const port = t.config.httpsPort;
    for (const sub of ['web', 'api']) {
      const url = `https://${name}-${sub}.localhost:${port}`;
      assert.ok(up.stdout.split('\n').includes(url), `up printed ${url}`);
      const page = await run('curl', ['-sS', '--cacert', path.join(folder, 'service-ca.pem'), '--resolve', `${name}-${sub}.localhost:${port}:127.0.0.1`, url]);
      assert.equal(page.stdout, `${sub}-page\n`);
    }
    const logs = await eventually(async () => { const r = await svc(['logs']); return r.stdout.includes('shop-web-1 | web up') ? r : null; }, 'the web line in logs', 30_000, 500);
    assert.equal(logs.code, 0);
  });

  it('ssh gives an interactive shell in the sandbox, driven through tmux', async () => {
    const key = path.join(home, '.ssh', 'id_ed25519');
    fs.mkdirSync(path.dirname(key), { mode: 0o700 });
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
    const added = await t.api('POST', '/api/me/ssh-keys', alice.token, { key: fs.readFileSync(`${key}.pub`, 'utf8').trim() });
    assert.equal(added.status, 201, answerOf(added));
    const socket = `svc-${t.config.redisPrefix}`;
    // tmux runs its command through a shell: the whole user session is one script. ssh finds keys
    // in the passwd entry's home, never $HOME: the key is named.
    const session = path.join(tmp, 'ssh-session.sh');
    fs.writeFileSync(session, `mount --bind '${hosts}' /etc/hosts && cd '${folder}' && exec env -i PATH='${process.env.PATH}' HOME='${home}' TERM=xterm '${process.execPath}' '${cliFile}' ssh -- -i '${key}'\n`);
    await run('tmux', ['-L', socket, 'new-session', '-d', '-x', '120', '-y', '30', `unshare -m sh '${session}'`]);
    await run('tmux', ['-L', socket, 'set-option', '-g', 'remain-on-exit', 'on']);
    const screen = async () => (await run('tmux', ['-L', socket, 'capture-pane', '-p'])).stdout;
    await eventually(async () => /[#$] *$/m.test(await screen()), 'the shell prompt', 60_000, 250)
      .catch(async (err) => { throw new Error(`${(err as Error).message}; the screen:\n${await screen()}`); });
    await run('tmux', ['-L', socket, 'send-keys', 'echo "in-$(hostname)-$((40+2))"', 'Enter']);
    await eventually(async () => (await screen()).includes('-42'), 'the echo', 20_000, 250);
    assert.match(await screen(), /in-.*-42/);
    await run('tmux', ['-L', socket, 'send-keys', 'exit', 'Enter']);
  });
});
