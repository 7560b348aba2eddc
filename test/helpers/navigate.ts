import type { Locator, Page } from 'playwright-core';

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

/**
 * A user's click whose request Chromium aborted the same way: the UI says the service did not
 * answer (its SVC_OFFLINE note; a change is never repeated by the UI itself), and the user clicks
 * again, as a person would. Resolves once `shown` is on the page.
 */
export async function clickUntil(page: Page, button: Locator, shown: Locator): Promise<void> {
  const offline = page.getByRole('alert').filter({ hasText: 'The service did not answer' });
  for (let attempt = 1; ; attempt++) {
    await button.click();
    await shown.or(offline).first().waitFor();
    if (await shown.first().isVisible()) return;
    if (attempt === 3) throw new Error(`${await offline.first().innerText()} (three clicks)`);
  }
}
