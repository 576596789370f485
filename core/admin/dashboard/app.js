// The Fibril dashboard: one page over the admin API (docs/admin.md#dashboard).
// No framework and no build step: hash routes pick a section, a 2 s loop
// fetches what the visible page shows and patches the DOM in place, and
// the publish and deliver rates of every queue and stream are kept in
// memory (the last few minutes) for the sparklines.
'use strict';

const REFRESH_MS = 2000;
const HISTORY = 150; // samples: five minutes at one every 2 s
const PAGES = ['overview', 'cluster', 'queues', 'streams', 'connections', 'settings'];
const TITLES = {overview: 'Overview', cluster: 'Cluster', queues: 'Queues', streams: 'Streams',
  connections: 'Connections', settings: 'Settings'};

const state = {
  page: 'overview', overview: null, topo: null, standalone: false, queues: null,
  conns: null, settings: null, dirty: false, selected: {queue: null, stream: null},
  hist: new Map(), // key → [{pub, del}]
  busy: false, again: false, timer: 0,
};

// ---- helpers

const $ = (sel, root = document) => root.querySelector(sel);

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids.flat()) if (c != null && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

const num = (n) => (n == null ? '—' : Number(n).toLocaleString('en-US'));
const rate = (n) => (n == null ? '—' : n < 10 ? (Math.round(n * 10) / 10).toString() : Math.round(n).toLocaleString('en-US'));

function bytes(n) {
  if (n == null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
}

function duration(s) {
  const d = Math.floor(s / 86400), hr = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = s % 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

function badge(text, kind) { return h('span', {class: 'badge ' + (kind || text)}, text); }
function td(col, content, cls) { return h('td', {'data-col': col, class: cls}, content); }
function numTd(col, content) { return td(col, content, 'num'); }

// A queue partition's depth fields (also accepted capitalised).
const depth = (q, f) => (q ? (q[f] ?? q[f[0].toUpperCase() + f.slice(1)] ?? 0) : null);

class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status; this.body = body;
  }
}

async function api(path, opts = {}) {
  const init = {cache: 'no-store', credentials: 'same-origin', headers: {Accept: 'application/json'}, ...opts};
  if (opts.json !== undefined) {
    init.body = JSON.stringify(opts.json);
    init.headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = {message: text}; }
  if (!r.ok) throw new APIError(r.status, body);
  return body;
}

// patch replaces tbody's rows with rows (keyed by data-key), changing only
// the cells whose content changed, so focus and selection survive a refresh.
function patch(tbody, rows) {
  const old = new Map([...tbody.children].map((tr) => [tr.dataset.key, tr]));
  let prev = null;
  for (const tr of rows) {
    let cur = old.get(tr.dataset.key);
    if (cur) {
      old.delete(tr.dataset.key);
      cur.className = tr.className;
      const a = cur.children, b = [...tr.children];
      if (a.length !== b.length) cur.replaceChildren(...b);
      else b.forEach((c, i) => { if (a[i].outerHTML !== c.outerHTML) a[i].replaceWith(c); });
    } else cur = tr;
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== cur) tbody.insertBefore(cur, want);
    prev = cur;
  }
  old.forEach((tr) => tr.remove());
  const empty = tbody.closest('section').querySelector(':scope > .empty');
  if (empty) empty.hidden = rows.length > 0;
}

// ---- rate history and sparklines

const qkey = (q) => `${q.kind}|${q.topic}|${q.group || ''}`;

function record(queues) {
  const seen = new Set(['*total']);
  let pub = 0, del = 0;
  for (const q of queues) {
    const k = qkey(q);
    seen.add(k);
    pub += q.totals.publish_rate; del += q.totals.deliver_rate;
    push(k, q.totals.publish_rate, q.totals.deliver_rate);
  }
  push('*total', pub, del);
  for (const k of state.hist.keys()) if (!seen.has(k)) state.hist.delete(k);
}

function push(k, pub, del) {
  let a = state.hist.get(k);
  if (!a) state.hist.set(k, (a = []));
  a.push({pub, del});
  if (a.length > HISTORY) a.splice(0, a.length - HISTORY);
}

