import type { Logger } from './logger.ts';

/**
 * One process serves every tenant, so a promise rejection that nothing awaited (a bug: every
 * async path should have an owner) must not take the service down for all of them — Node's
 * default is to exit. It is logged as an error and the service keeps serving.
 */
export function guardProcess(log: Logger): void {
  process.on('unhandledRejection', (reason) => {
    log.error({ err: reason }, 'unhandled promise rejection; still serving (report this as a bug)');
  });
}
