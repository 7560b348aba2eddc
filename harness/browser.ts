import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium (scripts/setup.sh installs it); playwright-core never downloads a browser. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * A headless Chromium for UI tests and benches. Names under the service's domain resolve to
 * loopback inside the browser only (--host-resolver-rules), never through the machine's resolver.
 */
export async function launchChromium(domain: string): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run npm run setup (it installs Debian's chromium)`);
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      `--host-resolver-rules=MAP ${domain} 127.0.0.1, MAP *.${domain} 127.0.0.1`,
    ],
  });
}