// spark draws the publish (solid) and deliver (dashed) rates of key over
// the history window, newest at the right; stretch fills its box.
function spark(key, w = 96, ht = 24, stretch = false) {
  const a = state.hist.get(key) || [];
  const max = Math.max(1, ...a.map((s) => Math.max(s.pub, s.del)));
  const last = a[a.length - 1] || {pub: 0, del: 0};
  const mins = Math.max(1, Math.round((a.length * REFRESH_MS) / 60000));
  const e = svg('svg', {class: 'spark', width: w, height: ht, viewBox: `0 0 ${w} ${ht}`, role: 'img',
    preserveAspectRatio: stretch ? 'none' : 'xMidYMid meet',
    'aria-label': `Last ${mins} min: publish ${rate(last.pub)}/s, deliver ${rate(last.del)}/s (peak ${rate(max)}/s)`});
  e.append(svg('line', {x1: 0, y1: ht - 0.5, x2: w, y2: ht - 0.5, class: 'base'}));
  if (stretch) e.append(svg('line', {x1: 0, y1: 1, x2: w, y2: 1, class: 'base'}));
  const line = (f, cls) => {
    const pts = a.map((s, i) => `${(w * (i + HISTORY - a.length)) / (HISTORY - 1)},${ht - 1 - ((ht - 2) * s[f]) / max}`);
    if (pts.length === 1) pts.unshift(`0,${pts[0].split(',')[1]}`);
    if (pts.length) e.append(svg('polyline', {points: pts.join(' '), class: cls}));
  };
  line('pub', 'pub'); line('del', 'del');
  return e;
}

// ---- pages

function renderOverview() {
  const ov = state.overview, topo = state.topo, qs = state.queues || [];
  const cards = $('#overview-cards');
  if (!ov) return;
  const queues = qs.filter((q) => q.kind === 'queue'), streams = qs.filter((q) => q.kind === 'stream');
  const sum = (list, f) => list.reduce((n, q) => n + (q.totals[f] || 0), 0);
  const nodes = topo ? topo.nodes : [];
  const live = nodes.filter((n) => n.live).length;
  const card = (id, label, value, note) => h('div', {class: 'card', 'data-card': id},
    h('dt', {}, label), h('dd', {}, value, note ? h('small', {class: 'muted'}, note) : null));
  cards.replaceChildren(
    card('version', 'Version', ov.version, ov.go_version),
    card('node', 'Node', ov.node || (ov.mode === 'cluster' ? 'joining…' : '—'), ov.owner_id ? 'owner ' + ov.owner_id.slice(0, 8) : null),
    card('mode', 'Mode', ov.mode),
    card('uptime', 'Uptime', duration(ov.uptime_seconds), 'since ' + new Date(ov.started_at).toLocaleString()),
    card('nodes', 'Nodes live', ov.mode === 'cluster' ? `${live} / ${nodes.length}` : '1 (standalone)'),
    card('queues', 'Queues / streams', `${queues.length} / ${streams.length}`),
    card('ready', 'Ready', num(sum(queues, 'ready'))),
    card('inflight', 'In flight', num(sum(queues, 'inflight'))),
    card('consumers', 'Consumers', num(sum(queues, 'consumers'))),
    card('rates', 'Publish / deliver per s', `${rate(sum(qs, 'publish_rate'))} / ${rate(sum(qs, 'deliver_rate'))}`),
    card('trend', 'Trend', spark('*total', 160, 32)));
  const alerts = [];
  if (topo) {
    if (topo.coordination && topo.coordination.no_live_public_broker)
      alerts.push(['bad', 'No live public broker: clients cannot reach privately owned partitions.']);
    const ur = topo.replication ? topo.replication.under_replicated : 0;
    if (ur > 0) alerts.push(['warn', `${ur} partition${ur === 1 ? ' is' : 's are'} under-replicated (target ${topo.replication.target_followers} followers).`]);
    for (const n of nodes) {
      if (!n.live) alerts.push(['bad', `Node ${n.id} is down.`]);
      else if (n.draining) alerts.push(['warn', `Node ${n.id} is draining.`]);
    }
  }
  const unrep = sum(qs, 'unreported');
  if (unrep > 0) alerts.push(['warn', `${unrep} partition${unrep === 1 ? ' has' : 's have'} no numbers (owner down, unreachable or not loaded): see Queues and Streams.`]);
  const ul = $('#alerts');
  ul.replaceChildren(...(alerts.length ? alerts.map(([k, t]) => h('li', {class: 'alert ' + k}, t))
    : [h('li', {class: 'alert ok'}, 'No alerts.')]));
}

