/**
 * Values that have a secret's shape but are not secrets: placeholders people write in docs and
 * templates, and the example keys providers publish in their documentation. No rule counts them.
 */

/** Example credentials from providers' own documentation (quoted there, copied everywhere). */
const DOCUMENTED_EXAMPLES = new Set([
  'AKIAIOSFODNN7EXAMPLE', // AWS access key id
  'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', // AWS secret access key
  'ASIAIOSFODNN7EXAMPLE',
  'sk_test_4eC39HqLyjWDarjtT1zdp7dc', // Stripe API reference
  'sk_test_BQokikJOvBiI2HlWgH4olfQ2',
  'rk_test_4eC39HqLyjWDarjtT1zdp7dc',
  'ghp_16C7e42F292c6912E7710c838347Ae178B4a', // GitHub docs
  'SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c', // the jwt.io sample's signature
]);

/** Words that mark a template value (checked in the part of the secret after its fixed prefix). */
const PLACEHOLDER_WORDS = /example|sample|dummy|placeholder|redacted|changeme|change_me|replace|insert|your[_-]?|my[_-]?(?:token|key|secret|password)|fake|xxxx|\*\*\*|\.\.\.|<|>|\$\{|\{\{|%\(|\$\(|not[_-]?a[_-]?real|lorem|foobar/i;

const SEQUENCES = ['abcdefghijklmnopqrstuvwxyz', '0123456789', 'qwertyuiop', 'asdfghjkl', 'zyxwvutsrqponmlkjihgfedcba', '9876543210'];

const ALPHABETS = SEQUENCES.filter((s) => !/qwer|asdf/.test(s));

/** Whether `body` runs through a keyboard or alphabet sequence of 6 or more characters (only alphabets: `sequences`). */
function hasSequence(body: string, sequences = SEQUENCES): boolean {
  const lower = body.toLowerCase();
  for (let i = 0; i + 6 <= lower.length; i++) {
    const part = lower.slice(i, i + 6);
    if (sequences.some((s) => s.includes(part))) return true;
  }
  return false;
}

/**
 * Whether a matched secret is a placeholder: a documented example, a template marker, a run of
 * one repeated character (`0000…`, `aaaa…`), an alphabet or keyboard sequence, or too few distinct
 * characters for a generated value. `prefix` is the rule's fixed prefix, left out of the checks
 * (`sk_test_` is a real prefix, not a placeholder word).
 */
export function isPlaceholder(secret: string, prefix = ''): boolean {
  if (DOCUMENTED_EXAMPLES.has(secret) || [...DOCUMENTED_EXAMPLES].some((e) => e.length >= 20 && secret.includes(e))) return true;
  const body = prefix && secret.toLowerCase().startsWith(prefix.toLowerCase()) ? secret.slice(prefix.length) : secret;
  if (PLACEHOLDER_WORDS.test(body)) return true;
  if (/(.)\1{5,}/.test(body)) return true;
  if (body.length >= 12 && hasSequence(body)) return true;
  // A sequence woven through the other characters: `a1b2c3d4e5f6…`, `d4c3b2a1-f6e5-h8g7`.
  const letters = body.replace(/[^A-Za-z]/g, '');
  const digits = body.replace(/[^0-9]/g, '');
  if (body.length >= 12 && ((letters.length >= 8 && hasSequence(letters, ALPHABETS)) || (digits.length >= 8 && hasSequence(digits, ALPHABETS)))) return true;
  if (body.length >= 16 && new Set(body).size < Math.min(8, body.length / 3)) return true;
  return false;
}
