import { useEffect, useRef, useState } from 'preact/hooks';
import { Terminal as XTerm } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';

/**
 * A shell as root in the sandbox (xterm.js over the API's websocket, on this origin with the
 * session cookie). Resizes with its box; Ctrl+V pastes (xterm's own paste, bracketed). A closed terminal (the sandbox went
 * to sleep, the network dropped) offers to reconnect, which wakes the sandbox again.
 */
export function Terminal({ path }: { path: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<'connecting' | 'open' | 'closed'>('connecting');
  const [reason, setReason] = useState('');
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    const term = new XTerm({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current!);
    fit.fit();
    setState('connecting');
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api${path}/terminal?cols=${term.cols}&rows=${term.rows}`;
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const send = (msg: object) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg)); };
    // The session takes the focus unless the user is typing in another field of the panel: the socket
    // opens a moment after the panel shows, and taking the focus then sent their keys to the shell.
    ws.onopen = () => {
      setState('open');
      const active = document.activeElement;
      const typingElsewhere = (active instanceof HTMLInputElement || active instanceof HTMLTextAreaElement || active instanceof HTMLSelectElement) && !box.current!.contains(active);
      if (!typingElsewhere) term.focus();
    };
    ws.onmessage = (e) => term.write(new Uint8Array(e.data as ArrayBuffer));
    ws.onclose = (e) => { setState('closed'); setReason(e.reason || 'the connection closed'); };
    // Ctrl+V pastes, as in the terminals of Windows and VS Code: xterm would send it as ^V and keep
    // the browser from pasting. Ctrl+Shift+V and ⌘V paste without this; the shell loses only ^V.
    term.attachCustomKeyEventHandler((e) => !(e.ctrlKey && !e.altKey && !e.metaKey && !e.shiftKey && e.key.toLowerCase() === 'v'));
    const typed = term.onData((data) => send({ type: 'input', data }));
    const resized = term.onResize(({ cols, rows }) => send({ type: 'resize', cols, rows }));
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(box.current!);
    return () => {
      observer.disconnect();
      typed.dispose();
      resized.dispose();
      ws.close();
      term.dispose();
    };
  }, [path, attempt]);

  return (
    <div class="terminal">
      <div ref={box} class="terminal-screen" data-state={state} />
      {state === 'connecting' && <p class="muted" role="status">Connecting… (an asleep sandbox is woken first)</p>}
      {state === 'closed' && <p role="status">Terminal closed: {reason}. <button type="button" onClick={() => setAttempt((n) => n + 1)}>Reconnect</button></p>}
    </div>
  );
}