function renderCluster() {
  const note = $('#cluster-note'), tbody = $('#cluster-table tbody');
  const topo = state.topo;
  if (state.standalone || !topo) {
    note.textContent = state.standalone ? 'This broker runs standalone: it is not part of a cluster.' : 'Loading…';
    $('#cluster-table').hidden = true;
    return;
  }
  $('#cluster-table').hidden = false;
  const owned = {}, followed = {};
  for (const p of topo.partitions) {
    if (p.owner) owned[p.owner] = (owned[p.owner] || 0) + 1;
    for (const f of p.followers || []) followed[f.node] = (followed[f.node] || 0) + 1;
  }
  note.replaceChildren(...[`Coordination index ${num(topo.index)}, generation ${num(topo.generation)}; follower target ${topo.replication.target_followers}, ` +
    `${topo.replication.under_replicated} under-replicated.`,
  topo.coordination.no_live_public_broker ? h('strong', {class: 'bad-text'}, ' No live public broker.') : null].filter(Boolean));
  patch(tbody, topo.nodes.map((n) => h('tr', {'data-key': n.id, class: n.live ? '' : 'down'},
    h('th', {scope: 'row', 'data-col': 'id'}, n.id, n.id === topo.self ? h('span', {class: 'muted'}, ' (this node)') : null),
    td('live', n.live ? badge('live') : badge('down')),
    td('visibility', n.visibility === 'private' ? badge('private') : badge(n.visibility || 'public', 'public')),
    td('draining', n.draining ? badge('draining') : 'no'),
    td('controller', n.controller ? badge('controller') : (n.id === topo.self ? 'no' : '—')),
    td('peer', h('code', {}, n.peer_addr || '—')),
    td('admin', n.admin_addr ? h('code', {}, n.admin_addr) : '—'),
    numTd('owned', num(owned[n.id] || 0)), numTd('followed', num(followed[n.id] || 0)))));
}

function renderChannels(kind) {
  const page = kind === 'queue' ? 'queues' : 'streams';
  const list = (state.queues || []).filter((q) => q.kind === kind);
  const tbody = $(`#${page}-table tbody`);
  const sel = state.selected[kind];
  patch(tbody, list.map((q) => {
    const k = qkey(q), t = q.totals;
    const name = h('button', {type: 'button', class: 'link', 'aria-expanded': String(sel === k),
      'aria-controls': `${page}-details`, onclick: () => select(kind, k)}, q.topic);
    const cells = kind === 'queue'
      ? [td('group', q.group || h('span', {class: 'muted'}, 'default')), numTd('partitions', q.partition_count),
        numTd('ready', num(t.ready)), numTd('inflight', num(t.inflight)), numTd('delayed', num(t.delayed))]
      : [td('durability', q.durability), numTd('partitions', q.partition_count), numTd('records', num(t.records))];
    return h('tr', {'data-key': k, class: (sel === k ? 'selected' : '') + (t.unreported ? ' partial' : '')},
      h('th', {scope: 'row', 'data-col': 'topic'}, name, t.unreported ? h('span', {class: 'badge warn', title: `${t.unreported} partitions without numbers`}, `${t.unreported}?`) : null),
      ...cells, numTd('consumers', num(t.consumers)), numTd('publish_rate', rate(t.publish_rate)),
      numTd('deliver_rate', rate(t.deliver_rate)), numTd('bytes', bytes(t.bytes)), td('trend', spark(k)));
  }));
  renderDetails(kind, list.find((q) => qkey(q) === sel));
}

function select(kind, key) {
  state.selected[kind] = state.selected[kind] === key ? null : key;
  const page = kind === 'queue' ? 'queues' : 'streams';
  for (const b of document.querySelectorAll(`#${page}-table tbody button.link`))
    b.setAttribute('aria-expanded', String(b.closest('tr').dataset.key === state.selected[kind]));
  renderChannels(kind);
}

