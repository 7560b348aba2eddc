/** The parts of the `content-disposition` package (jshttp) the service uses; it ships no types. */
declare module 'content-disposition' {
  function contentDisposition(filename?: string, options?: { type?: string; fallback?: string | boolean }): string;
  namespace contentDisposition {
    function parse(header: string): { type: string; parameters: Record<string, string> };
  }
  export = contentDisposition;
}
