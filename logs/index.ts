export { SandboxLogStream, parseEventId, parseTime, type LogEvent, type ContainerEvent, type Cursor, type LogStreamHandlers } from './log-stream.ts';
export { recentLogs, MAX_RECENT_LINES, type RecentLine } from './recent-logs.ts';