function followers(p) {
  if (!p.followers || !p.followers.length) return '—';
  return h('ul', {class: 'plain'}, p.followers.map((f) => h('li', {class: f.live && f.in_sync ? '' : 'bad-text'},
    `${f.node}${f.live ? '' : ' (down)'} · ${f.in_sync ? 'in sync' : 'not in sync'}` +
    (f.lag_records != null ? ` · lag ${num(f.lag_records)}` + (f.lag_records ? ` (${bytes(f.lag_bytes)})` : '') : ''))));
}

function renderDetails(kind, q) {
  const box = $(kind === 'queue' ? '#queues-details' : '#streams-details');
  if (!q) { box.hidden = true; box.replaceChildren(); return; }
  box.hidden = false;
  const k = qkey(q);
  const title = q.group ? `${q.topic} (group ${q.group})` : q.topic;
  const head = kind === 'queue'
    ? ['Partition', 'Owner', 'Ready', 'In flight', 'Delayed', 'Consumers', 'Unsettled', 'Publish/s', 'Deliver/s', 'Size', 'Followers', 'Note']
    : ['Partition', 'Owner', 'Records', 'First offset', 'Next offset', 'Subscribers', 'Cursors', 'Publish/s', 'Deliver/s', 'Size', 'Followers', 'Note'];
  const rows = q.partitions.map((p) => {
    const owner = td('owner', p.owner || (state.standalone ? 'this broker' : '—'), p.owner_live ? '' : 'bad-text');
    let cells;
    if (kind === 'queue') {
      const s = p.queue, cons = s ? s.consumers || [] : null;
      cells = [numTd('ready', num(depth(s, 'ready'))), numTd('inflight', num(depth(s, 'inflight'))),
        numTd('delayed', num(depth(s, 'delayed'))), numTd('consumers', cons ? cons.length : '—'),
        numTd('unsettled', cons ? num(cons.reduce((n, c) => n + c.unsettled, 0)) : '—')];
    } else {
      const s = p.stream;
      const cur = s && s.cursors ? Object.entries(s.cursors).map(([n, o]) => `${n} → ${o}`).join(', ') : '';
      cells = [numTd('records', s ? num(s.next_offset - s.first_offset) : '—'), numTd('first', s ? num(s.first_offset) : '—'),
        numTd('next', s ? num(s.next_offset) : '—'), numTd('subscribers', s ? num(s.subscribers) : '—'), td('cursors', cur || '—')];
    }
    const s = p.queue || p.stream;
    return h('tr', {'data-key': String(p.partition)}, h('th', {scope: 'row'}, String(p.partition)), owner, ...cells,
      numTd('publish_rate', rate(p.publish_rate)), numTd('deliver_rate', rate(p.deliver_rate)),
      numTd('bytes', s ? bytes(s.bytes) : '—'), td('followers', followers(p)), td('note', p.unavailable || ''));
  });
  const extra = [];
  if (kind === 'queue') {
    extra.push(`Max retries ${q.max_retries ?? '—'}`, `dead letters: ${q.dlq ? q.dlq.policy + (q.dlq.topic ? ' → ' + q.dlq.topic : '') : 'broker default'}`,
      `default TTL ${q.default_ttl_ms != null ? q.default_ttl_ms + ' ms' : 'none'}`, `dead-lettered ${num(q.totals.dead_lettered)}`);
  } else if (q.retention) {
    const r = q.retention;
    extra.push(`Retention: max age ${r.max_age_ms != null ? r.max_age_ms + ' ms' : '∞'}, max bytes ${r.max_bytes != null ? bytes(r.max_bytes) : '∞'}, max records ${r.max_records != null ? num(r.max_records) : '∞'}`);
  }
  // Rebuild only when the queue changes; otherwise patch the rows.
  if (box.dataset.key !== k) {
    box.dataset.key = k;
    box.replaceChildren(
      h('div', {class: 'details-head'}, h('h2', {}, `${kind === 'queue' ? 'Queue' : 'Stream'} ${title}`),
        h('div', {class: 'actions'},
          kind === 'queue' ? h('button', {type: 'button', class: 'danger', id: 'purge-open', 'aria-label': `Purge queue ${title}`,
            onclick: () => openConfirm({op: 'purge', kind, topic: q.topic, group: q.group || ''})}, 'Purge…') : null,
          h('button', {type: 'button', class: 'danger', id: `${kind}-delete-open`, 'aria-label': `Delete ${kind} ${title}`,
            onclick: () => openConfirm({op: 'delete', kind, topic: q.topic, group: q.group || ''})}, 'Delete…'))),
      h('p', {class: 'muted facts'}), h('figure', {class: 'chart'}, h('div', {class: 'chart-svg'}),
        h('figcaption', {class: 'muted'}, h('span', {class: 'key pub'}, 'publish'), ' ', h('span', {class: 'key del'}, 'deliver'), ' per second, last minutes', h('span', {class: 'peak'}))),
      h('div', {class: 'scroll'}, h('table', {class: 'parts'}, h('caption', {class: 'visually-hidden'}, `Partitions of ${title}`),
        h('thead', {}, h('tr', {}, head.map((c, i) => h('th', {scope: 'col', class: i >= 2 && i <= 9 && c !== 'Cursors' ? 'num' : null}, c)))),
        h('tbody'))));
  }
  $('.facts', box).textContent = extra.join(' · ');
  const peak = Math.max(1, ...(state.hist.get(k) || []).map((s) => Math.max(s.pub, s.del)));
  $('.chart-svg', box).replaceChildren(spark(k, 480, 80, true));
  $('.peak', box).textContent = ` (top line: ${rate(peak)}/s)`;
  patch($('tbody', box), rows);
}

