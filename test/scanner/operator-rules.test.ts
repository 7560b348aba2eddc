import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { scanText } from '../../scanner/content-scanner.ts';
import { scanLayer } from '../../scanner/layer-reader.ts';
import { parseRules, RulesFileError } from '../../scanner/operator-rules.ts';
import { builtInRules } from '../../scanner/rule-set.ts';
import { gzip, makeTar, sha256 } from '../../harness/oci.ts';

/** A team's gitleaks configuration, as gitleaks documents the format. */
const TEAM_RULES = `
title = "acme"

[[rules]]
id = "acme-api-key"
description = "ACME internal API key"
regex = '''(?i)acme[_-]?(?:api[_-]?)?key\\s*[:=]\\s*["']?([a-z0-9]{32})'''
secretGroup = 1
keywords = ["acme"]
entropy = 3.0

[[rules]]
id = "acme-session"
regex = '''(?P<sess>acmesess_[[:alnum:]]{24})'''
[rules.allowlist]
stopwords = ["fixture"]

[[rules]]
id = "acme-vault-file"
path = '''(?i)\\.acmevault$'''

[[rules]]
id = "hostile"
regex = '''(?i)(a+)+b'''

[allowlist]
description = "shared test tokens"
paths = ['''testdata/''']
regexes = ['''^ghp_TEAMFIXTURE''']
`;

describe('operator rules (SVC_SCAN_RULES, gitleaks format)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-scan-rules-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('adds rules (keywords, secretGroup, entropy, path-only) and allowlists to the built-in ones', async () => {
    const rules = parseRules(TEAM_RULES, 'acme.toml');
    assert.notEqual(rules.version, builtInRules().version, 'a layer read under other rules is read again');
    const layer = gzip(await makeTar([
      { path: 'app/settings.py', content: 'DEBUG = False\nACME_API_KEY = "k7j2h9g4f1d8s3a6q5w0e8r2t7y4u1i9"\n' },
      { path: 'app/session.txt', content: 'acmesess_Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1\n' },
      { path: 'app/fixture.txt', content: 'acmesess_fixtureZk3Lq9Rm2Xw8Tn5Vp\n' },
      { path: 'etc/prod.ACMEVAULT', content: 'opaque' },
      { path: 'testdata/token.txt', content: 'ghp_k8Fq2Lr7Zt4Wm1Np6Xc3Vb9Hd5Js0Ye2Ua7G\n' },
      { path: 'app/ci.txt', content: 'ghp_TEAMFIXTUREk8Fq2Lr7Zt4Wm1Np6Xc3Vb9Hd\n' },
      { path: 'app/long.txt', content: `${'a'.repeat(30_000)}c\n` },
    ]));
    const r = await scanLayer(Readable.from([layer]), { digest: sha256(layer), rules });
    assert.deepEqual(r.findings.map((f) => [f.path, f.rule, f.line]), [
      ['app/session.txt', 'acme-session', 1],
      ['app/settings.py', 'acme-api-key', 2],
      ['etc/prod.ACMEVAULT', 'acme-vault-file', undefined],
    ]);
    // The built-in rules alone see none of the team's formats (the API key only as a generic assignment), and do see the allowlisted token.
    const plain = await scanLayer(Readable.from([layer]), { digest: sha256(layer) });
    assert.deepEqual(plain.findings.map((f) => [f.path, f.rule]), [['app/ci.txt', 'github-token'], ['app/settings.py', 'generic-secret'], ['testdata/token.txt', 'github-token']]);
  });

  it('keeps a backtracking regex linear (RE2 semantics): (?i)(a+)+b over a 100 KB line returns', () => {
    // With backtracking this would run for longer than the universe; the runner's timeout is the bound.
    const rules = parseRules(TEAM_RULES, 'acme.toml');
    assert.deepEqual(scanText(rules, `${'a'.repeat(100_000)}c\n`), []);
    assert.deepEqual(scanText(rules, `${'a'.repeat(100_000)}c\nx AaAb y\n`).map((h) => [h.rule, h.line]), [['hostile', 2]], 'and it still matches');
  });

  it('refuses a bad file with the file, line and rule named', () => {
    const bad = (text: string) => {
      try {
        parseRules(text, 'team.toml');
      } catch (err) {
        assert.ok(err instanceof RulesFileError);
        return err.message;
      }
      assert.fail('no error');
    };
    assert.match(bad('[[rules]]\nid = "x"\nregex = "a\n'), /^team\.toml:3: not valid TOML/);
    assert.match(bad('title = "t"\n\n[[rules]]\nid = "ok"\nregex = "a"\n\n[[rules]]\nid = "lookbehind"\nregex = \'\'\'(?<=\\d\'\'\'\n'), /^team\.toml:7: rule "lookbehind": regex .* cannot be compiled in JavaScript/);
    assert.match(bad('[[rules]]\nid = "ungreedy"\nregex = \'\'\'(?U)a+\'\'\'\n'), /^team\.toml:1: rule "ungreedy": regex: the \(\?U\) flag/);
    assert.match(bad('[[rules]]\nid = "x"\nregexp = "a"\n'), /^team\.toml:1: rule "x": unknown key "regexp"/);
    assert.match(bad('[[rules]]\nid = "x"\nregex = "(a)"\nsecretGroup = 2\n'), /secretGroup" is 2 but the regex has 1 groups/);
    assert.match(bad('[[rules]]\nid = "x"\n'), /needs a "regex", a "path" or both/);
  });

  it('stops the service start on a bad file, naming the line, before anything runs', async () => {
    const file = path.join(dir, 'bad.toml');
    fs.writeFileSync(file, '[[rules]]\nid = "ok"\nregex = "a"\n\n[[rules]]\nid = "broken"\nregex = \'\'\'([a-z]\'\'\'\n');
    const child = spawn(process.execPath, ['--import', 'tsx', 'main.ts'], {
      cwd: path.resolve(import.meta.dirname, '../..'),
      env: { ...process.env, SVC_SCAN_RULES: file, SVC_DATA_DIR: path.join(dir, 'data'), SVC_HTTPS_PORT: '0', SVC_HTTP_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    clearTimeout(timer);
    assert.notEqual(code, 0, 'the start failed');
    assert.match(output, /bad\.toml:5: rule \\?"broken\\?": regex/);
    assert.ok(!fs.existsSync(path.join(dir, 'data')), 'nothing was started or written');
  });
});
