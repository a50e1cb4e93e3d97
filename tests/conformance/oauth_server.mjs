// A remote MCP server that needs a login, for the tests: one Express app
// that is both the authorization server (the official TypeScript SDK's
// `mcpAuthRouter`: metadata, dynamic registration, authorization code with
// PKCE, refresh, revocation) and the protected MCP endpoint at /mcp
// (`requireBearerAuth`, stateless Streamable HTTP, one tool). The
// authorization endpoint approves without a user (a test has no browser):
// opening its URL sends the browser straight back to the client's callback.
//
// Tokens live `--token-seconds` (default 3600). Test controls, outside the
// OAuth surface: GET /test/stats (registrations, code exchanges, refreshes,
// calls, and every token and secret issued, so a test can look for them
// where they must not be), POST /test/revoke-all (every grant revoked: the
// next request is refused, and so is a refresh), POST /test/forget-clients
// (the registered clients are forgotten: their next token request is
// `invalid_client`), POST /test/preregister (a client made by hand, JSON
// `{client_id, client_secret, redirect_uris}`), POST /test/name-issuer
// (JSON `{url}`: the resource's metadata names that authorization server
// from now on). `clientSecretsReceived` counts requests that carried a
// client secret (in the body or as Basic credentials).
//
//   node oauth_server.mjs --http PORT [--token-seconds N]
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const express = require('express');
const { mcpAuthRouter, createOAuthMetadata } = require('@modelcontextprotocol/sdk/server/auth/router.js');
const { requireBearerAuth } = require('@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js');
const { InvalidTokenError, InvalidGrantError } = require('@modelcontextprotocol/sdk/server/auth/errors.js');
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { z } = require('zod');

const arg = (name, fallback) => {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : fallback;
};
const port = Number(arg('--http'));
const tokenSeconds = Number(arg('--token-seconds', '3600'));
const base = `http://127.0.0.1:${port}`;

const stats = { registrations: 0, codeExchanges: 0, refreshes: 0, refused: 0, calls: 0, clientSecretsReceived: 0, issued: [] };
let namedIssuer = null;
const clients = new Map();
const codes = new Map();
const tokens = new Map();
const refreshTokens = new Map();

const issue = (clientId, scopes, resource) => {
  const access = `at-${randomUUID()}`;
  const refresh = `rt-${randomUUID()}`;
  tokens.set(access, { clientId, scopes, resource, expiresAt: Date.now() + tokenSeconds * 1000 });
  refreshTokens.set(refresh, { clientId, scopes, resource });
  stats.issued.push(access, refresh);
  return {
    access_token: access,
    token_type: 'bearer',
    expires_in: tokenSeconds,
    refresh_token: refresh,
    scope: scopes.join(' '),
  };
};

