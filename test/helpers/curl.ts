import { spawn } from 'node:child_process';

/**
 * The real curl against the service, as a user's script calls it. The token goes in through
 * curl's config on stdin (`-K -`), never on the command line, so no failure message shows it.
 */
export async function curl(url: string, opts: { token?: string; method?: string; json?: unknown; args?: string[] } = {}): Promise<{ status: number; body: string }> {
  const config = [
    ...(opts.token ? [`header = "authorization: Bearer ${opts.token}"`] : []),
    ...(opts.json !== undefined ? ['header = "content-type: application/json"'] : []),
  ].join('\n');
  const args = ['-sS', '-K', '-', '-X', opts.method ?? (opts.json !== undefined ? 'POST' : 'GET'), '-w', '\n%{http_code}', ...(opts.args ?? [])];
  if (opts.json !== undefined) args.push('--data-binary', JSON.stringify(opts.json));
  const child = spawn('curl', [...args, url], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdin.end(config);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (c: Buffer) => out.push(c));
  child.stderr.on('data', (c: Buffer) => err.push(c));
  const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? -1)));
  if (code !== 0) throw new Error(`curl ${url} failed (${code}): ${Buffer.concat(err).toString()}`);
  const text = Buffer.concat(out).toString('utf8');
  const nl = text.lastIndexOf('\n');
  return { status: Number(text.slice(nl + 1)), body: text.slice(0, nl) };
}
