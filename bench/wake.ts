/**
 * Browser-visible wake (issue 22): in Debian's headless Chromium, the time from navigation to the
 * app's content on screen, for an app whose sandbox is asleep and one in deep sleep, through the
 * edge. Three ways, in the same run, on the same sandbox:
 *  - hold: the request is held while the sandbox wakes (SVC_WAKE_HOLD_MS, default 5 s) and the app answers it;
 *  - page: no hold (SVC_WAKE_HOLD_MS=0): the waiting page, which looks for the app every 250 ms;
 *  - old: no hold and the page without scripts, so only its 3-s meta refresh works: the behaviour
 *    before issue 22 (a 3-s meta refresh, the script reloaded at 4 s);
 * against the baseline: the same navigation to the app while its sandbox runs. The floor is the wake
 * itself, without edge or browser: from lifecycle.start until the app accepts a TCP connection at its
 * address (the inner engine restarts its container), with a connection attempt every 20 ms that never
 * waits for the one before; attempts one after another in the same wakes show what that saves. Medians of RUNS.
 *
 *   npm run bench:wake            (RUNS=5 asleep, DEEP_RUNS=3 deep sleep)
 */
import net from 'node:net';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../harness/browser.ts';
import { openEdgeSandbox } from '../harness/edge-sandbox.ts';
import { eventually, startTestService } from '../harness/service.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const DEEP_RUNS = Number(process.env.DEEP_RUNS ?? 3);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
/** p50 and largest of the differences of paired measurements. */
const spread = (later: number[], first: number[]) => {
  const d = later.map((x, i) => x - first[i]!);
  return `${s(median(d))} / ${s(Math.max(...d))}`;
};

