import type http from 'node:http';
import { APP_ENTRY_PATH, APP_PASS_COOKIE, type AppAccess } from '../app-access.ts';
import type { ResolvedApp } from '../backend.ts';
import { accessRefusedPage, enteredRedirect, signInRedirect, signInRequiredPage } from '../pages/access-pages.ts';
import type { Page } from '../pages/pages.ts';

/** Longest credential read from a request (a bearer token or a pass is far shorter): a bound on what is hashed. */
const MAX_CREDENTIAL = 1024;

function bearerOf(req: http.IncomingMessage): string | undefined {
  const m = /^\s*Bearer\s+(\S{1,1024})\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

function passOf(req: http.IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === APP_PASS_COOKIE) {
      const v = part.slice(eq + 1).trim();
      return v.length <= MAX_CREDENTIAL ? v : undefined;
    }
  }
  return undefined;
}

/** A navigation of a browser (it can follow a sign-in redirect); scripts and websockets get the status and the reason. */
function isBrowserNavigation(req: http.IncomingMessage): boolean {
  return (req.method === 'GET' || req.method === 'HEAD') && req.headers.upgrade === undefined && /text\/html/.test(req.headers.accept ?? '');
}

/**
 * Where the entry path sends the browser on: a path of this address only (never another host), in
 * printable ASCII (the service sends it percent-encoded; anything else could not be a header).
 */
function localPath(to: string | null): string {
  return to && /^\/(?![/\\])[\x21-\x7e]*$/.test(to) ? to : '/';
}

/**
 * The gate of a private app address (`app.visibility` set): null lets the request through, else the
 * page it gets. `appUrl` is the address the request asked for, to come back to after signing in.
 * Without an `access` (an edge started without it) a private app answers 403 to everyone.
 */
export async function gateRequest(access: AppAccess | undefined, req: http.IncomingMessage, app: ResolvedApp, host: string, label: string, appUrl: string): Promise<Page | null> {
  const visibility = app.visibility;
  if (visibility === undefined || visibility === 'public') return null;
  if (!access) return accessRefusedPage(host, 'this service checks no users here');
  const url = new URL(req.url ?? '/', 'https://app.invalid');
  if (url.pathname === APP_ENTRY_PATH) {
    const entered = access.redeem(label, url.searchParams.get('ticket') ?? '');
    if (!entered) return accessRefusedPage(host, 'the sign-in link has expired or was used already; open the address again');
    const cookie = `${APP_PASS_COOKIE}=${entered.pass}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=${entered.maxAgeSeconds}`;
    return enteredRedirect(localPath(url.searchParams.get('to')), cookie);
  }
  const bearer = bearerOf(req);
  const pass = passOf(req);
  if (bearer === undefined && pass === undefined) {
    return isBrowserNavigation(req) ? signInRedirect(access.signInUrl(appUrl)) : signInRequiredPage(host, 'no access token or sign-in was sent');
  }
  const answer = await access.decide({ sandbox: app.sandbox, label, visibility, ...(bearer !== undefined ? { bearer } : {}), ...(pass !== undefined ? { pass } : {}) });
  if (answer.allowed) return null;
  if (answer.status === 401) return isBrowserNavigation(req) && bearer === undefined ? signInRedirect(access.signInUrl(appUrl)) : signInRequiredPage(host, answer.reason);
  return accessRefusedPage(host, answer.reason);
}

/**
 * The request's headers without the service's credentials: the app pass cookie always, and on a
 * private app a bearer `Authorization` (the user's token, which the gate read). Raw list in, raw list out.
 */
export function withoutServiceCredentials(raw: string[], gated: boolean): string[] {
  if (!carriesCredentials(raw, gated)) return raw; // the usual case: no copy per request
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const value = raw[i + 1]!;
    if (gated && name === 'authorization' && /^\s*Bearer\s/i.test(value)) continue;
    if (name === 'cookie' && value.includes(APP_PASS_COOKIE)) {
      const kept = value.split(';').filter((c) => c.split('=')[0]!.trim() !== APP_PASS_COOKIE).join(';').trim();
      if (kept) out.push(raw[i]!, kept);
      continue;
    }
    out.push(raw[i]!, value);
  }
  return out;
}

function carriesCredentials(raw: string[], gated: boolean): boolean {
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if ((gated && name === 'authorization') || (name === 'cookie' && raw[i + 1]!.includes(APP_PASS_COOKIE))) return true;
  }
  return false;
}
