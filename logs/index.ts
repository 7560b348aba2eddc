export { SandboxLogStream, parseEventId, parseTime, type LogEvent, type ContainerEvent, type Cursor } from './log-stream.ts';
