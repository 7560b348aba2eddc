/**
 * The generic assignment rule's judgement, after gitleaks' `generic-api-key`: a secret-like key
 * name assigned a value that looks generated. Read only in settings files, image Env and history:
 * source code assigns test fixtures and hashes to `*_key` names everywhere.
 */

/** Shannon entropy of a string, in bits per character. */
export function entropy(value: string): number {
  const counts = new Map<string, number>();
  for (const c of value) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) bits -= (n / value.length) * Math.log2(n / value.length);
  return bits;
}

/** Entropy floor of a generic secret, gitleaks' value: `PORT=8080` or `changeme` style values stay below. */
const GENERIC_ENTROPY_FLOOR = 3.5;

/** Key names that hold public or descriptive values: a GPG fingerprint, a key's file, a token's lifetime. */
const PUBLIC_KEY_NAMES = /gpg|pgp|fingerprint|public|pub_?key|keyring|(?:[_.-]|^)(?:file|path|dir|url|uri|host|port|user|username|name|type|size|len|length|id|ttl|timeout|expiry|expires|header|method|mode|version|format|alg|algorithm|hash|sha\d*|md5|checksum)$/i;

/** A value that looks generated, not a number, version, path, URL, word or a reference to another variable. */
function isSecretValue(value: string): boolean {
  if (/^[\d.:_+-]+$/.test(value)) return false; // numbers, versions, times
  if (/^(?:\/|\.\.?\/|~)/.test(value)) return false; // paths
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return false; // URLs
  if (/^[$%{<@]|\$\{|\$\(/.test(value)) return false; // $VAR, ${VAR}, %(x)s, {{ x }}, <placeholder>
  if (!/[\d+/=!@#%^&*~]/.test(value)) return false; // words and identifiers (`session_cookie_name`), not generated
  return entropy(value) >= GENERIC_ENTROPY_FLOOR;
}

/** Names that say the value is secret; a bare `key` or `auth` may name a cache key or a method. */
const SECRET_NAMES = /secret|token|passw|pwd|api[_.-]?key|credential|private/i;

/** Values with the shape of a hash or an id: 32/40/64/128 hex digits, a UUID. */
const HASH_OR_ID = /^(?:[a-f0-9]{32}|[a-f0-9]{40}|[a-f0-9]{64}|[a-f0-9]{128}|[A-F0-9]{32}|[A-F0-9]{40}|[A-F0-9]{64}|[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12})$/;

/** Whether `name = value` is a generic secret assignment. */
export function isGenericSecret(name: string, value: string): boolean {
  if (PUBLIC_KEY_NAMES.test(name) || !isSecretValue(value)) return false;
  // A hash or an id under a name that does not say secret: a cache key, a checksum, a request id.
  return !HASH_OR_ID.test(value) || SECRET_NAMES.test(name);
}