function renderConnections() {
  const list = state.conns || [];
  patch($('#connections-table tbody'), list.map((c) => {
    const fw = [];
    if (c.forwarded) fw.push(h('div', {}, c.forwarded.summary), h('small', {class: 'muted'}, `client ${c.forwarded.client_id || '—'} from ${c.forwarded.client_remote_addr || '—'}`));
    if (c.upstreams && c.upstreams.length) fw.push(h('div', {}, 'forwards to ' + c.upstreams.join(', ')));
    return h('tr', {'data-key': String(c.conn), class: c.forwarded ? 'forwarded' : ''},
      h('th', {scope: 'row', class: 'num'}, String(c.conn)), td('client', c.client_id ? h('code', {}, c.client_id) : '—'),
      td('user', c.user || '—', c.user === '@node' && !c.forwarded ? 'peer' : null), td('remote', h('code', {}, c.remote_addr)),
      td('subscriptions', c.subscriptions.length ? h('ul', {class: 'plain'}, c.subscriptions.map((s) => h('li', {}, s))) : '—'),
      td('forwarding', fw.length ? fw : '—'));
  }));
}

// ---- settings

function renderSettings() {
  const v = state.settings, box = $('#settings-fields');
  if (!v) return;
  $('#settings-version').textContent = `Version ${v.version}` + (v.locks && v.locks.length ? ` · locked: ${v.locks.join(', ')}` : '');
  box.replaceChildren(...Object.entries(v.settings).filter(([, g]) => g && typeof g === 'object').map(([group, g]) =>
    h('fieldset', {}, h('legend', {}, group), ...Object.entries(g).map(([key, val]) => {
      const id = `set-${group}-${key}`, path = `${group}.${key}`;
      let input;
      if (typeof val === 'boolean') input = h('input', {id, type: 'checkbox', 'data-path': path, 'data-type': 'bool', checked: val});
      else if (typeof val === 'number') input = h('input', {id, type: 'number', step: '1', inputmode: 'numeric', 'data-path': path, 'data-type': 'number', value: String(val)});
      else if (typeof val === 'string') input = h('input', {id, type: 'text', 'data-path': path, 'data-type': 'string', value: val});
      else input = h('textarea', {id, rows: 3, 'data-path': path, 'data-type': 'json'}, JSON.stringify(val));
      return h('div', {class: 'field'}, h('label', {for: id}, key.replaceAll('_', ' '), h('code', {class: 'muted'}, path)), input);
    }))));
  state.dirty = false;
}

async function loadSettings() {
  try {
    state.settings = await api('/admin/api/runtime-settings');
    renderSettings();
    setMessage('');
  } catch (e) {
    setMessage(`Could not load the settings: ${e.message}`, 'bad');
  }
}

function setMessage(text, kind) {
  const m = $('#settings-message');
  m.className = text ? 'alert ' + (kind || 'ok') : '';
  m.textContent = text;
  if (text) m.scrollIntoView({block: 'nearest'});
}

