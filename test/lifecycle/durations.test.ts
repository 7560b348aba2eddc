import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IDLE_OFF, displayDuration, normaliseDeepSleepAfter, normaliseIdleTimeout, parseDuration } from '../../lifecycle/durations.ts';
import { sandboxName, shortName } from '../../lifecycle/names.ts';

describe('durations', () => {
  it('parses the spec formats', () => {
    assert.equal(parseDuration('30s'), 30_000);
    assert.equal(parseDuration('45m'), 45 * 60_000);
    assert.equal(parseDuration('2h'), 2 * 3_600_000);
    assert.equal(parseDuration('14d'), 14 * 86_400_000);
    assert.equal(parseDuration('0'), null);
    assert.equal(parseDuration('off'), null);
    assert.equal(parseDuration('0m'), null);
  });

  it('refuses anything else with SVC_BAD_DURATION', () => {
    for (const bad of ['', '5', '5x', '-1m', '1.5h', '1h30m', ' 5m', 'never', 'OFF', '9999999d']) {
      assert.throws(() => parseDuration(bad), (err: { code: string; statusCode: number }) => err.code === 'SVC_BAD_DURATION' && err.statusCode === 400, bad);
    }
  });

  it('stores never as the spec says and displays it as never', () => {
    assert.equal(normaliseIdleTimeout('off'), IDLE_OFF);
    assert.equal(normaliseIdleTimeout('0'), '87600h');
    assert.equal(normaliseIdleTimeout('45m'), '45m');
    assert.equal(normaliseDeepSleepAfter('0'), 'off');
    assert.equal(displayDuration(IDLE_OFF), 'never');
    assert.equal(displayDuration('off'), 'never');
    assert.equal(displayDuration('2h'), '2h');
  });
});

describe('sandbox names', () => {
  it('adds the svc- prefix and keeps an existing one', () => {
    assert.equal(sandboxName('foo'), 'svc-foo');
    assert.equal(sandboxName('svc-foo-2'), 'svc-foo-2');
    assert.equal(shortName('svc-foo'), 'foo');
  });

  it('refuses malformed names', () => {
    for (const bad of ['', 'Foo', 'foo_bar', '-foo', 'foo-', 'a--b', 'svc-', 'x'.repeat(41), 'foo.bar', 'foo\nbar', '../x']) {
      assert.throws(() => sandboxName(bad), (err: { code: string }) => err.code === 'SVC_BAD_SANDBOX_NAME', JSON.stringify(bad));
    }
  });
});
