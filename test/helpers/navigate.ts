import type { Locator, Page, Request } from 'playwright-core';

/**
 * Loads a page (goto or reload) in Chromium, tried again when Chromium aborts it with
 * ERR_NETWORK_CHANGED: it does so whenever an address appears on the machine, as it does each time
 * an engine makes a network for a sandbox (crbug 41465264). The page itself may load while one of its
 * scripts is aborted that way (a blank page, seen in CI right after the test made its sandbox): then
 * it is loaded again, whole.
 */
export async function navigate(page: Page, load: () => Promise<unknown>): Promise<void> {
  let next = load;
  for (let attempt = 1; ; attempt++) {
    let aborted = false;
    const failed = (request: Request) => { if (request.failure()?.errorText.includes('ERR_NETWORK_CHANGED')) aborted = true; };
    page.on('requestfailed', failed);
    try {
      await next();
      if (!aborted || attempt === 3) return;
      // loaded, but not whole: the same address again would be only a jump within the page (#/…)
      next = () => page.reload();
    } catch (err) {
      if (attempt === 3 || !String(err).includes('ERR_NETWORK_CHANGED')) throw err;
    } finally {
      page.off('requestfailed', failed);
    }
    await page.waitForTimeout(500);
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
