// mcp-aggregator admin page: a plain client of the admin API (no framework,
// no build step). Everything from the API is put in the page as text
// (textContent / text nodes), never as markup: a server's tool descriptions
// are not trusted.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 5000;
  const FAST_POLL_MS = 1000;
  const VIEWS = ['servers', 'tools', 'search', 'audit'];
  const AUDIT_PAGE = 50;

  const state = {
    servers: [],
    serversJson: '',
    tools: null,
    toolsSignature: '',
    skills: new Map(),
    audit: [],
    auditMore: false,
    lastCalls: null,
    fastUntil: 0,
    timer: 0,
    leaving: false,
  };

  // ---- DOM helpers ---------------------------------------------------------

  /** Builds an element; string children become text nodes. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (value === null || value === undefined || value === false) continue;
        if (key === 'class') el.className = value;
        else if (key === 'text') el.textContent = value;
        else if (key === 'dataset') Object.assign(el.dataset, value);
        else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
        else el.setAttribute(key, value === true ? '' : String(value));
      }
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  const badge = (text, kind, plain) =>
    h('span', { class: `badge ${kind || ''}${plain ? ' plain' : ''}`, text });

  const muted = (text) => h('span', { class: 'muted', text });

  /** Replaces a table body's rows, keeping keyboard focus on the same control. */
  function replaceRows(tbody, rows, emptyText, columns) {
    const active = document.activeElement;
    const key = active && tbody.contains(active) ? active.dataset.key : null;
    if (rows.length === 0) {
      rows = [h('tr', null, h('td', { colspan: columns, class: 'empty', text: emptyText }))];
    }
    tbody.replaceChildren(...rows);
    if (key) {
      const again = tbody.querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  // ---- Formatting ----------------------------------------------------------

  const STATUS_KIND = {
    CONNECTED: 'ok', DEGRADED: 'warn', CONNECTING: 'info', ERROR: 'bad', DISCONNECTED: '',
  };
  const capital = (s) => (s ? s.charAt(0).toUpperCase() + s.slice(1).toLowerCase() : s);
  const humanize = (key) => key.replace(/_/g, ' ');

  function statusBadge(status) {
    return badge(capital(status || 'unknown'), STATUS_KIND[status] || '');
  }

  function ago(iso) {
    const then = Date.parse(iso);
    if (Number.isNaN(then)) return '';
    const s = Math.max(0, Math.round((Date.now() - then) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }

  function localTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso || '';
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function duration(seconds) {
    const s = Math.floor(seconds);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  const number = (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '—');
  const ms = (v) => (v === null || v === undefined ? null : `${v < 10 ? v.toFixed(1) : Math.round(v)} ms`);
  const percent = (ratio) => `${(ratio * 100).toFixed(ratio >= 0.999 || ratio === 0 ? 0 : 1)}%`;
  const clip = (text, max) => (text && text.length > max ? `${text.slice(0, max - 1)}…` : text);

  // ---- Messages ------------------------------------------------------------

  /** Shows a message in the live region (errors stay until dismissed). */
  function say(text, kind = 'error') {
    const box = $('alerts');
    for (const m of box.children) if (m.dataset.text === text) return;
    const close = h('button', { type: 'button', class: 'small', 'aria-label': 'Dismiss message', text: '✕' });
    const message = h('div', { class: `message ${kind}`, dataset: { text } },
      h('p', { text }), close);
    close.addEventListener('click', () => message.remove());
    box.append(message);
    while (box.children.length > 4) box.firstElementChild.remove();
    if (kind === 'ok') setTimeout(() => message.remove(), 6000);
  }

  function announce(text) {
    $('status').textContent = text;
  }

  // ---- API -----------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  /** The sign-in ended (or was never there): the daemon answers `/` with the form. */
  function signedOut() {
    if (state.leaving) return;
    state.leaving = true;
    location.assign('/');
  }

  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await send(path, init);
    } catch (err) {
      if (err instanceof ApiError) throw err;
      throw new ApiError(0, `Cannot reach the daemon (${err.message})`);
    }
    if (response.status === 401) {
      signedOut();
      throw new ApiError(401, 'The sign-in has expired');
    }
    if (response.status === 204) return null;
    const text = await response.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = null; }
    }
    if (!response.ok) {
      const detail = data && typeof data.detail === 'string'
        ? data.detail : `${method} ${path} failed: HTTP ${response.status}`;
      throw new ApiError(response.status, detail);
    }
    return data;
  }

  /** Every request the page makes, so signing out can wait for those in flight. */
  const inflight = new Set();
  function send(path, init) {
    if (state.leaving) return Promise.reject(new ApiError(0, 'The page is being left'));
    const request = fetch(path, init);
    inflight.add(request);
    request.catch(() => {}).finally(() => inflight.delete(request));
    return request;
  }

  const serverPath = (name) => `/api/v1/aggregator/servers/${encodeURIComponent(name)}`;

  function failed(err) {
    if (state.leaving || (err && err.status === 401)) return;
    say(err && err.message ? err.message : String(err));
  }

  // ---- Live figures (/metrics, /healthz) ----------------------------------

  /** Parses the OpenMetrics / Prometheus text exposition into samples. */
  function parseMetrics(text) {
    const samples = [];
    for (const line of text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[2]) {
        for (const l of m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
          labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
        }
      }
      samples.push({ name: m[1], labels, value: Number(m[3]) });
    }
    return samples;
  }

  function figure(id, text, note) {
    $(id).replaceChildren(text, note ? h('small', { text: note }) : '');
  }

  async function loadMetrics() {
    let response;
    try {
      response = await send('/metrics', { credentials: 'same-origin', headers: { Accept: 'application/openmetrics-text, text/plain' } });
    } catch {
      return;
    }
    if (response.status === 401) { signedOut(); return; }
    if (!response.ok) return;
    const samples = parseMetrics(await response.text());
    const present = (name) => samples.some((s) => s.name === name);
    const sum = (name, where) => samples
      .filter((s) => s.name === name && (!where || where(s.labels)))
      .reduce((total, s) => total + s.value, 0);
    const P = 'mcp_aggregator_';

    if (present(`${P}server_status`)) {
      const servers = new Set(samples.filter((s) => s.name === `${P}server_status`).map((s) => s.labels.server));
      const degraded = sum(`${P}server_status`, (l) => l.status === 'DEGRADED');
      figure('fig-connected', `${number(sum(`${P}server_status`, (l) => l.status === 'CONNECTED'))} / ${number(servers.size)}`,
        degraded ? `${number(degraded)} degraded` : null);
    } else {
      figure('fig-connected', '—');
    }
    figure('fig-tools', present(`${P}catalog_tools`) ? number(sum(`${P}catalog_tools`)) : '—');
    if (present(`${P}calls_total`)) {
      const calls = sum(`${P}calls_total`);
      const now = Date.now();
      let note = null;
      if (state.lastCalls && now > state.lastCalls.at) {
        const rate = ((calls - state.lastCalls.value) / (now - state.lastCalls.at)) * 60000;
        note = `${rate >= 10 || rate === 0 ? Math.round(rate) : rate.toFixed(1)}/min`;
      }
      state.lastCalls = { value: calls, at: now };
      figure('fig-calls', number(calls), note);
      const errors = sum(`${P}call_errors_total`);
      figure('fig-errors', number(errors), calls > 0 ? percent(errors / calls) : null);
    } else {
      figure('fig-calls', '—');
      figure('fig-errors', '—');
    }
    const count = sum(`${P}call_duration_seconds_count`);
    figure('fig-latency', count > 0 ? ms((sum(`${P}call_duration_seconds_sum`) / count) * 1000) : '—',
      count > 0 ? `over ${number(count)}` : null);
    figure('fig-memory', present(`${P}process_resident_memory_bytes`)
      ? `${(sum(`${P}process_resident_memory_bytes`) / 1048576).toFixed(0)} MiB` : '—');
  }

  async function loadHealth() {
    const pill = $('healthz');
    let response;
    let body = null;
    try {
      response = await send('/healthz', { credentials: 'same-origin', headers: { Accept: 'application/json' } });
      body = await response.json();
    } catch {
      if (state.leaving) return;
      pill.className = 'badge bad';
      pill.textContent = 'daemon unreachable';
      return;
    }
    if (body && typeof body.version === 'string') $('version').textContent = `v${body.version}`;
    if (body && Number.isFinite(body.uptime_seconds)) figure('fig-uptime', duration(body.uptime_seconds));
    if (response.ok && body && body.status === 'ok') {
      pill.className = 'badge ok';
      pill.textContent = 'healthy';
    } else {
      pill.className = 'badge warn';
      const storage = body && body.storage && body.storage.status;
      pill.textContent = storage && storage !== 'ok' ? `degraded: storage ${storage}` : 'degraded';
    }
  }

  // ---- Servers -------------------------------------------------------------

  const KNOWN_SERVER_KEYS = new Set(['id', 'name', 'description', 'transport_type', 'connection_config',
    'status', 'error_message', 'health_check_url', 'health_check_interval_secs', 'auto_connect',
    'priority', 'tool_count', 'last_health_check', 'health', 'registered_at', 'connected_at',
    'updated_at', 'source', 'protocol_version', 'oauth', 'auth', 'tools']);

  function target(server) {
    const c = server.connection_config || {};
    if (server.transport_type === 'STDIO') {
      return [c.command, ...(Array.isArray(c.args) ? c.args : [])]
        .filter((a) => typeof a === 'string')
        .map((a) => (/[\s"']/.test(a) || a === '' ? JSON.stringify(a) : a))
        .join(' ');
    }
    return c.base_url || c.url || '';
  }

  function authBadge(auth) {
    if (!auth) return null;
    switch (auth.state) {
      case 'authorized': return badge('logged in', 'ok');
      case 'needs_login': return badge('login needed', 'warn');
      case 'failed': return badge('login failed', 'bad');
      default: return null;
    }
  }

  /** Flags a later API version may add (`quarantined`, `changed`, …): shown, not interpreted. */
  function genericMarks(object, known) {
    const out = [];
    for (const [key, value] of Object.entries(object)) {
      if (known.has(key)) continue;
      if (value === true) {
        out.push(badge(humanize(key), 'warn'));
      } else if (typeof value === 'string' && /(status|state)$/.test(key)) {
        out.push(badge(`${humanize(key)}: ${value}`, 'info'));
      } else if (/(marks|flags)$/.test(key) && value && typeof value === 'object') {
        const entries = Array.isArray(value)
          ? value.filter((v) => typeof v === 'string').map((v) => [v, true])
          : Object.entries(value);
        for (const [k, v] of entries) {
          if (v === true) out.push(badge(humanize(k), 'warn'));
          else if (typeof v === 'string') out.push(badge(`${humanize(k)}: ${v}`, 'info'));
        }
      }
    }
    return out;
  }

  function healthCell(server) {
    const f = server.health;
    if (!f) return muted('not connected since start');
    const lines = [];
    const times = f.response_time_ms || {};
    lines.push(h('span', null, `uptime ${percent(f.uptime_ratio || 0)}`));
    if (times.p50 !== null && times.p50 !== undefined) {
      lines.push(h('span', { class: 'sub' }, `p50 ${ms(times.p50)}`, times.p95 !== null && times.p95 !== undefined ? ` · p95 ${ms(times.p95)}` : ''));
    }
    if (f.recent_calls > 0) {
      lines.push(h('span', { class: 'sub' }, `errors ${percent(f.error_rate || 0)} of ${number(f.recent_calls)} calls`));
    }
    if (f.consecutive_failures > 0) {
      lines.push(h('span', { class: 'sub error-text' }, `${f.consecutive_failures} failed check${f.consecutive_failures > 1 ? 's' : ''} in a row`));
    }
    if (f.degraded_reason) lines.push(h('span', { class: 'sub error-text', text: f.degraded_reason }));
    const checked = f.last_health_check || server.last_health_check;
    lines.push(h('span', { class: 'sub' }, checked ? `checked ${ago(checked)}` : 'not checked yet'));
    return lines;
  }

  function actionButton(server, action, label, handler, extra) {
    return h('button', {
      type: 'button', class: `small ${extra || ''}`, text: label,
      'aria-label': `${label} ${server.name}`,
      dataset: { key: `${server.id}:${action}` },
      onclick: (event) => handler(server, event.currentTarget),
    });
  }

  function serverRow(server) {
    const status = server.status;
    const auth = server.auth;
    const lastError = server.error_message || (server.health && server.health.last_error)
      || (auth && auth.state === 'failed' ? auth.detail : null);
    const actions = [];
    if (status === 'DISCONNECTED' || status === 'ERROR') actions.push(actionButton(server, 'connect', 'Connect', connectServer));
    if (status !== 'DISCONNECTED') actions.push(actionButton(server, 'disconnect', 'Disconnect', disconnectServer));
    if (auth && (auth.state === 'needs_login' || auth.state === 'failed')) {
      actions.push(actionButton(server, 'login', 'Log in', loginServer, 'primary'));
    }
    actions.push(actionButton(server, 'remove', 'Remove', removeServer, 'danger'));
    const source = server.source && server.source.kind && server.source.kind !== 'api'
      ? badge(`from ${server.source.kind}`, 'info', true) : null;
    return h('tr', { dataset: { server: server.name } },
      h('th', { scope: 'row' },
        h('span', { class: 'name', text: server.name }), ' ',
        badge(server.transport_type === 'HTTP' ? 'streamable HTTP' : (server.transport_type || '').toLowerCase(), '', true),
        source,
        server.description ? h('span', { class: 'sub', text: clip(server.description, 200) }) : null,
        h('span', { class: 'sub mono', text: clip(target(server), 160) })),
      h('td', { class: 'nowrap' },
        statusBadge(status), authBadge(auth), genericMarks(server, KNOWN_SERVER_KEYS),
        server.protocol_version ? h('span', { class: 'sub', text: `MCP ${server.protocol_version}` }) : null),
      h('td', null, healthCell(server)),
      h('td', { class: 'num', text: number(server.tool_count) }),
      h('td', null, lastError ? h('span', { class: 'error-text', text: clip(lastError, 400) }) : muted('—')),
      h('td', null, h('div', { class: 'actions' }, actions)));
  }

  function renderServers() {
    const rows = state.servers.map(serverRow);
    replaceRows($('servers-body'), rows, 'No servers registered yet: add one below.', 6);
    $('nav-servers-count').textContent = ` ${state.servers.length}`;
    const tools = state.servers.reduce((n, s) => n + (s.tool_count || 0), 0);
    $('nav-tools-count').textContent = ` ${tools}`;
    const names = state.servers.map((s) => s.name);
    for (const id of ['tools-server', 'search-server']) fillServerSelect($(id), names);
    $('audit-servers').replaceChildren(...names.map((n) => h('option', { value: n })));
  }

  function fillServerSelect(select, names) {
    const current = select.value;
    const have = [...select.options].slice(1).map((o) => o.value);
    if (have.join('\n') === names.join('\n')) return;
    select.replaceChildren(h('option', { value: '', text: 'All servers' }),
      ...names.map((n) => h('option', { value: n, text: n })));
    if (names.includes(current)) select.value = current;
  }

  async function loadServers() {
    const servers = await api('GET', '/api/v1/aggregator/servers');
    const json = JSON.stringify(servers);
    if (json !== state.serversJson) {
      state.serversJson = json;
      state.servers = servers;
      renderServers();
    }
    const signature = servers.map((s) => `${s.id}:${s.status}:${s.tool_count}:${s.updated_at}`).join('|');
    if (signature !== state.toolsSignature) {
      state.toolsSignature = signature;
      state.tools = null;
      if (currentView() === 'tools') await loadTools();
    }
  }

  function faster() {
    state.fastUntil = Date.now() + 10000;
    schedule(300);
  }

  async function act(button, work) {
    button.disabled = true;
    try {
      await work();
    } catch (err) {
      failed(err);
    } finally {
      button.disabled = false;
      faster();
    }
  }

  function connectServer(server, button) {
    return act(button, async () => {
      await api('POST', `${serverPath(server.name)}/connect`);
      say(`Connecting ${server.name}…`, 'ok');
    });
  }

  function disconnectServer(server, button) {
    return act(button, async () => {
      const r = await api('POST', `${serverPath(server.name)}/disconnect`);
      const cut = r && r.pending_requests ? ` (${r.pending_requests} calls cut off)` : '';
      say(`Disconnected ${server.name}${cut}`, 'ok');
    });
  }

  function safeUrl(text) {
    try {
      const url = new URL(text);
      return url.protocol === 'https:' || url.protocol === 'http:' ? url.href : null;
    } catch {
      return null;
    }
  }

  function loginServer(server, button) {
    return act(button, async () => {
      const r = await api('POST', `${serverPath(server.name)}/login`);
      const url = safeUrl(r.authorization_url);
      const notice = $('login-notice');
      const close = h('button', { type: 'button', class: 'small', text: 'Close', 'aria-label': 'Close the login notice' });
      close.addEventListener('click', () => { notice.hidden = true; notice.replaceChildren(); });
      const parts = [h('h3', { text: `Log in to ${server.name}` })];
      if (url) {
        parts.push(h('p', null, 'Open the authorization page: ',
          h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', text: clip(url, 120) })));
      } else {
        parts.push(h('p', { class: 'error-text', text: `The authorization URL is not an http(s) URL: ${r.authorization_url}` }));
      }
      if (r.user_code) {
        parts.push(h('p', null, 'Enter this code there: ', h('span', { class: 'code', text: r.user_code })));
      }
      if (r.expires_in) parts.push(h('p', { class: 'muted small', text: `The login stays open for ${duration(r.expires_in)}; the server connects once it is done.` }));
      parts.push(close);
      notice.replaceChildren(...parts);
      notice.hidden = false;
      if (url && !r.user_code) window.open(url, '_blank', 'noopener');
      announce(`Login to ${server.name} started`);
    });
  }

  function confirmRemoval(server) {
    const dialog = $('confirm');
    $('confirm-text').textContent = `Remove ${server.name}? It is disconnected, and its tools and history are deleted.`;
    $('confirm-ok').setAttribute('aria-label', `Remove ${server.name}`);
    dialog.returnValue = '';
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  async function removeServer(server, button) {
    if (!(await confirmRemoval(server))) return;
    await act(button, async () => {
      await api('DELETE', serverPath(server.name));
      say(`Removed ${server.name}`, 'ok');
      await loadServers();
      $('servers-heading').focus();
    });
  }

  // ---- Add a server --------------------------------------------------------

  /** Splits an argument line like a shell does for quotes and backslashes (nothing else). */
  function splitArgs(line) {
    const args = [];
    let current = '';
    let started = false;
    let quote = null;
    for (let i = 0; i < line.length; i += 1) {
      const c = line[i];
      if (quote) {
        if (c === quote) quote = null;
        else if (c === '\\' && quote === '"' && i + 1 < line.length) current += line[++i];
        else current += c;
      } else if (c === '"' || c === "'") {
        quote = c;
        started = true;
      } else if (c === '\\' && i + 1 < line.length) {
        current += line[++i];
        started = true;
      } else if (/\s/.test(c)) {
        if (started) args.push(current);
        current = '';
        started = false;
      } else {
        current += c;
        started = true;
      }
    }
    if (quote) throw new Error(`Arguments: a ${quote} quote is not closed`);
    if (started) args.push(current);
    return args;
  }

  function syncTransport() {
    const transport = $('add-transport').value;
    for (const field of $('add-form').querySelectorAll('[data-transport]')) {
      const on = field.dataset.transport.split(' ').includes(transport);
      field.hidden = !on;
      for (const input of field.querySelectorAll('input')) input.disabled = !on;
    }
  }

  async function addServer(event) {
    event.preventDefault();
    const form = event.currentTarget;
    if (!form.reportValidity()) return;
    const name = $('add-name').value.trim();
    const transport = $('add-transport').value;
    let config;
    try {
      if (transport === 'STDIO') {
        config = { command: $('add-command').value.trim(), args: splitArgs($('add-args').value) };
      } else if (transport === 'HTTP') {
        config = { base_url: $('add-url').value.trim() };
      } else {
        config = { url: $('add-url').value.trim() };
      }
    } catch (err) {
      say(err.message);
      return;
    }
    const body = {
      name,
      transport_type: transport,
      connection_config: config,
      auto_connect: $('add-autoconnect').checked,
    };
    const description = $('add-description').value.trim();
    if (description) body.description = description;
    const submit = $('add-submit');
    submit.disabled = true;
    $('add-state').textContent = `Registering ${name}…`;
    try {
      await api('POST', '/api/v1/aggregator/servers', body);
      $('add-state').textContent = '';
      say(`Registered ${name}`, 'ok');
      form.reset();
      syncTransport();
      await loadServers();
    } catch (err) {
      $('add-state').textContent = '';
      failed(err);
    } finally {
      submit.disabled = false;
      faster();
    }
  }

  // ---- Tools ---------------------------------------------------------------

  const KNOWN_TOOL_KEYS = new Set(['id', 'name', 'original_name', 'wire_name', 'rejected_reason',
    'description', 'input_schema', 'output_schema', 'annotations', 'source_server_id',
    'source_server', 'skill_ids', 'primary_skill_id', 'is_classified', 'classification_state',
    'skills', 'classification_error', 'is_external', 'discovered_at', 'updated_at']);

  async function loadSkills() {
    const skills = await api('GET', '/api/v1/skills?include_hidden=true');
    state.skills = new Map(skills.map((s) => [s.id, s.name]));
  }

  async function loadTools() {
    const [servers] = await Promise.all([
      api('GET', '/api/v1/aggregator/servers?include_tools=true'),
      state.skills.size ? null : loadSkills().catch(failed),
    ]);
    state.tools = servers.flatMap((s) => s.tools || []);
    renderTools();
  }

  function skillChips(assignments, ids, primary) {
    const list = assignments && assignments.length
      ? assignments.map((a) => [a.skill_id, a.confidence])
      : (ids || []).map((id) => [id, null]);
    list.sort((a, b) => (b[0] === primary) - (a[0] === primary));
    return list.map(([id, confidence]) => h('span', { class: 'chip' },
      state.skills.get(id) || id,
      confidence === null || confidence === undefined ? null : h('span', { class: 'conf', text: percent(confidence) })));
  }

  function toolMarks(tool) {
    const out = [];
    if (tool.rejected_reason) {
      out.push(badge('rejected', 'bad'), h('span', { class: 'sub error-text', text: clip(tool.rejected_reason, 200) }));
    }
    if (tool.classification_state && tool.classification_state !== 'CLASSIFIED') {
      out.push(badge(tool.classification_state.toLowerCase(), ''));
    }
    if (tool.classification_error) out.push(badge('classification failed', 'bad'));
    const a = tool.annotations;
    if (a && typeof a === 'object') {
      if (a.readOnlyHint === true) out.push(badge('read-only', 'info', true));
      if (a.destructiveHint === true) out.push(badge('destructive', 'warn', true));
    }
    out.push(...genericMarks(tool, KNOWN_TOOL_KEYS));
    return out;
  }

  function renderTools() {
    const tbody = $('tools-body');
    if (!state.tools) return;
    const server = $('tools-server').value;
    const filter = $('tools-filter').value.trim().toLowerCase();
    const shown = state.tools
      .filter((t) => !server || t.source_server === server)
      .filter((t) => !filter || t.id.toLowerCase().includes(filter)
        || (t.description || '').toLowerCase().includes(filter))
      .sort((a, b) => a.id.localeCompare(b.id));
    const rows = shown.map((t) => {
      const chips = skillChips(t.skills, t.skill_ids, t.primary_skill_id);
      const marks = toolMarks(t);
      return h('tr', { dataset: { tool: t.id } },
        h('th', { scope: 'row' },
          h('span', { class: 'name', text: t.original_name }),
          h('span', { class: 'sub mono', text: t.wire_name || t.id })),
        h('td', { text: t.source_server }),
        h('td', { class: 'desc' }, t.description ? clip(t.description, 300) : muted('—')),
        h('td', null, chips.length ? chips : muted('—')),
        h('td', null, marks.length ? marks : muted('—')));
    });
    replaceRows(tbody, rows, state.tools.length ? 'No tool matches the filter.' : 'No tools yet: servers list theirs once connected.', 5);
    const total = state.tools.length;
    $('tools-summary').textContent = shown.length === total
      ? `${number(total)} tool${total === 1 ? '' : 's'}`
      : `${number(shown.length)} of ${number(total)} tools`;
  }

  // ---- Search --------------------------------------------------------------

  async function search(event) {
    event.preventDefault();
    const query = $('search-query').value.trim();
    if (!query) {
      $('search-query').reportValidity();
      return;
    }
    const body = { query, limit: 25, mode: $('search-mode').value };
    const server = $('search-server').value;
    if (server) body.server_filter = [server];
    $('search-summary').textContent = 'Searching…';
    let r;
    try {
      if (!state.skills.size) await loadSkills().catch(failed);
      r = await api('POST', '/api/v1/search', body);
    } catch (err) {
      $('search-summary').textContent = '';
      failed(err);
      return;
    }
    const tools = r.tools || [];
    const top = tools.reduce((m, t) => Math.max(m, t.score), 1);
    const rows = tools.map((t, i) => h('tr', { dataset: { tool: t.id } },
      h('td', { class: 'num', text: String(i + 1) }),
      h('th', { scope: 'row' },
        h('span', { class: 'name', text: t.original_name }),
        h('span', { class: 'sub mono', text: t.wire_name || t.id })),
      h('td', null, t.source_server.name, ' ',
        t.source_server.status !== 'CONNECTED' ? statusBadge(t.source_server.status) : null),
      h('td', { class: 'nowrap' }, h('span', { class: 'score' },
        h('meter', { min: 0, max: top, value: t.score, 'aria-hidden': 'true' }),
        h('span', { class: 'mono', text: t.score.toFixed(3) }))),
      h('td', null, skillChips(null, t.skill_ids, t.primary_skill_id)),
      h('td', { class: 'desc' }, t.description ? clip(t.description, 300) : muted('—'))));
    $('search-results').hidden = tools.length === 0;
    replaceRows($('search-body'), rows, '', 6);
    const m = r.metadata || {};
    const summary = [`${tools.length} result${tools.length === 1 ? '' : 's'} for “${r.query}”`];
    if (Number.isFinite(m.total_tools_searched)) {
      summary.push(`${number(m.total_tools_searched)} tools on ${number(m.servers_searched)} server${m.servers_searched === 1 ? '' : 's'} searched`);
    }
    if (m.mode) summary.push(`${m.mode} mode`);
    if (Number.isFinite(m.took_ms)) summary.push(ms(m.took_ms));
    $('search-summary').replaceChildren(summary.join(' · '),
      m.warning ? h('span', { class: 'sub error-text', text: m.warning }) : '');
  }

  // ---- Audit log -----------------------------------------------------------

  function auditParams(before) {
    const params = new URLSearchParams({ limit: String(AUDIT_PAGE) });
    const server = $('audit-server').value.trim();
    const action = $('audit-action').value.trim();
    const result = $('audit-result').value;
    if (server) params.set('server', server);
    if (action) params.set('action', action);
    if (result) params.set('result', result);
    if (before !== undefined) params.set('before', String(before));
    return params;
  }

  async function loadAudit(older) {
    const last = state.audit[state.audit.length - 1];
    const page = await api('GET', `/api/v1/aggregator/audit?${auditParams(older && last ? last.seq : undefined)}`);
    state.audit = older ? state.audit.concat(page) : page;
    state.auditMore = Boolean(older);
    $('audit-more').hidden = page.length < AUDIT_PAGE;
    const rows = state.audit.map((e) => {
      const ok = e.result === 'ok';
      return h('tr', { dataset: { seq: String(e.seq) } },
        h('td', { class: 'nowrap' }, h('time', { datetime: e.timestamp, text: localTime(e.timestamp) })),
        h('td', { class: 'mono small', text: e.actor }),
        h('td', null, badge(e.action, 'info', true)),
        h('td', { class: 'nowrap' }, e.server ? e.server : muted('—')),
        h('td', null, ok ? badge('ok', 'ok') : [badge('error', 'bad'), h('span', { class: 'sub error-text', text: clip(e.result, 300) })]),
        h('td', { class: 'small' }, e.details ? clip(e.details, 300) : muted('—')));
    });
    replaceRows($('audit-body'), rows, 'No audit entries match.', 6);
  }

  // ---- Views and polling ---------------------------------------------------

  function currentView() {
    const view = location.hash.slice(1);
    return VIEWS.includes(view) ? view : 'servers';
  }

  function showView(focus) {
    const view = currentView();
    for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
    for (const a of document.querySelectorAll('nav a[data-view]')) {
      if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const heading = $(`${view}-heading`);
    document.title = `${heading.textContent} · mcp-aggregator`;
    if (focus) heading.focus();
    if (view === 'tools' && !state.tools) loadTools().catch(failed);
    if (view === 'audit') {
      state.auditMore = false;
      loadAudit(false).catch(failed);
    }
    if (view === 'search' && focus) $('search-query').focus();
  }

  async function tick() {
    const view = currentView();
    const work = [loadHealth(), loadMetrics(), loadServers()];
    if (view === 'audit' && !state.auditMore) work.push(loadAudit(false));
    const results = await Promise.allSettled(work);
    for (const r of results) if (r.status === 'rejected') failed(r.reason);
  }

  function schedule(delay) {
    clearTimeout(state.timer);
    state.timer = setTimeout(async () => {
      if (!document.hidden) await tick();
      if (!state.leaving) schedule(Date.now() < state.fastUntil ? FAST_POLL_MS : POLL_MS);
    }, delay);
  }

  function start() {
    $('add-form').addEventListener('submit', addServer);
    $('add-transport').addEventListener('change', syncTransport);
    // The reset event comes before the fields are reset.
    $('add-form').addEventListener('reset', () => setTimeout(syncTransport, 0));
    syncTransport();
    $('servers-refresh').addEventListener('click', () => { tick(); });
    $('tools-refresh').addEventListener('click', () => {
      state.skills = new Map();
      loadTools().catch(failed);
    });
    $('tools-server').addEventListener('change', renderTools);
    $('tools-filter').addEventListener('input', renderTools);
    $('search-form').addEventListener('submit', search);
    $('audit-form').addEventListener('submit', (event) => {
      event.preventDefault();
      state.auditMore = false;
      loadAudit(false).catch(failed);
    });
    $('audit-form').addEventListener('reset', () => {
      setTimeout(() => { state.auditMore = false; loadAudit(false).catch(failed); }, 0);
    });
    $('audit-more').addEventListener('click', () => loadAudit(true).catch(failed));
    // Only a daemon that asks for its token has a session to leave.
    fetch('/admin/session', { credentials: 'same-origin' })
      .then((response) => (response.ok ? response.json() : null))
      .then((session) => { if (session && !session.token_required) $('signout').hidden = true; })
      .catch(() => {});
    $('signout').addEventListener('click', async () => {
      // Requests already sent still carry the session: let them finish
      // first, or they come back 401.
      state.leaving = true;
      clearTimeout(state.timer);
      await Promise.allSettled([...inflight]);
      try {
        const response = await fetch('/admin/session', { method: 'DELETE', credentials: 'same-origin' });
        await response.arrayBuffer();
      } finally {
        location.reload();
      }
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) schedule(0); });
    window.addEventListener('hashchange', () => showView(true));
    showView(false);
    schedule(0);
  }

  start();
})();