async function saveSettings(ev) {
  ev.preventDefault();
  const v = state.settings;
  if (!v) return;
  const doc = structuredClone(v.settings);
  try {
    for (const el of document.querySelectorAll('#settings-fields [data-path]')) {
      const [g, k] = el.dataset.path.split('.');
      const t = el.dataset.type;
      if (t === 'bool') doc[g][k] = el.checked;
      else if (t === 'number') {
        if (el.value.trim() === '' || !Number.isFinite(Number(el.value))) throw new Error(`${el.dataset.path} must be a number`);
        doc[g][k] = Number(el.value);
      } else if (t === 'json') doc[g][k] = JSON.parse(el.value);
      else doc[g][k] = el.value;
    }
  } catch (e) {
    setMessage(e.message, 'bad');
    return;
  }
  $('#settings-save').disabled = true;
  try {
    state.settings = await api('/admin/api/runtime-settings', {method: 'PUT', json: {expected_version: v.version, settings: doc}});
    renderSettings();
    setMessage(`Saved: version ${state.settings.version}. Every broker applies it without a restart.`, 'ok');
  } catch (e) {
    if (e.status === 409) {
      const cur = e.body && e.body.current ? e.body.current.version : '?';
      setMessage(`Conflict (409): the settings changed since you loaded version ${v.version}; version ${cur} is current. ` +
        'Nothing was saved. Reload to see the current values, then make your change again.', 'bad');
      $('#settings-message').dataset.conflict = '1';
    } else setMessage(`Not saved (${e.status || 'error'}): ${e.message}`, 'bad');
  } finally {
    $('#settings-save').disabled = false;
  }
}

// ---- purge and delete, behind a confirmation

let pending = null; // {op: 'purge' | 'delete', kind: 'queue' | 'stream', topic, group}

const CONFIRM_TEXT = {
  purge: (name) => `This drops every ready and delayed message of ${name} on every partition, as if each had been acknowledged. Messages in flight stay. It cannot be undone.`,
  delete: (name, kind) => `This deletes the ${kind} ${name} on every broker: its partitions and everything in them${kind === 'stream' ? ', with its durable cursors,' : ''} go, and its subscribers are told topic_deleted. It cannot be undone.`,
};

function openConfirm(a) {
  pending = a;
  const name = a.group ? `${a.topic} (group ${a.group})` : a.topic;
  $('#confirm-title').textContent = `${a.op === 'purge' ? 'Purge' : 'Delete'} ${a.kind}`;
  $('#confirm-text').textContent = CONFIRM_TEXT[a.op](name, a.kind);
  $('#confirm-force-box').hidden = !(a.op === 'delete' && a.kind === 'queue');
  $('#confirm-force').checked = false;
  $('#confirm-hint').textContent = a.topic;
  $('#confirm-input').value = '';
  $('#confirm-input').disabled = false;
  $('#confirm-result').textContent = '';
  $('#confirm-go').textContent = a.op === 'purge' ? 'Purge' : 'Delete';
  $('#confirm-go').disabled = true;
  $('#confirm-cancel').textContent = 'Cancel';
  $('#confirm-dialog').showModal();
  $('#confirm-input').focus();
}

async function doConfirmed(ev) {
  ev.preventDefault();
  const a = pending;
  if (!a || $('#confirm-input').value !== a.topic) return;
  $('#confirm-go').disabled = true;
  $('#confirm-input').disabled = true;
  const out = $('#confirm-result');
  out.textContent = a.op === 'purge' ? 'Purging…' : 'Deleting…';
  try {
    out.textContent = a.op === 'purge' ? await purge(a) : await remove(a);
  } catch (e) {
    out.textContent = `${a.op === 'purge' ? 'Purge' : 'Delete'} failed (${e.status || 'error'}): ${e.message}`;
  }
  $('#confirm-cancel').textContent = 'Close';
  refresh();
}

async function purge(a) {
  const r = await api('/admin/api/queues/purge', {method: 'POST', json: a.group ? {topic: a.topic, group: a.group} : {topic: a.topic}});
  const parts = r.partitions || [];
  const failed = parts.filter((p) => p.error);
  return `Purged ${num(r.purged)} message${r.purged === 1 ? '' : 's'} from ${parts.length - failed.length} partition${parts.length - failed.length === 1 ? '' : 's'}.` +
    (failed.length ? ` Not purged: ${failed.map((p) => `partition ${p.partition} (${p.error})`).join('; ')}.` : '');
}