let networkChanges = 0;
const t = await startTestService({ wakeHoldMs: 5_000 });
const sb = await openEdgeSandbox(t, 'wakebench');
let browser: Browser | undefined;
try {
  await sb.cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
  // the trap: the app stops at once when the sandbox sleeps, instead of after the inner engine's 10 s
  await sb.cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait']);
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app', 120_000, 500);
  browser = await launchChromium(t.config.domain);
  const status = async () => (await sb.record()).status as string;
  const settings = (body: object) => t.api('PATCH', `/api/sandboxes/${sb.name}`, sb.user.token, body);

  /** Navigation start to the app's text on screen, in a fresh context (cold cache). */
  const visibleMs = async (scripts: boolean): Promise<number> => {
    const context = await browser!.newContext({ ignoreHTTPSErrors: true, javaScriptEnabled: scripts });
    try {
      const page = await context.newPage();
      const began = Date.now();
      // Chromium drops a navigation when the machine's interfaces change (a sandbox's network comes
      // back from deep sleep): it is started again, and the time counts from the first
      for (let attempt = 0; ; attempt++) {
        try {
          await page.goto(`https://${sb.name}-web.${t.config.domain}:${t.config.httpsPort}/`, { waitUntil: 'commit' });
          break;
        } catch (err) {
          const message = (err as Error).message;
          // the waiting page reloaded itself before the first navigation committed: the app is on its way
          if (message.includes(`interrupted by another navigation to "https://${sb.name}-web.`)) break;
          // (Playwright reports it as the error page's navigation interrupting ours)
          if (attempt >= 3 || !/ERR_NETWORK_CHANGED|interrupted by another navigation to "chrome-error:/.test(message)) throw err;
          networkChanges++;
        }
      }
      await page.waitForFunction(() => document.body?.innerText.includes('hello-app'), null, { timeout: 120_000, polling: 20 })
        .catch(async (err) => {
          // without scripts waitForFunction cannot run in the page: poll its content from here
          if (scripts) throw err;
          await eventually(async () => (await page.content()).includes('hello-app'), 'the app on screen', 120_000, 20);
        });
      return Date.now() - began;
    } finally {
      await context.close();
    }
  };
  const asleep = async () => {
    await t.service.lifecycle.sleep(sb.name, 'bench');
    if ((await status()) !== 'exited') throw new Error('the sandbox did not fall asleep');
  };
  const deepAsleep = async () => {
    await settings({ deep_sleep_after: '1s' });
    await t.service.lifecycle.sleep(sb.name, 'bench');
    await eventually(async () => (await status()) === 'deep_sleep', 'deep sleep', 60_000, 100);
    await settings({ deep_sleep_after: 'off' });
  };
  const measure = async (runs: number, before: () => Promise<void>, scripts: boolean) => {
    const xs: number[] = [];
    for (let i = 0; i < runs; i++) {
      await before();
      xs.push(await visibleMs(scripts));
      await eventually(async () => (await status()) === 'running', 'running', 60_000, 100);
    }
    return median(xs);
  };

  const accepts = (host: string, port: number) => new Promise<boolean>((resolve) => {
    const socket = net.connect({ host, port, timeout: 1_000 });
    const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('timeout', () => done(false));
  });
  /**
   * lifecycle.start until the app accepts at its address (8080 published on the sandbox's address),
   * seen by two lookers in the same wake: one sends a new attempt every 20 ms without waiting for the
   * one before (the floor), the other waits for each attempt, as the edge's look-out first did. A SYN
   * sent while the inner engine brings the container up goes unanswered and is sent again only a
   * second later: the difference is what that cost.
   */
  const floorMs = async (): Promise<{ overlap: number; serial: number; running: number; done: number }> => {
    const began = Date.now();
    let running = 0;
    let done = 0;
    // a start that fails on a busy engine (it happens: EPIPE on its socket) is tried again, and counted
    const start = (): Promise<unknown> => {
      const wake = t.service.lifecycle.wake(sb.name);
      void wake.running.then(() => { running ||= Date.now() - began; }, () => undefined);
      return wake.done.then(() => { done = Date.now() - began; }, (err) => {
        console.error(`start failed (${(err as Error).message}); again`);
        return start();
      });
    };
    const started = start();
    const look = async (overlap: boolean): Promise<number> => {
      let acceptedAt = 0;
      while (!acceptedAt) {
        const state = await t.service.lifecycle.status(sb.name);
        if (state.status === 'running' && state.address) {
          const attempt = accepts(state.address, 8080).then((ok) => { if (ok && !acceptedAt) acceptedAt = Date.now(); });
          if (!overlap) await attempt;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      return acceptedAt - began;
    };
    const [overlap, serial] = await Promise.all([look(true), look(false)]);
    await started;
    return { overlap, serial, running, done };
  };
  const floors = { asleep: [] as number[], deep: [] as number[], asleepSerial: [] as number[], deepSerial: [] as number[] };
  /** The service's wake (Lifecycle.wake) in the same runs: until its container runs at its address, until its engine answers. */
  const phases = { asleep: { running: [] as number[], done: [] as number[] }, deep: { running: [] as number[], done: [] as number[] } };
  for (let i = 0; i < RUNS; i++) {
    await asleep();
    const f = await floorMs();
    floors.asleep.push(f.overlap);
    floors.asleepSerial.push(f.serial);
    phases.asleep.running.push(f.running);
    phases.asleep.done.push(f.done);
  }
  for (let i = 0; i < DEEP_RUNS; i++) {
    await deepAsleep();
    const f = await floorMs();
    floors.deep.push(f.overlap);
    floors.deepSerial.push(f.serial);
    phases.deep.running.push(f.running);
    phases.deep.done.push(f.done);
  }
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app', 60_000, 250);

  const awake = await measure(RUNS, async () => undefined, true);
  const results: Record<string, { asleep: number; deep: number }> = {};
  results.hold = { asleep: await measure(RUNS, asleep, true), deep: await measure(DEEP_RUNS, deepAsleep, true) };
  Object.assign(t.config, { wakeHoldMs: 0 });
  await t.restart();
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app after the restart', 60_000, 250);
  results.page = { asleep: await measure(RUNS, asleep, true), deep: await measure(DEEP_RUNS, deepAsleep, true) };
  results.old = { asleep: await measure(RUNS, asleep, false), deep: await measure(DEEP_RUNS, deepAsleep, false) };

  console.log(`\nbrowser-visible wake, navigation → app on screen, p50 (asleep ${RUNS} runs, deep sleep ${DEEP_RUNS})`);
  console.log(`baseline: the app while its sandbox runs ${s(awake)}`);
  if (networkChanges) console.log(`(${networkChanges} navigations dropped by Chromium on a network change were started again)`);
  console.log(`floor: start until the app accepts at its address, no edge, no browser: asleep ${s(median(floors.asleep))}, deep sleep ${s(median(floors.deep))}`);
  console.log(`  the wake's own phases in those runs (asleep / deep sleep): its container runs at its address ${s(median(phases.asleep.running))} / ${s(median(phases.deep.running))}; ` +
    `the app accepts ${s(median(floors.asleep))} / ${s(median(floors.deep))}; its engine answers and the wake ends ${s(median(phases.asleep.done))} / ${s(median(phases.deep.done))}`);
  console.log(`  seen in the same wakes by attempts one after another (an unanswered SYN is sent again after 1 s): asleep ${s(median(floors.asleepSerial))}, deep sleep ${s(median(floors.deepSerial))}; later by (p50 / most) ${spread(floors.asleepSerial, floors.asleep)} and ${spread(floors.deepSerial, floors.deep)}\n`);
  console.log('| | asleep | deep sleep | asleep / old | deep / old | asleep / floor | deep / floor |');
  console.log('|---|---|---|---|---|---|---|');
  const floor = { asleep: median(floors.asleep), deep: median(floors.deep) };
  const row = (label: string, r: { asleep: number; deep: number }) =>
    console.log(`| ${label} | ${s(r.asleep)} | ${s(r.deep)} | ${(r.asleep / results.old!.asleep).toFixed(2)} | ${(r.deep / results.old!.deep).toFixed(2)} | ${(r.asleep / floor.asleep).toFixed(2)} | ${(r.deep / floor.deep).toFixed(2)} |`);
  row('held while it wakes (SVC_WAKE_HOLD_MS=5000)', results.hold);
  row('waiting page, looks every 250 ms (hold 0)', results.page);
  row('old: waiting page with its 3-s refresh', results.old);
} finally {
  await browser?.close();
  sb.close();
  await t.close();
}
