import v8 from 'node:v8';

/**
 * Operator rules are Go (RE2) regexes, which never backtrack; V8's regexes do, and a rule like
 * `(a+)+b` on a long line would hang a scan worker. V8 has a linear-time engine for the regexes it
 * supports (no backreferences or lookarounds: every RE2 regex); with this flag a regex that
 * backtracks more than V8's threshold (50 000 steps) is run again on it. Matches are the same.
 */
v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
