// Serves a fetch-style handler (`(Request) => Promise<Response>`, as the
// TypeScript SDK v2's HTTP entries are) on Node's HTTP server, at
// 127.0.0.1:PORT/mcp only, for the loopback names only (Host, and Origin
// when sent: DNS rebinding). Shared by our SDK v2 test servers.

import http from "node:http";

export function serveFetch(port, handle, onListening) {
  const loopback = (value) => /^(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$/.test(value ?? "");
  const server = http.createServer(async (req, res) => {
    if (!req.url.startsWith("/mcp")) {
      res.writeHead(404).end();
      return;
    }
    const origin = req.headers.origin;
    if (!loopback(req.headers.host) || (origin !== undefined && !loopback(origin.replace(/^https?:\/\//, "")))) {
      res.writeHead(403).end();
      return;
    }
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const headers = new Headers();
    for (const [key, value] of Object.entries(req.headers)) {
      if (Array.isArray(value)) value.forEach((v) => headers.append(key, v));
      else if (value !== undefined) headers.set(key, value);
    }
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    const request = new Request(`http://${req.headers.host ?? "127.0.0.1"}${req.url}`, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
      signal: abort.signal,
    });
    let response;
    try {
      response = await handle(request);
    } catch (err) {
      res.writeHead(500).end(String(err));
      return;
    }
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) {
      res.end();
      return;
    }
    try {
      for await (const chunk of response.body) res.write(chunk);
    } catch {
      // The client went away mid-stream.
    }
    res.end();
  });
  server.listen(port, "127.0.0.1", onListening);
  return server;
}
