/** The npm package portainer-api-client 0.0.2 ships no types; this is the part the tests use. */
declare module 'portainer-api-client' {
  export default class PortainerClient {
    constructor(apiHost: string, username: string, password: string);
    /** Signs in on first use (POST /api/auth); resolves with the body on 200, {} on 204; rejects with the status code. */
    callApiWithKey(method: string, apiPath: string, requestData: unknown): Promise<any>;
  }
}
