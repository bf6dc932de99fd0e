// corral's web console: logs in with a key kept in this tab's
// sessionStorage, then shows one view at a time from /ui/api, polled every
// two seconds. Every value from the server goes into the page as text
// (textContent), never as markup.
'use strict';

const POLL_MS = 2000;
const KEY = 'corral.console.key';
const state = { tab: null, timer: null, generation: 0, selected: null, cpu: new Map() };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === 'class') node.className = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class Unauthorized extends Error {}

async function api(path, asBlob) {
  const key = sessionStorage.getItem(KEY) || '';
  const res = await fetch('/ui/api' + path, { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  if (res.status === 401) throw new Unauthorized('The key was refused.');
  if (!res.ok) {
    let message = res.status + ' ' + res.statusText;
    try { message = (await res.json()).error.message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return asBlob ? res.blob() : res.json();
}

// ---- formatting ----

function bytes(n) {
  if (n === undefined || n === null) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

function age(seconds) {
  if (seconds < 60) return seconds + ' s';
  if (seconds < 3600) return Math.floor(seconds / 60) + ' min';
  return Math.floor(seconds / 3600) + ' h ' + Math.floor((seconds % 3600) / 60) + ' min';
}

function when(unixSeconds) {
  return unixSeconds ? new Date(unixSeconds * 1000).toISOString().replace('T', ' ').slice(0, 19) : '';
}

const whenMs = (ms) => when(ms / 1000);

function bar(used, limit) {
  const share = limit ? Math.min(100, (100 * used) / limit) : 0;
  const fill = el('span', {});
  fill.style.width = share.toFixed(0) + '%'; // a style property, which the page's CSP allows
  return el('span', {}, el('span', { class: 'bar' }, fill), bytes(used) + (limit ? ' of ' + bytes(limit) : ''));
}

function table(headers, rows, onRow) {
  return el('table', {},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((r) => {
      const tr = el('tr', onRow ? { class: 'clickable', onclick: () => onRow(r.item) } : {},
        r.cells.map((c) => el('td', {}, c)));
      if (r.id) tr.dataset.id = r.id;
      return tr;
    })));
}

// ---- views ----

function cpuShare(s) {
  // CPU share between two polls, from the CPU time the sandbox used.
  const u = s.usage;
  if (!u) return '';
  const before = state.cpu.get(s.id);
  state.cpu.set(s.id, { ns: u.cpu_ns, at: u.at_ms });
  if (!before || u.at_ms <= before.at) return u.cpu_percent.toFixed(1) + ' %';
  return ((100 * (u.cpu_ns - before.ns)) / ((u.at_ms - before.at) * 1e6)).toFixed(1) + ' %';
}

const views = {
  sandboxes: {
    title: 'Live sandboxes',
    async render() {
      const { sandboxes } = await api('/sandboxes');
      sandboxes.sort((a, b) => b.started_at - a.started_at);
      return [
        el('p', { class: 'muted' }, sandboxes.length + ' running'),
        table(['Sandbox', 'Template', 'Owner', 'Age', 'Memory', 'CPU', 'Network', 'State'],
          sandboxes.map((s) => ({
            id: s.id,
            cells: [s.id, s.template, s.owner || '—', age(s.age_seconds),
              s.usage ? bar(s.usage.memory_used, s.usage.memory_limit) : '', cpuShare(s), s.network,
              s.paused ? 'paused' : 'running'],
          }))),
      ];
    },
  },
  executions: {
    title: 'Executions',
    async render() {
      const page = await api('/executions?limit=100');
      if (!page.data.length && !state.selected) return [el('p', { class: 'muted' }, 'Nothing has run yet.')];
      const rows = page.data.map((x) => ({
        id: x.id,
        item: x,
        cells: [whenMs(x.started_at), x.key || '—', x.surface, x.sandbox_id || '',
          x.kind, (x.code || '').split('\n')[0].slice(0, 80), x.outcome + (x.error_name ? ' (' + x.error_name + ')' : ''),
          x.duration_ms + ' ms'],
      }));
      const out = [table(['Started', 'Key', 'Surface', 'Sandbox', 'Kind', 'Code', 'Outcome', 'Took'], rows,
        (x) => { state.selected = x.id; refresh(); })];
      if (state.selected) out.push(await executionDetail(state.selected));
      return out;
    },
  },
  containers: {
    title: 'Containers',
    async render() {
      const { containers } = await api('/containers');
      if (!containers.length) return [el('p', { class: 'muted' }, 'No container is running.')];
      return containers.map((c) => el('div', { class: 'card', 'data-id': c.id },
        el('h3', {}, c.name || c.id),
        el('p', { class: 'muted' }, c.id + ' · ' + (c.owner || 'no key') + ' · created ' + when(c.created_at) +
          (c.memory_limit ? ' · ' + c.memory_limit : '')),
        c.files.length
          ? table(['File', 'Bytes', 'Created', ''], c.files.map((f) => ({
            id: f.id,
            cells: [f.path, bytes(f.bytes), when(f.created_at),
              el('button', { type: 'button', onclick: () => download(c.id, f) }, 'Download')],
          })))
          : el('p', { class: 'muted' }, 'No files.')));
    },
  },
  keys: {
    title: 'Keys',
    async render() {
      const { keys } = await api('/keys');
      if (!keys.length) return [el('p', { class: 'muted' }, 'No virtual key exists (POST /key/generate).')];
      return keys.map((k) => el('div', { class: 'card', 'data-alias': k.key_alias || '' },
        el('h3', {}, k.key_alias || 'key ' + k.token_start),
        el('p', { class: 'muted' }, 'sha256 ' + k.token_start + '… · created ' + when(k.created_at) +
          (k.models && k.models.length ? ' · models ' + k.models.join(', ') : '') + (k.rpm_limit ? ' · ' + k.rpm_limit + ' rpm' : '')),
        usageChart(k.usage)));
    },
  },
  egress: {
    title: 'Egress denials',
    async render() {
      const { denials } = await api('/egress');
      if (!denials.length) return [el('p', { class: 'muted' }, 'No connection was denied.')];
      return [table(['When', 'Sandbox', 'Destination', 'Reason'],
        denials.map((d) => ({ cells: [when(d.time), d.sandbox_id, d.destination, d.reason] })))];
    },
  },
};

async function executionDetail(id) {
  const x = await api('/executions/' + encodeURIComponent(id));
  const images = (x.images || []).filter((img) => /^image\/(png|jpeg)$/.test(img.type)).map((img, i) =>
    el('img', { src: 'data:' + img.type + ';base64,' + img.data, alt: 'image ' + (i + 1) + ' the code displayed' }));
  return el('div', { class: 'detail', id: 'execution' },
    el('h3', {}, 'Execution ' + x.id),
    el('p', { class: 'muted' }, [x.surface, x.kind, x.language, x.key, x.sandbox_id, x.template, x.outcome,
      x.exit_code === null ? null : 'exit ' + x.exit_code, whenMs(x.started_at), x.duration_ms + ' ms']
      .filter((v) => v !== null && v !== undefined && v !== '').join(' · ')),
    el('h4', {}, 'Code'), el('pre', { class: 'code' }, x.code || ''),
    x.stdout ? [el('h4', {}, 'Output'), el('pre', { class: 'stdout' }, x.stdout)] : null,
    x.stderr ? [el('h4', {}, 'Errors'), el('pre', { class: 'stderr' }, x.stderr)] : null,
    x.error ? [el('h4', {}, 'Error: ' + (x.error_name || '')), el('pre', { class: 'error' }, x.error)] : null,
    images.length ? [el('h4', {}, 'Images'), images] : null);
}

// Requests by day over the last 31 days (UTC), one bar a day, tokens and
// code calls in each bar's title.
const CHART_DAYS = 31;

function usageChart(usage) {
  const byDay = new Map((usage || []).map((d) => [d.day, d]));
  const days = [];
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
  for (let i = CHART_DAYS - 1; i >= 0; i--) {
    const day = new Date(today - i * 86400000).toISOString().slice(0, 10);
    days.push(byDay.get(day) || { day, requests: 0, input_tokens: 0, output_tokens: 0, code_calls: 0 });
  }
  const width = 620, height = 120, pad = 18;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'chart');
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'requests per day');
  const max = Math.max(1, ...days.map((d) => d.requests));
  const slot = (width - 2 * pad) / CHART_DAYS;
  days.forEach((d, i) => {
    const h = ((height - 2 * pad) * d.requests) / max;
    if (d.requests) {
      const rect = document.createElementNS(ns, 'rect');
      rect.setAttribute('x', pad + i * slot + 1);
      rect.setAttribute('y', height - pad - h);
      rect.setAttribute('width', Math.max(2, slot - 2));
      rect.setAttribute('height', h);
      const tip = document.createElementNS(ns, 'title');
      tip.textContent = d.day + ': ' + d.requests + ' requests, ' + d.input_tokens + ' tokens in, ' +
        d.output_tokens + ' out, ' + d.code_calls + ' code calls';
      rect.append(tip);
      svg.append(rect);
    }
    if (i % 7 === 0 || i === CHART_DAYS - 1) {
      const label = document.createElementNS(ns, 'text');
      label.setAttribute('x', pad + i * slot);
      label.setAttribute('y', height - 4);
      label.textContent = d.day.slice(5);
      svg.append(label);
    }
  });
  const top = document.createElementNS(ns, 'text');
  top.setAttribute('x', 2);
  top.setAttribute('y', pad - 6);
  top.textContent = String(max);
  svg.append(top);
  const used = days.filter((d) => d.requests);
  const caption = el('p', { class: 'muted' }, used.length
    ? 'Requests per day (most ' + max + '): ' + used.map((d) => d.day + ' ' + d.requests).join(', ')
    : 'No use in the last ' + CHART_DAYS + ' days.');
  return [svg, caption];
}

async function download(containerId, file) {
  const blob = await api('/containers/' + encodeURIComponent(containerId) + '/files/' +
    encodeURIComponent(file.id) + '/content', true);
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: file.path.split('/').pop() });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---- the page ----

// Renders the current view; a render that a newer one overtook (a click, a
// tab changed meanwhile) is dropped, and one timer at a time polls.
async function refresh() {
  const view = views[state.tab];
  const generation = ++state.generation;
  clearTimeout(state.timer);
  try {
    const nodes = await view.render();
    if (generation !== state.generation) return;
    $('content').replaceChildren(...[nodes].flat(Infinity));
    $('status').textContent = 'Updated ' + new Date().toLocaleTimeString();
    $('status').className = 'muted';
  } catch (e) {
    if (generation !== state.generation) return;
    if (e instanceof Unauthorized) return showLogin(e.message);
    $('status').textContent = e.message;
    $('status').className = 'error';
  }
  state.timer = setTimeout(refresh, POLL_MS);
}

function show(tab) {
  state.tab = views[tab] ? tab : 'sandboxes';
  if (state.tab !== 'executions') state.selected = null;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.tab === state.tab);
  $('title').textContent = views[state.tab].title;
  $('content').replaceChildren();
  refresh();
}

function showLogin(message) {
  clearTimeout(state.timer);
  state.generation++;
  sessionStorage.removeItem(KEY);
  $('view').hidden = true;
  $('tabs').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('key').focus();
}

async function start() {
  try {
    const session = await api('/session');
    const role = session.role;
    if (!role) return showLogin(sessionStorage.getItem(KEY) ? session.message : '');
    $('login').hidden = true;
    $('view').hidden = false;
    $('tabs').hidden = false;
    $('logout').hidden = role === 'open';
    $('who').textContent = role === 'open' ? 'no key configured' : 'logged in: ' + role + ' key';
    show(location.hash.slice(1));
  } catch (e) {
    showLogin(sessionStorage.getItem(KEY) ? e.message : '');
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $('key').value);
    $('key').value = '';
    start();
  });
  $('logout').addEventListener('click', () => showLogin(''));
  window.addEventListener('hashchange', () => { if (!$('view').hidden) show(location.hash.slice(1)); });
  start();
});