const provider = {
  clientsStore: {
    async getClient(id) {
      return clients.get(id);
    },
    async registerClient(client) {
      stats.registrations += 1;
      if (client.client_secret) stats.issued.push(client.client_secret);
      clients.set(client.client_id, client);
      return client;
    },
  },
  async authorize(client, params, res) {
    const code = randomUUID();
    codes.set(code, { client, params });
    const target = new URL(params.redirectUri);
    target.searchParams.set('code', code);
    if (params.state !== undefined) target.searchParams.set('state', params.state);
    target.searchParams.set('iss', `${base}/`);
    res.redirect(target.toString());
  },
  async challengeForAuthorizationCode(_client, code) {
    const entry = codes.get(code);
    if (!entry) throw new InvalidGrantError('unknown code');
    return entry.params.codeChallenge;
  },
  async exchangeAuthorizationCode(client, code) {
    const entry = codes.get(code);
    if (!entry || entry.client.client_id !== client.client_id) throw new InvalidGrantError('unknown code');
    codes.delete(code);
    stats.codeExchanges += 1;
    return issue(client.client_id, entry.params.scopes || [], entry.params.resource?.toString());
  },
  async exchangeRefreshToken(client, refreshToken) {
    const entry = refreshTokens.get(refreshToken);
    if (!entry || entry.clientId !== client.client_id) {
      stats.refused += 1;
      throw new InvalidGrantError('the refresh token is not valid');
    }
    stats.refreshes += 1;
    refreshTokens.delete(refreshToken);
    return issue(client.client_id, entry.scopes, entry.resource);
  },
  async verifyAccessToken(token) {
    const entry = tokens.get(token);
    if (!entry || entry.expiresAt < Date.now()) throw new InvalidTokenError('the token is not valid');
    return { token, clientId: entry.clientId, scopes: entry.scopes, expiresAt: Math.floor(entry.expiresAt / 1000) };
  },
  async revokeToken(_client, request) {
    tokens.delete(request.token);
    refreshTokens.delete(request.token);
  },
};

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
const devices = new Map();
const options = {
  provider,
  issuerUrl: new URL(`${base}/`),
  resourceServerUrl: new URL(`${base}/mcp`),
  scopesSupported: ['mcp:tools'],
};
const app = express();
app.use(express.urlencoded({ extended: false }), (req, _res, next) => {
  if (req.body?.client_secret || /^basic /i.test(req.headers.authorization || '')) {
    stats.clientSecretsReceived += 1;
  }
  next();
});
app.get('/.well-known/oauth-protected-resource/mcp', (_req, res, next) => {
  if (!namedIssuer) return next();
  res.json({ resource: `${base}/mcp`, authorization_servers: [namedIssuer] });
});
app.get('/.well-known/oauth-authorization-server', (_req, res) => {
  const metadata = createOAuthMetadata(options);
  res.json({
    ...metadata,
    device_authorization_endpoint: `${base}/device_authorization`,
    grant_types_supported: [...metadata.grant_types_supported, DEVICE_GRANT],
  });
});
app.post('/device_authorization', express.urlencoded({ extended: false }), (req, res) => {
  if (!clients.has(req.body.client_id)) return res.status(401).json({ error: 'invalid_client' });
  const deviceCode = `dc-${randomUUID()}`;
  const userCode = randomUUID().slice(0, 8).toUpperCase();
  devices.set(deviceCode, {
    userCode,
    clientId: req.body.client_id,
    scopes: (req.body.scope || '').split(' ').filter(Boolean),
    resource: req.body.resource,
    approved: false,
  });
  stats.issued.push(deviceCode);
  res.json({
    device_code: deviceCode,
    user_code: userCode,
    verification_uri: `${base}/device`,
    verification_uri_complete: `${base}/device?user_code=${userCode}`,
    expires_in: 300,
    interval: 1,
  });
});
app.get('/device', (req, res) => {
  for (const device of devices.values()) {
    if (device.userCode === req.query.user_code) device.approved = true;
  }
  res.send('approved');
});
app.post('/token', express.urlencoded({ extended: false }), (req, res, next) => {
  if (req.body.grant_type !== DEVICE_GRANT) return next();
  const device = devices.get(req.body.device_code);
  if (!device || device.clientId !== req.body.client_id) return res.status(400).json({ error: 'invalid_grant' });
  if (!device.approved) return res.status(400).json({ error: 'authorization_pending' });
  devices.delete(req.body.device_code);
  stats.codeExchanges += 1;
  res.json(issue(device.clientId, device.scopes, device.resource));
});
app.use(mcpAuthRouter(options));

app.get('/test/stats', (_req, res) => res.json(stats));
app.post('/test/revoke-all', (_req, res) => {
  tokens.clear();
  refreshTokens.clear();
  res.json({ ok: true });
});
app.post('/test/preregister', express.json(), (req, res) => {
  const { client_id, client_secret, redirect_uris } = req.body;
  clients.set(client_id, {
    client_id,
    client_secret,
    redirect_uris,
    token_endpoint_auth_method: 'client_secret_post',
    client_id_issued_at: Math.floor(Date.now() / 1000),
  });
  res.json({ ok: true });
});
app.post('/test/name-issuer', express.json(), (req, res) => {
  namedIssuer = req.body.url;
  res.json({ ok: true });
});
app.post('/test/forget-clients', (_req, res) => {
  clients.clear();
  res.json({ ok: true });
});

const bearer = requireBearerAuth({
  verifier: provider,
  resourceMetadataUrl: `${base}/.well-known/oauth-protected-resource/mcp`,
});
app.post('/mcp', express.json(), bearer, async (req, res) => {
  const server = new McpServer({ name: 'oauth-test-server', version: '1.0.0' });
  server.registerTool('whoami', {
    description: 'Says which OAuth client the call came from',
    inputSchema: { note: z.string().optional() },
  }, async () => {
    stats.calls += 1;
    return { content: [{ type: 'text', text: `client ${req.auth.clientId}` }] };
  });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
app.all('/mcp', bearer, (_req, res) => res.status(405).json({ error: 'method not allowed' }));

app.listen(port, '127.0.0.1');
