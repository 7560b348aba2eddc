import { escapeHtml, html, page, type Page } from './pages.ts';

/** A browser without a pass goes to sign in (and comes back to the address it asked for). */
export function signInRedirect(location: string): Page {
  return page(302, html('Sign in', 'Sign in to reach this app', [`Continue to <a href="${escapeHtml(location)}">sign in</a>.`]), { location });
}

/** After the sign-in bounce: the pass is kept in a cookie for this address alone, and the browser goes on to the app. */
export function enteredRedirect(location: string, setCookie: string): Page {
  return page(302, html('Signed in', 'Signed in', [`Continue to <a href="${escapeHtml(location)}">the app</a>.`]), { location, 'set-cookie': setCookie });
}

/** No credential, or one that is not valid, from a client that is not a browser. */
export function signInRequiredPage(host: string, reason: string): Page {
  return page(401, html('Sign-in required', 'This app is private', [
    `<code>${escapeHtml(host)}</code> answers only users of this service it lets in: ${escapeHtml(reason)}.`,
    'Open it in a browser to sign in, or send <code>Authorization: Bearer &lt;access token&gt;</code>.',
  ]), { 'www-authenticate': 'Bearer realm="app"' });
}

/** A user who may not reach the app, or a sign-in link that cannot be used. */
export function accessRefusedPage(host: string, reason: string): Page {
  return page(403, html('Forbidden', 'You may not reach this app', [
    `<code>${escapeHtml(host)}</code> is private: ${escapeHtml(reason)}.`,
  ]));
}
