import type { Config } from '../core/config.ts';
import type { MoveDeps } from './move.ts';

/**
 * What a move needs (lifecycle/move.ts), built the one way for both processes that move sandboxes:
 * the service (Lifecycle, with its own lease and app table) and the operator's `svc hosts evacuate|move`
 * (its lease, unwatch and news through Redis). Only how the sandbox is held, let go and told of differs.
 */
export function moveDeps(
  parts: Pick<MoveDeps, 'store' | 'runtime' | 'exclusive' | 'goingDown' | 'placed' | 'logger'>,
  config: Pick<Config, 'moveDeadlineMs' | 'moveFreeReserveMb'>,
): MoveDeps {
  return { ...parts, deadlineMs: config.moveDeadlineMs, freeReserveBytes: config.moveFreeReserveMb * 1e6 };
}
