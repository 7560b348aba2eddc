import createError from '@fastify/error';

/**
 * The service's one error catalogue. Every error a client can see is created here, with its
 * status; the API turns them into `{ "error": { "code", "message" } }` (design.md, "Errors").
 * Codes are stable: clients and agents branch on them.
 */
export const errors = {
  // 400: the request itself is malformed
  BadRequest: createError('SVC_BAD_REQUEST', '%s', 400),
  BadDuration: createError('SVC_BAD_DURATION', 'invalid duration "%s": use a number with s, m, h or d (30s, 45m, 2h, 14d), or 0 / off for never', 400),
  BadSandboxName: createError('SVC_BAD_SANDBOX_NAME', 'invalid sandbox name "%s": use 1-40 lowercase letters, digits and dashes, starting with a letter or digit', 400),
  // 401 / 403: who you are and what you may do
  Unauthenticated: createError('SVC_UNAUTHENTICATED', '%s', 401),
  Forbidden: createError('SVC_FORBIDDEN', '%s', 403),
  // 404: no such thing, or not yours (never tell the two apart)
  SandboxNotFound: createError('SVC_SANDBOX_NOT_FOUND', 'no sandbox named "%s"', 404),
  NotFound: createError('SVC_NOT_FOUND', '%s', 404),
  // 409: the thing exists but is in the wrong state
  NameTaken: createError('SVC_NAME_TAKEN', 'the name "%s" is already taken; choose another', 409),
  SandboxArchived: createError('SVC_SANDBOX_ARCHIVED', 'sandbox "%s" is archived and cannot be used', 409),
  SandboxNotRunning: createError('SVC_SANDBOX_NOT_RUNNING', 'sandbox "%s" is %s: start it first (POST /api/sandboxes/%s/start)', 409),
  Conflict: createError('SVC_CONFLICT', '%s', 409),
  // 413 / 422 / 429
  TooLarge: createError('SVC_TOO_LARGE', '%s', 413),
  Unprocessable: createError('SVC_UNPROCESSABLE', '%s', 422),
  TooManyWakes: createError('SVC_TOO_MANY_WAKES', 'wake limit reached for this account (%s per hour); try again later or start the sandbox through the API', 429),
  // 5xx: our side or a part we depend on
  EngineUnavailable: createError('SVC_ENGINE_UNAVAILABLE', 'the container engine did not answer: %s', 503),
  SandboxFailed: createError('SVC_SANDBOX_FAILED', 'sandbox "%s" failed to start: %s', 502),
} as const;

export type ServiceErrorName = keyof typeof errors;
