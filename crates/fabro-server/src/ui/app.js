// fabro web UI (SPEC 15): keeps the pages live. Text from runs is only ever set with
// textContent; HTML comes from the server's own escaped fragments. No inline script.
(function () {
  'use strict';
  var body = document.body;

  // Filled in by the server from the engine's list of events (`ui::assets::script`).
  var EVENT_NAMES = /*EVENT_NAMES*/[];
  var TERMINAL = /*TERMINAL_EVENTS*/{};
  var MARKS = { success: '\u2713', partial_success: '\u25d0', fail: '\u2717', running: '\u25b6',
    skipped: '\u21b7', pending: '', incomplete: '!' };
  var SVG = 'http://www.w3.org/2000/svg';

  // Replaces a container's HTML, keeping the focus on the same link or button.
  function replaceKeepingFocus(target, html) {
    var active = document.activeElement;
    var key = null;
    if (active && target.contains(active)) {
      key = active.getAttribute('href') || active.id || active.getAttribute('value');
    }
    target.innerHTML = html;
    if (key) {
      var candidates = target.querySelectorAll('a, button');
      for (var i = 0; i < candidates.length; i++) {
        var c = candidates[i];
        if (c.getAttribute('href') === key || c.id === key || c.getAttribute('value') === key) {
          c.focus();
          break;
        }
      }
    }
  }

  function board() {
    var target = document.getElementById('board');
    var busy = false;
    var last = target.innerHTML;
    function refresh() {
      if (busy) { return; }
      busy = true;
      fetch(location.pathname + location.search, {
        headers: { 'X-Fabro-Fragment': 'board' }, cache: 'no-store', credentials: 'same-origin'
      }).then(function (response) {
        return response.ok ? response.text() : null;
      }).then(function (html) {
        if (html !== null && html !== last) {
          last = html;
          replaceKeepingFocus(target, html);
        }
        body.dataset.refreshed = String(Date.now());
      }).catch(function () {}).then(function () { busy = false; });
    }
    setInterval(refresh, 1000);
  }

  function eventSummary(envelope) {
    var p = envelope.properties || {};
    var parts = ['#' + envelope.id, String(envelope.ts || '').slice(11, 23), envelope.event];
    if (envelope.node_id) { parts.push(envelope.node_id); }
    if (p.status) { parts.push(p.status); }
    if (p.tool) { parts.push(p.tool); }
    if (p.to) { parts.push('\u2192 ' + p.to + (p.label ? ' [' + p.label + ']' : '')); }
    if (p.text) { parts.push(String(p.text)); }
    if (p.label && !p.to) { parts.push('[' + p.label + ']'); }
    if (p.reason) { parts.push(String(p.reason)); }
    if (p.message) { parts.push(String(p.message)); }
    if (p.failure_reason) { parts.push(String(p.failure_reason)); }
    return parts.join(' ');
  }

  function panZoom(graph) {
    var svg = graph.querySelector('svg');
    if (!svg || !svg.viewBox || !svg.viewBox.baseVal) { return; }
    var vb = svg.viewBox.baseVal;
    var home = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    svg.removeAttribute('width');
    svg.removeAttribute('height');
    function scale() {
      return Math.max(vb.width / (svg.clientWidth || 1), vb.height / (svg.clientHeight || 1));
    }
    function zoom(factor) {
      var cx = vb.x + vb.width / 2, cy = vb.y + vb.height / 2;
      vb.width *= factor; vb.height *= factor;
      vb.x = cx - vb.width / 2; vb.y = cy - vb.height / 2;
    }
    var tools = document.querySelectorAll('[data-zoom]');
    for (var i = 0; i < tools.length; i++) {
      tools[i].addEventListener('click', function (event) {
        var what = event.currentTarget.getAttribute('data-zoom');
        if (what === 'in') { zoom(0.8); } else if (what === 'out') { zoom(1.25); } else {
          vb.x = home.x; vb.y = home.y; vb.width = home.w; vb.height = home.h;
        }
      });
    }
    graph.addEventListener('wheel', function (event) {
      event.preventDefault();
      zoom(event.deltaY < 0 ? 0.85 : 1 / 0.85);
    }, { passive: false });
    var drag = null;
    var dragged = false;
    graph.addEventListener('pointerdown', function (event) {
      drag = { x: event.clientX, y: event.clientY, vx: vb.x, vy: vb.y, s: scale() };
      dragged = false;
    });
    graph.addEventListener('pointermove', function (event) {
      if (!drag) { return; }
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 4) { dragged = true; }
      vb.x = drag.vx - dx * drag.s; vb.y = drag.vy - dy * drag.s;
    });
    window.addEventListener('pointerup', function () { drag = null; });
    graph.addEventListener('click', function (event) {
      if (dragged) { event.preventDefault(); dragged = false; }
    }, true);
  }

  function runPage() {
    var runId = body.dataset.run;
    var base = '/runs/' + encodeURIComponent(runId);
    var eventsUrl = '/api/v1/runs/' + encodeURIComponent(runId) + '/events';
    var log = document.getElementById('events');
    var follow = document.getElementById('follow');
    var graph = document.getElementById('graph');
    var header = document.getElementById('run-header');
    var stages = document.getElementById('stages');
    var question = document.getElementById('question');
    var steer = document.getElementById('steer');
    // What changed since the last frame: events to list, node states, the current node.
    var queue = [];
    var nodeUpdates = {};
    var currentUpdate;
    var frameWanted = false;
    var fallback = null;
    var current = null;
    var lastSeen = 0;
    // The page as served shows what the events up to this one did; replaying them
    // lists them but changes nothing (the first refresh brings the page up to date).
    var shownEvent = Number(body.dataset.shownEvent || 0);
    var source = null;
    var closed = false;
    var lastHeader = header.innerHTML;
    panZoom(graph);

    function nodeGroup(node) { return document.getElementById('node-' + node); }

    // A node's box, read once (the layout does not change while the page is open).
    function boxOf(group) {
      if (!group.fabroBox) {
        try { group.fabroBox = group.getBBox(); } catch (e) { return null; }
      }
      return group.fabroBox;
    }

    function label(group, name, x, y, anchor) {
      var element = group.querySelector('text.' + name);
      if (!element) {
        element = document.createElementNS(SVG, 'text');
        element.setAttribute('class', name);
        if (anchor) { element.setAttribute('text-anchor', anchor); }
        element.setAttribute('x', String(x));
        element.setAttribute('y', String(y));
        group.appendChild(element);
      }
      return element;
    }

    function paint(group, status, visits, box) {
      var state = status + '/' + visits;
      if (group.fabroState === state) { return; }
      group.fabroState = state;
      var classes = (group.getAttribute('class') || '').split(/\s+/).filter(function (c) {
        return c && c.indexOf('status-') !== 0;
      });
      classes.push('status-' + String(status).replace(/[^a-z_]/g, ''));
      group.setAttribute('class', classes.join(' '));
      if (visits !== undefined && visits !== null) { group.setAttribute('data-visits', String(visits)); }
      visits = Number(group.getAttribute('data-visits') || 0);
      if (box) {
        label(group, 'mark', box.x + 3, box.y + 13).textContent = MARKS[status] || '';
        if (visits > 1) {
          label(group, 'visits', box.x + box.width - 3, box.y + 12, 'end').textContent = '\u00d7' + visits;
        }
      }
      var title = group.querySelector('title');
      if (!title) {
        title = document.createElementNS(SVG, 'title');
        group.insertBefore(title, group.firstChild);
      }
      title.textContent = group.id.slice(5) + ': ' + status + (visits ? ', visits ' + visits : '');
    }

    // Restyles the changed nodes: every box is read before anything is written, so a
    // frame lays the graph out at most once however many nodes changed.
    function restyle(updates) {
      var groups = [];
      Object.keys(updates).forEach(function (node) {
        var group = nodeGroup(node);
        if (group) { groups.push([group, updates[node]]); }
      });
      var boxes = groups.map(function (entry) { return boxOf(entry[0]); });
      groups.forEach(function (entry, i) { paint(entry[0], entry[1].status, entry[1].visits, boxes[i]); });
    }

    function showCurrent(node) {
      if (current) {
        var old = nodeGroup(current);
        if (old) { old.classList.remove('current'); }
      }
      current = node;
      var group = node ? nodeGroup(node) : null;
      if (group) { group.classList.add('current'); }
    }

    function listEvents() {
      var shown = queue.length > 1000 ? queue.slice(queue.length - 1000) : queue;
      queue = [];
      if (!shown.length) { return; }
      var fragment = document.createDocumentFragment();
      for (var i = 0; i < shown.length; i++) {
        var item = document.createElement('li');
        item.textContent = eventSummary(shown[i]);
        item.setAttribute('data-event', shown[i].event);
        item.setAttribute('data-id', String(shown[i].id));
        fragment.appendChild(item);
      }
      log.appendChild(fragment);
      var extra = log.childElementCount - 1000;
      while (extra-- > 0) { log.removeChild(log.firstElementChild); }
      if (follow.checked) { log.scrollTop = log.scrollHeight; }
      body.dataset.lastEvent = String(shown[shown.length - 1].id);
    }

    // Everything that arrived since the last frame, shown at once.
    function flush() {
      if (!frameWanted) { return; }
      frameWanted = false;
      clearTimeout(fallback);
      var updates = nodeUpdates;
      nodeUpdates = {};
      restyle(updates);
      if (currentUpdate !== undefined) {
        showCurrent(currentUpdate);
        currentUpdate = undefined;
      }
      listEvents();
    }
    function schedule() {
      if (frameWanted) { return; }
      frameWanted = true;
      requestAnimationFrame(flush);
      // A hidden tab gets no frames; its updates still land, less often.
      fallback = setTimeout(flush, 250);
    }

    function setNode(node, status, visits) {
      if (!node) { return; }
      var previous = nodeUpdates[node];
      nodeUpdates[node] = {
        status: status,
        visits: visits !== undefined && visits !== null ? visits : previous && previous.visits
      };
      schedule();
    }

    function setCurrent(node) {
      currentUpdate = node || null;
      schedule();
    }

    function link(node, rank) {
      var group = nodeGroup(node);
      if (!group) { return; }
      var href = base + '/stages/' + encodeURIComponent(rank);
      var parent = group.parentNode;
      if (parent.nodeName.toLowerCase() === 'a') {
        if (parent.getAttribute('href') !== href) { parent.setAttribute('href', href); }
        return;
      }
      var anchor = document.createElementNS(SVG, 'a');
      anchor.setAttribute('href', href);
      anchor.setAttribute('aria-label', 'stage ' + rank + ' of ' + node);
      parent.insertBefore(anchor, group);
      anchor.appendChild(group);
    }

    // A run that was still queued when the page was made gets its graph later.
    var graphLoading = false;
    function loadGraph() {
      if (graphLoading) { return; }
      graphLoading = true;
      fetch('/api/v1/runs/' + encodeURIComponent(runId) + '/graph.svg', { cache: 'no-store', credentials: 'same-origin' })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (svg) {
          if (svg && svg.indexOf('<svg') >= 0) {
            graph.innerHTML = svg.slice(svg.indexOf('<svg'));
            panZoom(graph);
            scheduleRefresh();
          }
        }).catch(function () {}).then(function () { graphLoading = false; });
    }

    var refreshTimer = null;
    var refreshing = false;
    function refresh() {
      refreshTimer = null;
      if (refreshing) { scheduleRefresh(); return; }
      refreshing = true;
      fetch(base + '/live?stages=' + encodeURIComponent(stages.getAttribute('data-key') || ''), { cache: 'no-store', credentials: 'same-origin' }).then(function (response) {
        return response.ok ? response.json() : null;
      }).then(function (live) {
        if (!live) { return; }
        if (!graph.querySelector('svg') && live.status !== 'queued') { loadGraph(); }
        // The header is compared with the last one received, not with innerHTML (which
        // the browser serializes its own way); the stage table comes only when it
        // changed.
        if (lastHeader !== live.header) { lastHeader = live.header; replaceKeepingFocus(header, live.header); }
        if (typeof live.stages === 'string') {
          replaceKeepingFocus(stages, live.stages);
          stages.setAttribute('data-key', live.stages_key);
        }
        if (question.getAttribute('data-question') !== live.question_id) {
          question.setAttribute('data-question', live.question_id);
          question.innerHTML = live.question;
        }
        // The steering form comes and goes with the running agent stages; what is
        // typed in it stays while they run.
        if (steer.getAttribute('data-steer') !== live.steer_key) {
          steer.setAttribute('data-steer', live.steer_key);
          steer.innerHTML = live.steer;
        }
        Object.keys(live.nodes || {}).forEach(function (node) {
          var info = live.nodes[node];
          setNode(node, info.status, info.visits);
          link(node, info.rank);
        });
        setCurrent(live.status === 'running' ? live.current_node : null);
        body.dataset.status = live.status;
        // A resumed run has terminal events in its history: the stream is closed only
        // once the run has ended and every stored event has arrived.
        if (live.status !== 'running' && live.status !== 'queued' && lastSeen >= live.last_event_id) {
          closed = true;
          source.close();
          body.dataset.live = 'closed';
        }
      }).catch(function () {}).then(function () { refreshing = false; });
    }
    function scheduleRefresh() {
      if (refreshTimer === null) { refreshTimer = setTimeout(refresh, 250); }
    }

    function apply(envelope) {
      var p = envelope.properties || {};
      switch (envelope.event) {
        case 'StageStarted':
          setNode(envelope.node_id, 'running', p.visit);
          setCurrent(envelope.node_id);
          scheduleRefresh();
          break;
        case 'StageRetrying':
          setNode(envelope.node_id, 'running');
          break;
        case 'StageCompleted':
          setNode(envelope.node_id, p.status, p.visit);
          scheduleRefresh();
          break;
        case 'HumanQuestion':
        case 'HumanAnswer':
        case 'Agent.SessionStarted':
        // The stage takes steering a moment after its session starts: its first tool
        // call refreshes the steering box again (SPEC 20.1).
        case 'Agent.ToolCallStarted':
        case 'SteeringQueued':
        case 'WorkflowRunStarted':
          scheduleRefresh();
          break;
        default:
          break;
      }
    }

    function onEvent(message) {
      var envelope;
      try { envelope = JSON.parse(message.data); } catch (e) { return; }
      var id = Number(envelope.id) || 0;
      // After a reconnection the stream starts after the last id seen: an event seen
      // already is never listed twice.
      if (id && id <= lastSeen) { return; }
      lastSeen = Math.max(lastSeen, id);
      queue.push(envelope);
      schedule();
      if (id && id <= shownEvent) { return; }
      apply(envelope);
      if (TERMINAL[envelope.event]) {
        setCurrent(null);
        scheduleRefresh();
      }
    }

    // The browser reconnects a dropped stream itself, sending Last-Event-ID; a stream it
    // gave up on (an error answer while the server restarted) is opened again here,
    // after the last event seen.
    function connect() {
      source = new EventSource(lastSeen ? eventsUrl + '?after=' + lastSeen : eventsUrl);
      EVENT_NAMES.forEach(function (name) { source.addEventListener(name, onEvent); });
      source.addEventListener('open', function () { body.dataset.live = 'connected'; });
      source.addEventListener('error', function () {
        if (closed) { return; }
        body.dataset.live = 'reconnecting';
        if (source.readyState === EventSource.CLOSED) {
          setTimeout(function () { if (!closed) { connect(); } }, 1000);
        }
      });
    }
    connect();
    refresh();
  }

  function stagePage() {
    if (body.dataset.status !== 'running') { return; }
    var url = '/runs/' + encodeURIComponent(body.dataset.run) + '/stages/' +
      encodeURIComponent(body.dataset.rank) + '/live';
    var timer = setInterval(function () {
      fetch(url, { cache: 'no-store', credentials: 'same-origin' }).then(function (response) {
        return response.ok ? response.json() : null;
      }).then(function (live) {
        if (!live) { return; }
        ['stdout', 'stderr'].forEach(function (name) {
          var element = document.getElementById(name);
          if (element && typeof live[name] === 'string' && element.textContent !== live[name]) {
            var atEnd = element.scrollTop + element.clientHeight >= element.scrollHeight - 4;
            element.textContent = live[name];
            if (atEnd) { element.scrollTop = element.scrollHeight; }
          }
        });
        if (live.status !== 'running') {
          clearInterval(timer);
          location.reload();
        }
      }).catch(function () {});
    }, 500);
  }

  // Accelerator keys of the pending question: pressing a key clicks its option.
  document.addEventListener('keydown', function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    var tag = target && target.tagName ? target.tagName.toLowerCase() : '';
    if (tag === 'input' || tag === 'textarea' || tag === 'select') { return; }
    if (!event.key || event.key.length !== 1) { return; }
    var buttons = document.querySelectorAll('#question button[data-key]');
    for (var i = 0; i < buttons.length; i++) {
      if (buttons[i].getAttribute('data-key').toLowerCase() === event.key.toLowerCase()) {
        event.preventDefault();
        buttons[i].click();
        return;
      }
    }
  });

  if (body.dataset.page === 'board') { board(); }
  if (body.dataset.page === 'run') { runPage(); }
  if (body.dataset.page === 'stage') { stagePage(); }
}());
