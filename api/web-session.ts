import type { FastifyReply, FastifyRequest } from 'fastify';
import { csrfMatches, SESSION_TTL_MS, type WebSession, type WebSessions } from '../accounts/index.ts';
import { errors } from '../core/errors.ts';

/**
 * The web UI's session cookie. `__Host-` makes browsers accept it only with Secure, Path=/ and
 * no Domain, so no app on a subdomain of ours can plant or shadow it.
 */
export const SESSION_COOKIE = '__Host-svc_session';
export const CSRF_HEADER = 'x-csrf-token';
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function setSessionCookie(reply: FastifyReply, id: string): void {
  reply.header('set-cookie', `${SESSION_COOKIE}=${id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=${SESSION_TTL_MS / 1000}`);
}

export function clearSessionCookie(reply: FastifyReply): void {
  reply.header('set-cookie', `${SESSION_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0`);
}

/**
 * Refuses a request a browser marked as coming from another site: an Origin that is not ours,
 * or Sec-Fetch-Site other than same-origin / none (typed address). Clients that send neither
 * (curl, scripts) pass; a browser always sends Origin on a POST, PUT, PATCH or DELETE.
 */
export function refuseCrossSite(request: FastifyRequest, siteOrigin: string): void {
  const origin = request.headers.origin;
  const fetchSite = request.headers['sec-fetch-site'];
  if ((origin !== undefined && origin !== siteOrigin) || (fetchSite !== undefined && fetchSite !== 'same-origin' && fetchSite !== 'none')) {
    throw new errors.Forbidden(`cross-site request refused: use the web UI at ${siteOrigin}, or an access token from a script`);
  }
}

/**
 * The live web session behind the request's cookie, checked for this request: not cross-site,
 * and for a change (not GET/HEAD) our Origin and the session's CSRF token in X-CSRF-Token.
 * Throws errors.Unauthenticated for no, unknown or expired session.
 */
export async function requestSession(request: FastifyRequest, sessions: WebSessions, siteOrigin: string): Promise<{ id: string; session: WebSession }> {
  refuseCrossSite(request, siteOrigin);
  const id = readCookie(request.headers.cookie, SESSION_COOKIE);
  const session = id ? await sessions.get(id) : null;
  if (!id || !session) throw new errors.Unauthenticated(`your session has ended or is not valid; sign in again at ${siteOrigin}`);
  if (!SAFE_METHODS.has(request.method)) {
    if (request.headers.origin !== siteOrigin) throw new errors.Forbidden('a change made with the session cookie needs the Origin header of the web UI');
    if (!csrfMatches(session, request.headers[CSRF_HEADER] as string | undefined)) {
      throw new errors.Forbidden('missing or wrong X-CSRF-Token: reload the page and try again');
    }
  }
  return { id, session };
}
