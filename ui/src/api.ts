/** The REST API under /api, called with the session cookie and the session's CSRF token. */

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

let csrf = '';
let onSignedOut: (message: string) => void = () => undefined;

export function useSession(token: string, signedOut: (message: string) => void): void {
  csrf = token;
  onSignedOut = signedOut;
}

/** JSON in, JSON out; a File goes up as raw bytes. Errors carry the API's message (it says what to do). */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (method !== 'GET') headers['x-csrf-token'] = csrf;
  let payload: BodyInit | undefined;
  if (body instanceof Blob) {
    payload = body;
    headers['content-type'] = 'application/octet-stream';
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers['content-type'] = 'application/json';
  }
  let res: Response | undefined;
  // A read that failed on the network is tried again: browsers abort requests when the machine's
  // addresses change (a new container network does that). A change is never repeated blindly.
  for (let attempt = 1; !res; attempt++) {
    try {
      res = await fetch(`/api${path}`, { method, headers, body: payload, credentials: 'same-origin' });
    } catch {
      if (method !== 'GET' || attempt === 3) throw new ApiError(0, 'SVC_OFFLINE', 'The service did not answer. Check your connection and try again.');
      await new Promise((resolve) => setTimeout(resolve, 300 * attempt));
    }
  }
  const text = await res.text();
  let data: unknown;
  try { data = text ? JSON.parse(text) : undefined; } catch { data = undefined; }
  if (!res.ok) {
    const error = (data as { error?: { code: string; message: string } } | undefined)?.error;
    const err = new ApiError(res.status, error?.code ?? 'SVC_ERROR', error?.message ?? `The request failed (HTTP ${res.status}); try again.`);
    if (res.status === 401 && path !== '/session') onSignedOut(err.message);
    throw err;
  }
  return data as T;
}

export const enc = encodeURIComponent;
