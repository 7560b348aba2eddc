export { SandboxLogStream, parseEventId, parseTime, type LogEvent, type ContainerEvent, type Cursor, type LogStreamHandlers } from './log-stream.ts';
