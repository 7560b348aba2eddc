import type { Config } from '../core/config.ts';
import type { Mover } from './runtime/host-operations.ts';

/**
 * The moving process (a runtime's HostOperations move and evacuate with it): the operator's
 * `svc hosts evacuate|move`, which holds each sandbox by the lifecycle's lease in Redis and lets it
 * go as a sleep does (operator/hosts.ts), with the move's deadline of the configuration.
 */
export function mover(parts: Pick<Mover, 'store' | 'exclusive' | 'goingDown' | 'logger'>, config: Pick<Config, 'moveDeadlineMs'>): Mover {
  return { ...parts, deadlineMs: config.moveDeadlineMs };
}
