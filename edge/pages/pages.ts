/**
 * The pages the edge answers with itself. Each is a complete, small HTML document; none of them
 * may be cached (the next request may well reach the app).
 */

export interface Page {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Header that marks the waiting page, for scripts and tests (spec 7: "treat as not ready and retry"). */
export const WAITING_HEADER = 'x-svc-waiting';
/** Seconds the waiting page asks the client to wait before it retries. */
export const WAITING_RETRY_SECONDS = 3;

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function html(title: string, heading: string, paragraphs: string[], extraHead = ''): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
${extraHead}<title>${escapeHtml(title)}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:#f6f7f9;color:#1f2328}
main{max-width:36rem;padding:2rem;background:#fff;border:1px solid #d0d7de;border-radius:8px}
h1{font-size:1.4rem;margin-top:0}code{background:#eff1f3;padding:0 .25em;border-radius:4px}
</style>
</head>
<body>
<main>
<h1>${escapeHtml(heading)}</h1>
${paragraphs.map((p) => `<p>${p}</p>`).join('\n')}
</main>
</body>
</html>
`;
}

export function page(status: number, body: string, headers: Record<string, string> = {}): Page {
  return {
    status,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      ...headers,
    },
    body,
  };
}

/**
 * How the waiting page notices that the app answers: a HEAD of its own address (same origin, no
 * path of the app's taken) until the answer is not the waiting page, then a reload. The edge
 * holds each of these requests while the sandbox wakes, so the one under way returns as soon as
 * the app answers; otherwise the next look follows in 250 ms. Without scripts, a meta refresh.
 */
const LOOK_AGAIN_MS = 250;
const WAITING_SCRIPT = `<script>(function(){var u=location.href;function look(){fetch(u,{method:'HEAD',cache:'no-store',credentials:'same-origin',redirect:'manual'}).then(function(r){if(r.headers.get('${WAITING_HEADER}')===null)location.reload();else setTimeout(look,${LOOK_AGAIN_MS})},function(){setTimeout(look,1000)})}look()})()</script>`;

/**
 * Spec 3 / 7: HTTP 200, HTML, "Sandbox is waking up", until the app answers; then the page shows
 * the app by itself. `why` tells a waking sandbox from an app that is still starting in a running one.
 */
export function waitingPage(host: string, why: 'waking' | 'starting' = 'waking'): Page {
  const text =
    why === 'waking'
      ? `The sandbox behind <code>${escapeHtml(host)}</code> was asleep and is starting: a second or two, a few more after a deep sleep. The app appears here as soon as it answers.`
      : `The sandbox behind <code>${escapeHtml(host)}</code> is running, but the app does not answer yet. It appears here as soon as it does.`;
  return page(
    200,
    html('Sandbox is waking up', 'Sandbox is waking up', [text], `<noscript><meta http-equiv="refresh" content="${WAITING_RETRY_SECONDS}"></noscript>\n${WAITING_SCRIPT}\n`),
    { 'retry-after': String(WAITING_RETRY_SECONDS), [WAITING_HEADER]: '1' },
  );
}

export function notFoundPage(host: string): Page {
  return page(
    404,
    html('Not found', 'Nothing here', [
      `No app answers at <code>${escapeHtml(host)}</code>.`,
      'Check the address in the sandbox record (<code>tunnel_urls</code>). An app gets an address only for a port it publishes on all interfaces (<code>8080:8080</code>).',
    ]),
  );
}

export function tooManyWakesPage(host: string, message: string, retryAfterSeconds: number): Page {
  return page(
    429,
    html('Too many wakes', 'Wake limit reached', [
      `The sandbox behind <code>${escapeHtml(host)}</code> is asleep, and its owner has used up the wakes app traffic may trigger for now.`,
      escapeHtml(message),
      'The owner can start the sandbox through the API (<code>POST /api/sandboxes/:name/start</code>) or try again later.',
    ]),
    { 'retry-after': String(retryAfterSeconds) },
  );
}

export function loopbackOnlyPage(host: string, port: number): Page {
  return page(
    502,
    html('App listens on 127.0.0.1', 'The app listens only on 127.0.0.1', [
      `The app behind <code>${escapeHtml(host)}</code> accepts connections only from inside its own container, so the service cannot reach it.`,
      `Make it listen on <code>0.0.0.0</code> (all interfaces) on port <code>${port}</code>, for example <code>--host 0.0.0.0</code>, then reload this page.`,
    ]),
  );
}

export function badGatewayPage(host: string, detail: string): Page {
  return page(
    502,
    html('Bad gateway', 'The app did not answer properly', [
      `The request to <code>${escapeHtml(host)}</code> reached the sandbox, but the app failed: ${escapeHtml(detail)}.`,
      'Check the app\'s logs; the page works again once the app answers.',
    ]),
  );
}

export function unavailablePage(host: string, detail: string): Page {
  return page(
    503,
    html('Unavailable', 'The service cannot route this request right now', [
      `Routing <code>${escapeHtml(host)}</code> failed: ${escapeHtml(detail)}. Try again in a few seconds.`,
    ]),
    { 'retry-after': '5' },
  );
}

/** Header that marks the host-unavailable page: the sandbox is there, its host does not answer. */
export const UNAVAILABLE_HEADER = 'x-svc-unavailable';
/** Seconds the host-unavailable page asks the client to wait before it tries again. */
export const UNAVAILABLE_RETRY_SECONDS = 10;

/**
 * Issue 20: the engine that holds the sandbox does not answer. Not the waiting page (nothing is
 * woken: waking needs that engine) and not an error of the app; the sandbox and its files are
 * kept, and its address works again once the host answers.
 */
export function hostUnavailablePage(host: string): Page {
  return page(
    503,
    html('Sandbox host unavailable', "The sandbox's host is unavailable", [
      `The sandbox behind <code>${escapeHtml(host)}</code> is on a host that does not answer right now. Nothing was started or changed, and the sandbox and its files are kept.`,
      `This address works again as soon as the host answers: try again in a little while. Its status in the API is <code>unavailable</code> until then.`,
    ], `<noscript><meta http-equiv="refresh" content="${UNAVAILABLE_RETRY_SECONDS}"></noscript>\n`),
    { 'retry-after': String(UNAVAILABLE_RETRY_SECONDS), [UNAVAILABLE_HEADER]: '1' },
  );
}

/** RFC 9110 15.5.20: the Host header names another host than the TLS connection was made for. */
export function misdirectedPage(serverName: string): Page {
  return page(
    421,
    html('Misdirected request', 'Misdirected request', [
      `This connection was opened for <code>${escapeHtml(serverName)}</code>; open a new connection for the other host.`,
    ]),
  );
}

/** A plain-HTTP request on the TLS port. */
export function plainHttpOnTlsPage(): Page {
  return page(400, html('Use HTTPS', 'This port speaks HTTPS', ['The request was sent in plain HTTP to the HTTPS port. Use an <code>https://</code> address.']));
}