async function remove(a) {
  const body = {topic: a.topic};
  if (a.kind === 'queue') Object.assign(body, {group: a.group, force: $('#confirm-force').checked});
  const r = await api(`/admin/api/${a.kind === 'queue' ? 'queues' : 'streams'}/delete`, {method: 'POST', json: body});
  state.selected[a.kind] = null;
  const d = r.deleted || {};
  const what = a.kind === 'queue' ? `${num(d.messages || 0)} messages` : `${num(d.records || 0)} records`;
  return `Deleted ${a.kind} ${a.topic}: ${num(d.partitions || 0)} partitions, ${what}, ${num(r.subscriptions_closed || 0)} subscriptions closed.` +
    (r.complete === false ? ` Waiting for ${r.pending.join(', ')} to drop their copy; the name can be declared again once they have.` : '');
}

// ---- loop and routing

async function refresh() {
  if (state.busy) { state.again = true; return; }
  state.busy = true;
  state.again = false;
  clearTimeout(state.timer);
  const page = state.page, status = $('#status');
  try {
    const jobs = [api('/admin/api/queues').then((r) => { state.queues = r.queues || []; record(state.queues); })];
    if (page === 'overview' || !state.overview)
      jobs.push(api('/admin/api/overview').then((r) => { state.overview = r; }));
    if (page === 'overview' || page === 'cluster')
      jobs.push(api('/admin/api/topology').then((r) => { state.topo = r; state.standalone = false; }, (e) => {
        if (e.status !== 404) throw e;
        state.topo = null; state.standalone = true;
      }));
    if (page === 'connections') jobs.push(api('/admin/api/connections').then((r) => { state.conns = r.connections || []; }));
    const res = await Promise.allSettled(jobs);
    const bad = res.find((r) => r.status === 'rejected');
    render();
    status.textContent = bad ? `Update failed: ${bad.reason.message}` : `Updated ${new Date().toLocaleTimeString()}`;
    status.classList.toggle('bad-text', !!bad);
  } catch (e) {
    status.textContent = `Update failed: ${e.message}`;
  } finally {
    state.busy = false;
    state.timer = setTimeout(tick, state.again ? 0 : REFRESH_MS);
  }
}

function tick() {
  if (document.hidden) { state.timer = setTimeout(tick, REFRESH_MS); return; }
  refresh();
}

function render() {
  const ov = state.overview;
  if (ov) $('#brand-node').textContent = ov.mode === 'cluster' ? `· ${ov.node || 'joining'} · cluster` : '· standalone';
  switch (state.page) {
    case 'overview': renderOverview(); break;
    case 'cluster': renderCluster(); break;
    case 'queues': renderChannels('queue'); break;
    case 'streams': renderChannels('stream'); break;
    case 'connections': renderConnections(); break;
  }
  document.body.dataset.rendered = state.page;
}

function route(focus) {
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  state.page = PAGES.includes(name) ? name : 'overview';
  for (const p of PAGES) $(`#page-${p}`).hidden = p !== state.page;
  for (const a of document.querySelectorAll('nav a'))
    if (a.dataset.route === state.page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  document.title = `${TITLES[state.page]} · Fibril`;
  delete document.body.dataset.rendered;
  if (focus) $(`#h-${state.page}`).focus({preventScroll: false});
  if (state.page === 'settings' && !state.dirty) loadSettings();
  render();
  refresh();
}

document.addEventListener('DOMContentLoaded', () => {
  for (const p of PAGES) $(`#h-${p}`).tabIndex = -1;
  window.addEventListener('hashchange', () => route(true));
  $('#settings-form').addEventListener('submit', saveSettings);
  $('#settings-form').addEventListener('input', () => { state.dirty = true; });
  $('#settings-reload').addEventListener('click', () => { delete $('#settings-message').dataset.conflict; loadSettings(); });
  $('#confirm-form').addEventListener('submit', doConfirmed);
  $('#confirm-input').addEventListener('input', (e) => {
    $('#confirm-go').disabled = !pending || e.target.value !== pending.topic;
  });
  $('#confirm-cancel').addEventListener('click', () => $('#confirm-dialog').close());
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });
  route(false);
});
