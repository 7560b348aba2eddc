/**
 * The edge's limits and deadlines, in one place: Node's edge (edge.ts) holds them, and the HAProxy
 * configuration (dataplane/haproxy-config.ts) is rendered from the same objects, so both data planes
 * read one definition of each value.
 */

/** Deadlines and intervals of the edge; every one has a default fit for production. */
export interface EdgeTimeouts {
  /** A new connection must send its ClientHello within this time (default 10 s). */
  clientHelloMs: number;
  /** TLS handshakes the edge terminates must finish within this time (default 10 s). */
  handshakeMs: number;
  /** Complete HTTP request headers must arrive within this time (default 15 s). */
  headersMs: number;
  /** Idle HTTP keep-alive connections from clients are closed after this (default 5 s). */
  keepAliveMs: number;
  /** A request body that the edge waits for gets no byte for this long: the connection is closed (default 60 s). */
  bodyIdleMs: number;
  /** Connecting to an app, engine or sshd, and waiting for an app's response head (default 10 s). */
  upstreamConnectMs: number;
  /** After asking the backend to wake a sandbox, do not ask again for this long (default 30 s). */
  wakeHoldMs: number;
  /**
   * An app request to an asleep sandbox (or to an app not up yet) is held this long while it
   * wakes, then answered by the app, or with the waiting page if it is still not there
   * (default 0: the waiting page at once; the service sets SVC_WAKE_HOLD_MS).
   */
  heldRequestMs: number;
  /** At most one recordActivity call per sandbox per this interval (default 500 ms). */
  activityIntervalMs: number;
  /** Raw tunnels (engine, shell, TCP twins) and websockets without a byte for this long are closed (default 1 h). */
  tunnelIdleMs: number;
  /**
   * A shell connection's bytes count as activity once its connection to sshd is this old: sshd's
   * LoginGraceTime plus a margin (default SHELL_PROOF_MS).
   */
  shellProofMs: number;
  /**
   * With HAProxy as the data plane: how often every route in its maps is resolved again though no
   * notice of the backend said it changed (default 1 s; dataplane/route-mirror.ts says why).
   */
  routeRecheckMs: number;
}

/** sshd's default LoginGraceTime: it drops a connection that has not signed in by then. */
export const SSHD_LOGIN_GRACE_MS = 120_000;
/**
 * A shell older than this has signed in. The margin over the grace covers HAProxy's clock (its
 * first sight of a socket to sshd is up to one activity poll late, and the poll that counts may land
 * while sshd is still closing a timed-out login) and sshd's own delay in ending it.
 */
export const SHELL_PROOF_MS = SSHD_LOGIN_GRACE_MS + 5_000;

export const DEFAULT_TIMEOUTS: EdgeTimeouts = {
  clientHelloMs: 10_000,
  handshakeMs: 10_000,
  headersMs: 15_000,
  keepAliveMs: 5_000,
  bodyIdleMs: 60_000,
  upstreamConnectMs: 10_000,
  wakeHoldMs: 30_000,
  heldRequestMs: 0,
  activityIntervalMs: 500,
  tunnelIdleMs: 3_600_000,
  shellProofMs: SHELL_PROOF_MS,
  routeRecheckMs: 1_000,
};

/** How many connections one client address, and raw tunnels one sandbox, may hold at once. */
export interface EdgeLimits {
  /** Open connections per client IP address (default 256). */
  connectionsPerClient: number;
  /**
   * Carried raw tunnels per sandbox (default 128): a shell or TCP twin once its TLS ended, an engine
   * connection once the sandbox's dockerd accepted its client's certificate.
   */
  tunnelsPerSandbox: number;
  /**
   * Raw tunnels one client address may hold to one sandbox before they are carried (default 16), so
   * handshakes a stranger leaves hanging never take the owner's places among the sandbox's.
   */
  tunnelHandshakesPerClient: number;
  /**
   * Of the sandbox's places, those shells and TCP twins may hold together (default 64): their TLS
   * asks no credential (ssh signs in inside), so strangers' tunnels never take the rest, which only
   * engine connections, carried once dockerd accepted a client certificate, may use.
   */
  shellTunnelsPerSandbox: number;
  /** Carried shells and TCP twins one client address may hold to one sandbox (default 32). */
  shellTunnelsPerClient: number;
  /**
   * Engine connections HAProxy carries for one proven client address to one sandbox (default 64):
   * they count from their ClientHello, so one behind the owner's NAT can take at most these.
   */
  engineTunnelsPerClient: number;
}

export const DEFAULT_LIMITS: EdgeLimits = {
  connectionsPerClient: 256,
  tunnelsPerSandbox: 128,
  tunnelHandshakesPerClient: 16,
  shellTunnelsPerSandbox: 64,
  shellTunnelsPerClient: 32,
  engineTunnelsPerClient: 64,
};
