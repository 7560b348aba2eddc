export { generatePassword, hashPassword, verifyPassword } from '../core/passwords.ts';
export {
  createUser, resetPassword, changePassword, verifyUserPassword, requireUserByName, updateUser, validateUserName, publicUser, recordSignIn, setDisabled,
  type NewUser,
} from './users.ts';
export {
  TOKEN_PREFIX, DISABLED, authenticate, createToken, listTokens, revokeToken, generateTokenValue, hashToken, looksLikeToken, publicToken, redactTokens, containsToken,
  type Caller, type Principal, type NewToken,
} from './tokens.ts';
export {
  SSH_KEY_TYPES, addSshKey, listSshKeys, removeSshKey, parseSshPublicKey, sshFingerprint, authorizedKeys,
  type ParsedSshKey, type SshKeyType,
} from './ssh-keys.ts';
export { authorizeSandbox, forbidLimited, type SandboxAction } from './access.ts';
export { WebSessions, csrfMatches, SESSION_TTL_MS, type WebSession } from './web-sessions.ts';
export { Admission, type AdmissionDeps, type HostCapacity, type Usage } from './admission.ts';
export { QUOTA_NAMES, describeQuota, quotaDefaults, effectiveQuotas, checkQuota, setQuotas, type QuotaName, type QuotaValues } from './quotas.ts';
export { AuditLog, actorOf, withAuditActor, type AuditActor, type AuditEntry } from './audit.ts';
export { OidcSignIn, SsoRefused } from './oidc.ts';
export { setSecret, removeSecret, ownerSecretHashes, validateSecretName, SECRET_NAME, MAX_SECRET_BYTES, MAX_SECRETS_PER_ACCOUNT } from './secrets.ts';
export { AppPasses, PASS_TTL_S, TICKET_TTL_S } from './app-passes.ts';
