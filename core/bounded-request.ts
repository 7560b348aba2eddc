import http from 'node:http';

export interface BoundedAnswer {
  status: number;
  text: string;
}

/**
 * One HTTP request whose whole answer is read into memory (a JSON answer of an engine, or of the
 * management tool in a sandbox, whose bytes are hostile): at most `maxBytes`, and all of it within
 * `timeoutMs` of silence, else an error naming `what` answered.
 */
export function boundedRequest(
  options: http.RequestOptions & { method: string; path: string },
  limits: { what: string; maxBytes: number; timeoutMs: number },
  payload?: string,
): Promise<BoundedAnswer> {
  const { what, maxBytes, timeoutMs } = limits;
  const asked = `${options.method} ${options.path}`;
  return new Promise((resolve, reject) => {
    const req = http.request(options);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${what} did not answer ${asked} within ${timeoutMs / 1000} s`)));
    req.once('error', reject);
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > maxBytes) req.destroy(new Error(`${what} answered ${asked} with more than ${maxBytes} bytes`));
        else chunks.push(c);
      });
      res.once('error', reject);
      res.once('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.end(payload);
  });
}
