import { pino, type Logger } from 'pino';

/**
 * One structured logger for the process. Secrets never reach it: tokens, keys and passwords are
 * redacted by path, and code must not put them in messages either.
 */
export const logger: Logger = pino({
  level: process.env.LOG_LEVEL || (process.env.NODE_ENV === 'test' ? 'warn' : 'info'),
  redact: {
    paths: [
      'req.headers.authorization',
      '*.password', '*.token', '*.client_key', '*.server_key', '*.ca_key',
      'password', 'token', 'client_key', 'server_key',
    ],
    censor: '[redacted]',
  },
});

export type { Logger };
