import type { Page } from 'playwright-core';

/**
 * Loads a page (goto or reload) in Chromium, tried again when Chromium aborts it with
 * ERR_NETWORK_CHANGED: it does so whenever an address appears on the machine, as it does each time
 * an engine makes a network for a sandbox (crbug 41465264).
 */
export async function navigate(page: Page, load: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await load();
      return;
    } catch (err) {
      if (attempt === 3 || !String(err).includes('ERR_NETWORK_CHANGED')) throw err;
      await page.waitForTimeout(500);
    }
  }
}
