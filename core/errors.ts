import createError from '@fastify/error';

/**
 * A catalogue error that knows how long the client should wait before trying again: the API sends
 * `retryAfter` as Retry-After, the edge shows it on its page. Whole seconds, at least 1.
 */
function retryable<Args extends unknown[]>(code: string, message: string, statusCode: number) {
  return class extends createError<Args>(code, message, statusCode) {
    readonly retryAfter: number;
    constructor(retryAfterSeconds: number, ...args: Args) {
      super(...args);
      this.retryAfter = Math.max(1, Math.ceil(retryAfterSeconds));
    }
  };
}

/** The wait an error asks for (seconds), if it asks for one: catalogue errors and the edge backend's alike. */
export function retryAfterOf(err: unknown): number | undefined {
  if (!(err instanceof Error) || !('retryAfter' in err)) return undefined;
  const seconds = err.retryAfter;
  return typeof seconds === 'number' && Number.isFinite(seconds) && seconds > 0 ? Math.ceil(seconds) : undefined;
}

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
  AccountDisabled: createError('SVC_ACCOUNT_DISABLED', 'the account "%s" is disabled; ask an administrator to enable it', 403),
  // quotas (accounts/quotas.ts): the message names the quota and its number
  QuotaExceeded: createError('SVC_QUOTA_EXCEEDED', '%s', 403),
  RunningQuota: retryable<[message: string]>('SVC_QUOTA_RUNNING', '%s', 429),
  HostFull: retryable<[message: string]>('SVC_HOST_FULL', '%s', 503),
  // 404: no such thing, or not yours (never tell the two apart)
  SandboxNotFound: createError('SVC_SANDBOX_NOT_FOUND', 'no sandbox named "%s"', 404),
  NotFound: createError('SVC_NOT_FOUND', '%s', 404),
  // 409: the thing exists but is in the wrong state
  NameTaken: createError('SVC_NAME_TAKEN', 'the name "%s" is already taken; choose another', 409),
  SandboxArchived: createError('SVC_SANDBOX_ARCHIVED', 'sandbox "%s" is archived (gone; its name stays reserved)', 410),
  SandboxNotRunning: createError('SVC_SANDBOX_NOT_RUNNING', 'sandbox "%s" is %s: start it first (POST /api/sandboxes/%s/start)', 409),
  Conflict: createError('SVC_CONFLICT', '%s', 409),
  // 413 / 415 / 429: the request is too big, in a form we do not read, or too soon
  TooLarge: createError<[limit: number]>('SVC_TOO_LARGE', 'the request body is larger than this route takes (%s bytes); files go up with PUT /api/sandboxes/<name>/files/content', 413),
  UnsupportedMediaType: createError<[contentType: string]>('SVC_UNSUPPORTED_MEDIA_TYPE', 'content-type "%s" is not read here: send JSON with content-type: application/json', 415),
  TooManyRequests: retryable<[message: string]>('SVC_TOO_MANY_REQUESTS', '%s', 429),
  TooManyWakes: retryable<[perHour: number]>('SVC_TOO_MANY_WAKES', 'wake limit reached for this account (quota wakes_per_hour: %s wakes by app traffic per hour); try again later or start the sandbox through the API', 429),
  // files, volumes, logs (spec 4.2, issue 5)
  BadPath: createError('SVC_BAD_PATH', 'invalid path: %s', 400),
  PathNotAllowed: createError('SVC_PATH_NOT_ALLOWED', '%s: only /root, /home, /srv, /opt and volume paths /var/lib/docker/volumes/<volume>/_data can be used', 403),
  PathEscapes: createError('SVC_PATH_ESCAPES', '%s leads outside %s (through a symbolic link); use the path it points to if that is allowed', 403),
  TopFolder: createError('SVC_TOP_FOLDER', '%s is a top folder and cannot be deleted; a volume is removed with the engine (docker volume rm)', 403),
  FileNotFound: createError('SVC_FILE_NOT_FOUND', 'no such file or folder: %s', 404),
  NotAFolder: createError('SVC_NOT_A_FOLDER', '%s is not a folder', 400),
  IsAFolder: createError('SVC_IS_A_FOLDER', '%s is a folder', 400),
  NotAFile: createError('SVC_NOT_A_FILE', '%s is not a regular file or folder', 400),
  FileExists: createError('SVC_FILE_EXISTS', '%s already exists and is not a folder', 409),
  NotText: createError('SVC_NOT_TEXT', '%s is not UTF-8 text; download it with GET files/content', 422),
  TextTooLarge: createError('SVC_TEXT_TOO_LARGE', '%s is %s bytes; text reads stop at 1 MB (1048576 bytes), download it with GET files/content', 422),
  UploadTooLarge: createError('SVC_UPLOAD_TOO_LARGE', 'upload larger than FILES_MAX_UPLOAD (%s bytes)', 413),
  UploadIncomplete: createError('SVC_UPLOAD_INCOMPLETE', 'upload stopped after %s of %s bytes; nothing was written', 400),
  EngineAccessDisabled: createError('SVC_ENGINE_ACCESS_DISABLED', 'engine access of "%s" is not enabled (needs-certs); enable it first (POST /api/sandboxes/%s/engine-access)', 409),
  FileOperationFailed: createError('SVC_FILE_OPERATION_FAILED', 'the file operation failed inside the sandbox: %s', 502),
  // 5xx: our side or a part we depend on
  Internal: createError<[]>('SVC_INTERNAL', 'internal error; it has been logged, try again', 500),
  Busy: retryable<[message: string]>('SVC_BUSY', '%s', 503),
  SandboxFailed: createError('SVC_SANDBOX_FAILED', 'sandbox "%s" failed to start: %s', 502),
} as const;

export type ServiceErrorName = keyof typeof errors;
