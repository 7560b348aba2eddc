/**
 * Exec and terminal round trips on a running sandbox (issue 22), medians of RUNS:
 *  - exec: POST /api/sandboxes/:name/exec of `true` through the edge (TLS, token), against the
 *    baseline of the same command through the engine directly (SandboxExec.run: create, start,
 *    inspect — what the route costs without HTTP);
 *  - terminal keystroke echo: one character typed over the websocket of the web UI's terminal until
 *    the shell's echo comes back, against the same on the engine's TTY stream directly.
 *
 *   npm run bench:exec             (RUNS=30)
 */
import https from 'node:https';
import type { Duplex } from 'node:stream';
import WebSocket from 'ws';
import { createToken } from '../accounts/index.ts';
import { SandboxExec } from '../lifecycle/runtime/sandbox-exec.ts';
import { sandboxDocker } from '../harness/sandbox-engine.ts';
import { startTestService } from '../harness/service.ts';

const RUNS = Number(process.env.RUNS ?? 30);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (x: number) => `${x.toFixed(1)} ms`;

const t = await startTestService();
try {
  const alice = await t.user('alice');
  const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `execbench-${t.config.redisPrefix}`, idle_timeout: '1h' });
  if (res.status !== 201) throw new Error(`create: ${res.status}`);
  const name: string = res.body.name;
  const ca = (await t.api('GET', '/ca.pem', undefined)).body as string;
  const token = (await createToken(t.service.store, { userId: alice.id })).value;
  const agent = new https.Agent({ keepAlive: true, ca });
  const port = t.config.httpsPort;
  const execOnce = () => new Promise<number>((resolve, reject) => {
    const body = JSON.stringify({ command: ['true'] });
    const began = performance.now();
    const req = https.request({ host: '127.0.0.1', servername: 'localhost', port, path: `/api/sandboxes/${name}/exec`, method: 'POST', agent,
      headers: { host: `localhost:${port}`, authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (r) => {
      r.resume();
      r.on('end', () => (r.statusCode === 200 ? resolve(performance.now() - began) : reject(new Error(`exec: ${r.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
  const direct = new SandboxExec(sandboxDocker());
  const directOnce = async () => { const began = performance.now(); await direct.run(name, ['true']); return performance.now() - began; };

  /** Types one character at a time and waits for it to come back; `write`/`output` are the two ends. */
  const echoes = async (write: (c: string) => void, output: (on: (text: string) => void) => void): Promise<number[]> => {
    let seen = '';
    let waiting: ((v: void) => void) | undefined;
    output((text) => { seen += text; waiting?.(); });
    const until = async (needle: string) => { while (!seen.includes(needle)) await new Promise((r) => { waiting = r; }); };
    write('stty -icanon; PS1=; export PS1\r');
    await new Promise((r) => setTimeout(r, 500));
    const times: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const c = String.fromCharCode(97 + (i % 26));
      seen = '';
      const began = performance.now();
      write(c);
      await until(c);
      times.push(performance.now() - began);
    }
    write('\x15exit\r');
    return times;
  };

  const warm = async (f: () => Promise<number>) => { await f(); await f(); };
  await warm(execOnce);
  await warm(directOnce);
  const execTimes: number[] = [];
  const directTimes: number[] = [];
  for (let i = 0; i < RUNS; i++) { execTimes.push(await execOnce()); directTimes.push(await directOnce()); }

  const ws = new WebSocket(`wss://localhost:${port}/api/sandboxes/${name}/terminal?cols=80&rows=24`, { ca, headers: { authorization: `Bearer ${token}` } });
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  const wsTimes = await echoes((c) => ws.send(JSON.stringify({ type: 'input', data: c })), (on) => ws.on('message', (d: Buffer) => on(d.toString('utf8'))));
  ws.close();
  const tty: { stream: Duplex } = await direct.startTerminal(name, ['sh', '-c', 'command -v bash >/dev/null && exec bash -l || exec sh -l'], { cols: 80, rows: 24 });
  const ttyTimes = await echoes((c) => tty.stream.write(c), (on) => tty.stream.on('data', (d: Buffer) => on(d.toString('utf8'))));
  tty.stream.destroy();
  agent.destroy();

  console.log(`\nexec and terminal on a running sandbox, p50 of ${RUNS}`);
  console.log('| | p50 | baseline | ratio |');
  console.log('|---|---|---|---|');
  console.log(`| POST exec \`true\` through the edge (keep-alive) | ${ms(median(execTimes))} | engine exec directly ${ms(median(directTimes))} | ${(median(execTimes) / median(directTimes)).toFixed(2)} |`);
  console.log(`| terminal keystroke echo over the websocket | ${ms(median(wsTimes))} | the engine's TTY directly ${ms(median(ttyTimes))} | ${(median(wsTimes) / median(ttyTimes)).toFixed(2)} |`);
} finally {
  await t.close();
}
