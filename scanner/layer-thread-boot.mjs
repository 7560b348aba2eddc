// The scan thread's entry: worker threads do not inherit tsx's loader, so it is registered here
// before the TypeScript module is loaded.
import { register } from 'tsx/esm/api';

register();
await import('./layer-thread.ts');
