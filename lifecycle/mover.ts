import type { Config } from '../core/config.ts';
import type { Mover } from './runtime/host-operations.ts';

/**
 * The moving process (a runtime's HostOperations move, evacuate and recover with it), built the one
 * way for both processes that move sandboxes: the service (Lifecycle, with its own lease and app table)
 * and the operator's `svc hosts evacuate|move` (its lease, unwatch and news through Redis). Only how the
 * sandbox is held, let go and told of differs.
 */
export function mover(
  parts: Pick<Mover, 'store' | 'exclusive' | 'goingDown' | 'placed' | 'logger'>,
  config: Pick<Config, 'moveDeadlineMs' | 'moveFreeReserveMb'>,
): Mover {
  return { ...parts, deadlineMs: config.moveDeadlineMs, freeReserveBytes: config.moveFreeReserveMb * 1e6 };
}
