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
 * Where the time goes: the floor's wakes are split at the runtime's start (called, returned), the
 * container running at its address, the app accepting, the sandbox's engine answering, the wake's end;
 * the held wakes at the edge's ask for the wake and the sandbox running, in Chromium and, for what the
 * browser's own work adds on a loaded machine, with curl (held too, no browser).
 *
 *   npm run bench:wake            (RUNS=5 asleep, DEEP_RUNS=3 deep sleep)
 */
import fs from 'node:fs';
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
const load = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const loadAtStart = load();
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

  /**
   * Where a held wake's time goes, from the navigation: the edge asks for the wake (Lifecycle.wake called),
   * the sandbox runs at its address (the wake's `running`, the held request's cue), the app on screen.
   */
  const trace = () => ({ called: [] as number[], started: [] as number[], returned: [] as number[], running: [] as number[], shown: [] as number[] });
  const held = { asleep: trace(), deep: trace(), curlAsleep: trace(), curlDeep: trace() };
  let tracing: (typeof held)['asleep'] | undefined;
  let navigated = 0;
  const traceWakes = () => {
    const lifecycle = t.service.lifecycle;
    const wake0 = lifecycle.wake;
    lifecycle.wake = (name, known) => {
      const wake = wake0.call(lifecycle, name, known);
      const into = tracing;
      if (into && name === sb.name && into.called.length === into.shown.length) {
        into.called.push(Date.now() - navigated);
        void wake.running.then(() => into.running.push(Date.now() - navigated), () => undefined);
      }
      return wake;
    };
    const { runtime } = t.service;
    const start0 = runtime.start;
    runtime.start = async (name: string) => {
      const into = tracing;
      if (into && name === sb.name && into.started.length === into.shown.length) into.started.push(Date.now() - navigated);
      try {
        return await start0.call(runtime, name);
      } finally {
        if (into && name === sb.name && into.returned.length === into.shown.length) into.returned.push(Date.now() - navigated);
      }
    };
  };
  traceWakes();

  /** Navigation start to the app's text on screen, in a fresh context (cold cache, no cookies). */
  const visibleMs = async (scripts: boolean): Promise<number> => {
    const context = await browser!.newContext({ ignoreHTTPSErrors: true, javaScriptEnabled: scripts });
    try {
      const page = await context.newPage();
      // The context's renderer started and settled before the clock, as in a browser already open (and
      // on the user's own machine): started with the navigation, its work took the 2 cores the wake runs
      // on, and the host engine's start of the sandbox took 0.4–0.65 s instead of 0.25 (curl's, the floor's)
      await page.goto('about:blank');
      await new Promise((r) => setTimeout(r, 500));
      const began = Date.now();
      navigated = began;
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
  /** The same request with curl, no browser: what Chromium's own work on this loaded machine adds. */
  const curlMs = async (): Promise<number> => {
    const began = Date.now();
    navigated = began;
    const body = await sb.curl(`${sb.name}-web`);
    if (!body.includes('hello-app')) throw new Error(`curl got ${body.slice(0, 200)}`);
    return Date.now() - began;
  };
  const measure = async (runs: number, before: () => Promise<void>, scripts: boolean | 'curl', trace?: (typeof held)['asleep']) => {
    const xs: number[] = [];
    for (let i = 0; i < runs; i++) {
      await before();
      tracing = trace;
      xs.push(await (scripts === 'curl' ? curlMs() : visibleMs(scripts)));
      if (trace) {
        trace.shown.push(xs.at(-1)!);
        // a wake the edge did not ask for in this navigation (it found the sandbox running) is not traced
        if (trace.called.length < trace.shown.length) trace.shown.pop();
        for (const xs of [trace.started, trace.returned, trace.running]) xs.length = Math.min(xs.length, trace.shown.length);
      }
      tracing = undefined;
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
  const floorMs = async (): Promise<{ overlap: number; serial: number; running: number; done: number; called: number; returned: number; engine: number }> => {
    const began = Date.now();
    let running = 0;
    let done = 0;
    // the runtime's start, timed from outside (traceWakes): what comes before it is the service's (lease, admission), its
    // call the engine's start, one inspect and the cgroup hand-over, what follows until `running` the service's again
    const { runtime } = t.service;
    const timed = trace();
    navigated = began;
    tracing = timed;
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
    /** Until the sandbox's own engine answers its first `_ping`, tried every 20 ms (what the wake waits for before it ends). */
    const engineLook = async (): Promise<number> => {
      const { certs } = await t.service.lifecycle.record(sb.name);
      for (;;) {
        const state = await t.service.lifecycle.status(sb.name);
        if (state.status === 'running' && state.address) {
          const answered = await runtime.innerEngine(sb.name, state.address, certs!, { timeoutMs: 2_000 }).ping().then(() => true, () => false);
          if (answered) return Date.now() - began;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const [overlap, serial, engine] = await Promise.all([look(true), look(false), engineLook()]);
    await started;
    tracing = undefined;
    return { overlap, serial, running, done, called: timed.started[0]!, returned: timed.returned[0]!, engine };
  };
  const floors = { asleep: [] as number[], deep: [] as number[], asleepSerial: [] as number[], deepSerial: [] as number[] };
  /** The service's wake (Lifecycle.wake) in the same runs: until its container runs at its address, until its engine answers. */
  const phases = {
    asleep: { called: [] as number[], returned: [] as number[], running: [] as number[], engine: [] as number[], done: [] as number[] },
    deep: { called: [] as number[], returned: [] as number[], running: [] as number[], engine: [] as number[], done: [] as number[] },
  };
  for (let i = 0; i < RUNS; i++) {
    await asleep();
    const f = await floorMs();
    floors.asleep.push(f.overlap);
    floors.asleepSerial.push(f.serial);
    phases.asleep.called.push(f.called);
    phases.asleep.returned.push(f.returned);
    phases.asleep.running.push(f.running);
    phases.asleep.engine.push(f.engine);
    phases.asleep.done.push(f.done);
  }
  for (let i = 0; i < DEEP_RUNS; i++) {
    await deepAsleep();
    const f = await floorMs();
    floors.deep.push(f.overlap);
    floors.deepSerial.push(f.serial);
    phases.deep.called.push(f.called);
    phases.deep.returned.push(f.returned);
    phases.deep.running.push(f.running);
    phases.deep.engine.push(f.engine);
    phases.deep.done.push(f.done);
  }
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app', 60_000, 250);

  const awake = await measure(RUNS, async () => undefined, true);
  const results: Record<string, { asleep: number; deep: number }> = {};
  results.hold = { asleep: await measure(RUNS, asleep, true, held.asleep), deep: await measure(DEEP_RUNS, deepAsleep, true, held.deep) };
  results.curl = { asleep: await measure(RUNS, asleep, 'curl', held.curlAsleep), deep: await measure(DEEP_RUNS, deepAsleep, 'curl', held.curlDeep) };
  Object.assign(t.config, { wakeHoldMs: 0 });
  await t.restart();
  traceWakes();
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app after the restart', 60_000, 250);
  results.page = { asleep: await measure(RUNS, asleep, true), deep: await measure(DEEP_RUNS, deepAsleep, true) };
  results.old = { asleep: await measure(RUNS, asleep, false), deep: await measure(DEEP_RUNS, deepAsleep, false) };

  console.log(`\nbrowser-visible wake, navigation → app on screen, p50 (asleep ${RUNS} runs, deep sleep ${DEEP_RUNS}); load average at the end ${load()}, at the start ${loadAtStart}`);
  console.log(`baseline: the app while its sandbox runs ${s(awake)}`);
  if (networkChanges) console.log(`(${networkChanges} navigations dropped by Chromium on a network change were started again)`);
  console.log(`floor: start until the app accepts at its address, no edge, no browser: asleep ${s(median(floors.asleep))}, deep sleep ${s(median(floors.deep))}`);
  console.log(`  the wake's own phases in those runs (asleep / deep sleep): the runtime's start called ${s(median(phases.asleep.called))} / ${s(median(phases.deep.called))}, ` +
    `returned ${s(median(phases.asleep.returned))} / ${s(median(phases.deep.returned))}; its container runs at its address ${s(median(phases.asleep.running))} / ${s(median(phases.deep.running))}; ` +
    `the app accepts ${s(median(floors.asleep))} / ${s(median(floors.deep))}; its engine answers (tried every 20 ms) ${s(median(phases.asleep.engine))} / ${s(median(phases.deep.engine))}; ` +
    `the wake ends (the engine seen, apps followed, SSH keys written) ${s(median(phases.asleep.done))} / ${s(median(phases.deep.done))}, later than the engine answers by (p50 / most) ` +
    `${spread(phases.asleep.done, phases.asleep.engine)} and ${spread(phases.deep.done, phases.deep.engine)}`);
  console.log(`  seen in the same wakes by attempts one after another (an unanswered SYN is sent again after 1 s): asleep ${s(median(floors.asleepSerial))}, deep sleep ${s(median(floors.deepSerial))}; later by (p50 / most) ${spread(floors.asleepSerial, floors.asleep)} and ${spread(floors.deepSerial, floors.deep)}\n`);
  const trail = (h: (typeof held)['asleep']) => h.shown.length
    ? `the edge asks for the wake ${s(median(h.called))}, the runtime's start called ${s(median(h.started))} and returned ${s(median(h.returned))}, the sandbox runs ${s(median(h.running))}, the app on screen ${s(median(h.shown))} (${h.shown.length} traced)`
    : 'not traced';
  console.log(`  held wakes, after the navigation began (p50): asleep: ${trail(held.asleep)}; deep sleep: ${trail(held.deep)}`);
  console.log(`  the same with curl, no browser: asleep: ${trail(held.curlAsleep)}; deep sleep: ${trail(held.curlDeep)}\n`);
  console.log('| | asleep | deep sleep | asleep / old | deep / old | asleep / floor | deep / floor |');
  console.log('|---|---|---|---|---|---|---|');
  const floor = { asleep: median(floors.asleep), deep: median(floors.deep) };
  const row = (label: string, r: { asleep: number; deep: number }) =>
    console.log(`| ${label} | ${s(r.asleep)} | ${s(r.deep)} | ${(r.asleep / results.old!.asleep).toFixed(2)} | ${(r.deep / results.old!.deep).toFixed(2)} | ${(r.asleep / floor.asleep).toFixed(2)} | ${(r.deep / floor.deep).toFixed(2)} |`);
  row('held while it wakes (SVC_WAKE_HOLD_MS=5000)', results.hold);
  row('the same, curl instead of Chromium (no browser)', results.curl);
  row('waiting page, looks every 250 ms (hold 0)', results.page);
  row('old: waiting page with its 3-s refresh', results.old);
} finally {
  await browser?.close();
  sb.close();
  await t.close();
}
