/**
 * What the edge needs from the rest of the service. The edge knows nothing of Docker: the
 * lifecycle core implements this interface (spec section 3), tests implement it by hand.
 *
 * Calls happen on the hot path (resolveApp once per HTTP request, recordActivity while bytes
 * flow), so implementations should answer from memory and do slow work in the background.
 */

import type { SandboxStatus } from '../core/sandbox-status.ts';
import type { AppVisibility } from './app-access.ts';

export type { SandboxStatus };

export interface AppRoute {
  /** Sandbox the app belongs to, e.g. `svc-foo`. */
  sandbox: string;
  /** Address the app is reachable at (container IP of the sandbox). */
  host: string;
  port: number;
  /** True if the app listens only on 127.0.0.1 inside its container (spec 4.3.3: its address answers with an error). */
  loopbackOnly?: boolean;
  /** Its `tunnel.visibility` when not public: Node checks each request; HAProxy never carries it. */
  visibility?: AppVisibility;
}

export interface ResolvedApp {
  sandbox: string;
  status: SandboxStatus;
  /** Present when the sandbox runs and the app's address is known. */
  target?: AppRoute;
  /** Its `tunnel.visibility` when not public (known asleep too: a stranger's request wakes nothing). */
  visibility?: AppVisibility;
}

export interface ResolvedSandbox {
  status: SandboxStatus;
  /** Where the sandbox's dockerd (2376) and sshd (22) listen; present only while running. */
  address?: string;
}

/** A wake under way (requestWake). */
export interface WakeUnderWay {
  /**
   * Settles once the sandbox runs at its address (its apps may still be starting): whoever holds a
   * request waits for it instead of asking for the sandbox's state. Rejects when the wake failed or
   * cannot happen now (the sandbox is being moved).
   */
  running: Promise<void>;
}

export interface EdgeBackend {
  /**
   * Route an app host label (the part before `.<domain>`, e.g. `svc-foo-web` or
   * `svc-foo-proj-web-1-port8080`) to its app; null if unknown. For a sandbox that is asleep
   * the route still resolves with the sandbox name but no target (status tells).
   * The TCP twin `<label>-tcp` is resolved with the same `<label>`.
   * `fresh`: look past any state kept in memory (the app's address just did not answer: the
   * sandbox may have stopped or gone since); rare, so it may cost an engine lookup.
   */
  resolveApp(label: string, opts?: { fresh?: boolean }): Promise<ResolvedApp | null>;
  /** Engine/shell endpoints of a sandbox by its name (`svc-foo`); null if unknown. */
  resolveSandbox(name: string): Promise<ResolvedSandbox | null>;
  /**
   * Wake for an HTTP request (counts against the owner's wake limit; throws an Error with
   * `code === 'SVC_TOO_MANY_WAKES'` when over; an optional numeric `retryAfter` in seconds is
   * shown to the user). Resolves once the wake is under way, with what tells when the sandbox runs;
   * the wake goes on in the background. Should be idempotent while a wake is under way (the edge
   * already coalesces calls, see WakeGate).
   */
  requestWake(sandbox: string): Promise<WakeUnderWay>;
  /** Bytes moved for this sandbox (either direction, any connection); the backend throttles renewals itself. */
  recordActivity(sandbox: string): void;
  /**
   * Optional: calls `listener` as a sandbox starts going to sleep, before its container stops, so
   * that a data plane holding routes to it (edge/dataplane/) drops them at once. Returns the unsubscribe.
   */
  onSleeping?(listener: (sandbox: string) => void): () => void;
  /**
   * Optional: calls `listener` when what a sandbox's names resolve to may have changed without a
   * sleep (its apps, their ports or visibility, its address), after the backend's answers show it,
   * so that a data plane holding routes to it resolves them again at once. Returns the unsubscribe.
   */
  onChanged?(listener: (sandbox: string) => void): () => void;
}

/** Error code the backend uses when the owner's wake limit is reached (core/errors.ts TooManyWakes). */
export const TOO_MANY_WAKES = 'SVC_TOO_MANY_WAKES';
