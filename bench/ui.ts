/**
 * Web UI figures (issue 12), measured in Debian's headless Chromium through the edge:
 *  - first load: compressed bytes of the JavaScript and CSS that index.html loads (budget 200 KB);
 *  - the sandboxes page: time from navigation start until the list is rendered (interactive),
 *    for a user with 50 sandboxes against the same page for a user with 1 (the baseline, same run).
 * Sandboxes are store records without containers (status deep_sleep): 50 real engines do not fit
 * this machine, and the list path (API, lifecycle.list, render) is the same. Each run uses a fresh
 * browser context (cold cache), alternating the two users; medians of RUNS.
 *
 *   npm run bench:ui               (RUNS=7)
 */
import { createUser } from '../accounts/index.ts';
import { launchChromium } from '../harness/browser.ts';
import { startTestService } from '../harness/service.ts';

const RUNS = Number(process.env.RUNS ?? 7);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`;

const t = await startTestService();
const browser = await launchChromium('localhost');
try {
  const site = `https://localhost:${t.config.httpsPort}`;

  // First load: what index.html pulls in, compressed as the service sends it.
  const html = await (await fetch(`${t.url}/`)).text();
  const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
  const sizes = { gzip: 0, br: 0, raw: 0 };
  for (const asset of assets) {
    for (const encoding of ['gzip', 'br', 'identity'] as const) {
      const res = await fetch(t.url + asset, { headers: { 'accept-encoding': encoding } });
      // fetch decodes bodies; the length on the wire is the header's
      const body = Buffer.from(await res.arrayBuffer());
      const wire = encoding === 'identity' ? body.length : Number(res.headers.get('content-length') ?? NaN);
      sizes[encoding === 'identity' ? 'raw' : encoding] += wire;
    }
  }

  // Two users: one sandbox, fifty sandboxes.
  const users: Record<'one' | 'fifty', { name: string; password: string }> = {} as never;
  for (const [key, count] of [['one', 1], ['fifty', 50]] as const) {
    const { user, password } = await createUser(t.service.store, { name: `bench-${key}-${t.config.redisPrefix}` });
    users[key] = { name: user.name, password };
    for (let i = 0; i < count; i++) {
      await t.service.store.sandboxes.put({
        name: `svc-b${key}${i}-${t.config.redisPrefix}`, owner_id: user.id, template: 'default',
        idle_timeout: i % 5 === 0 ? '87600h' : '30m', deep_sleep_after: '7d', created_at: new Date().toISOString(),
      });
    }
  }

  async function interactiveMs(who: { name: string; password: string }, expected: number): Promise<number> {
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    try {
      const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(who) });
      const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
      if (!cookie) throw new Error(`sign-in failed: ${signIn.status}`);
      await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
      const page = await context.newPage();
      await page.goto(`${site}/#/sandboxes`, { waitUntil: 'commit' });
      const handle = await page.waitForFunction(
        (n) => (document.querySelectorAll('ul.sandboxes > li a.name').length === n ? performance.now() : 0),
        expected, { polling: 'raf', timeout: 30_000 },
      );
      return (await handle.jsonValue()) as number;
    } finally {
      await context.close();
    }
  }

  await interactiveMs(users.one, 1); // warm-up: the service's first requests, Chromium's start
  const one: number[] = [];
  const fifty: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    one.push(await interactiveMs(users.one, 1));
    fifty.push(await interactiveMs(users.fifty, 50));
  }

  console.log(`first load (index.html → ${assets.length} JS/CSS files): ${kb(sizes.gzip)} gzip, ${kb(sizes.br)} brotli, ${kb(sizes.raw)} uncompressed; budget 200 KB`);
  console.log(`sandboxes page interactive, ${RUNS} cold loads each (ms): 1 sandbox ${one.map(Math.round).join(' ')}; 50 sandboxes ${fifty.map(Math.round).join(' ')}`);
  console.log(`medians: 1 sandbox ${median(one).toFixed(0)} ms, 50 sandboxes ${median(fifty).toFixed(0)} ms = ${(median(fifty) / median(one)).toFixed(2)}× the 1-sandbox page; target < 1000 ms`);
} finally {
  await browser.close();
  await t.close();
}
