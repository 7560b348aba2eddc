/**
 * Private app addresses (issue 35): a container's `tunnel.visibility` label limits who reaches its
 * address. The edge asks who the request is and whether they may; the answer comes from above
 * (accounts/app-passes.ts, wired in service.ts), which knows users, tokens and owners.
 */

/** Who may reach an app: anyone (the spec's default), any signed-in user, the sandbox's owner and admins. */
export type AppVisibility = 'public' | 'authenticated' | 'owner';

/** The cookie a browser's pass for one app address is kept in: host-only (`__Host-`), for that address alone. */
export const APP_PASS_COOKIE = '__Host-svc_app_pass';
/** The path on an app address that takes a sign-in ticket and sets the pass (never forwarded to the app). */
export const APP_ENTRY_PATH = '/__svc/enter';

export interface AppAccessQuestion {
  sandbox: string;
  label: string;
  visibility: Exclude<AppVisibility, 'public'>;
  /** The value of `Authorization: Bearer …`, if the request had one. */
  bearer?: string;
  /** The app pass cookie's value, if the request had one. */
  pass?: string;
}

export type AppAccessAnswer =
  | { allowed: true }
  /** 401: no credential, or one that is not valid (the browser is sent to sign in); 403: a user who may not. */
  | { allowed: false; status: 401 | 403; reason: string };

export interface AppAccess {
  decide(q: AppAccessQuestion): Promise<AppAccessAnswer>;
  /** A sign-in ticket for `label` (from the service's sign-in bounce) → the pass to keep in the cookie, or null. */
  redeem(label: string, ticket: string): { pass: string; maxAgeSeconds: number } | null;
  /** Where a browser goes to sign in and come back to `appUrl`. */
  signInUrl(appUrl: string): string;
}

/** A label's value as a visibility. Anything other than the three words is read as `owner`: a typo never opens an app. */
export function visibilityOf(value: string | undefined): AppVisibility {
  if (value === undefined) return 'public';
  const v = value.trim().toLowerCase();
  return v === 'public' || v === 'authenticated' ? v : 'owner';
}
