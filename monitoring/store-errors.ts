import type { Store } from '../store/index.ts';

/**
 * The store with every failed operation counted: a database that is away, a query that fails.
 * Refusals of our own catalogue (`SVC_…` codes: a name taken, a record missing) are answers, not
 * errors, and are not counted. The parts get this store; the store itself knows nothing of metrics.
 */
export function countingStoreErrors(store: Store, onError: () => void): Store {
  const counted = <T extends object>(part: T): T => new Proxy(part, {
    get(target, key) {
      const value = Reflect.get(target, key) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const fail = (err: unknown) => {
          if (!String((err as { code?: unknown })?.code ?? '').startsWith('SVC_')) onError();
          throw err;
        };
        try {
          const result = (value as (...a: unknown[]) => unknown).apply(target, args);
          return result instanceof Promise ? result.catch(fail) : result;
        } catch (err) {
          return fail(err);
        }
      };
    },
  });
  return {
    ...store,
    users: counted(store.users),
    tokens: counted(store.tokens),
    sandboxes: counted(store.sandboxes),
    registry: counted(store.registry),
    serviceKeys: counted(store.serviceKeys),
    audit: counted(store.audit),
  };
}
