/* onnx-studio graph renderer: ELK (elkjs, compound layered layout, in a web worker
 * when the page allows one) + a canvas drawing with level of detail and culling.
 * Data: the JSON scene(s) of studio/graphview/scene.py in <script id="gv-data">.
 * Model text is drawn with fillText and written with textContent only. */
(function (start) {
  /* The ELK worker that web/elk_start.js has just made begins only when this thread takes the browser's
   * "script loaded" message, and the work below (the data parsed, the quick layout, the first draw) held
   * that message back ~40-50 ms (Chromium trace, llama_optimum: the worker's thread started after the
   * quick layout's task). One task of yield lets the worker start first; its compile, ELK's start-up and the
   * opening view's cold layout are the path to ELK settled (issue 35 item 2). Interleaved A/B, llama_optimum,
   * 12 runs each at load ~4: ELK settled 1.027 -> 0.916 s (paired median 0.92x), first paint unchanged. */
  if (window.__gvElk && window.__gvElk.worker) setTimeout(start, 0); else start();
})(function () {
  'use strict';
  var DATA = JSON.parse(document.getElementById('gv-data').textContent);
  var FONT = '12px system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif';
  var BOLD = 'bold 12px system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif';
  var SMALL = '10px system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif';
  var LINE = 15, PADX = 7, HEAD = 18, CHEAD = 22, MIN_TEXT_PX = 6, MARK_PILL = 8;
  var ELK_MAX = 1500;           /* above this many visible items: the fast flat layout */
  var LABEL_MAX = 700;          /* above this many visible edges: no edge labels in the layout */
  var measureCtx = document.createElement('canvas').getContext('2d');
  /* Widths are cached per font and text: a 10k-node model repeats a few hundred labels ("Conv", "k 3×3"),
   * and measureText was ~9 % of laying out its fully opened graph. */
  var widthCache = new Map();
  function textW(t, font) {
    var key = font + '\u0000' + t, w = widthCache.get(key);
    if (w === undefined) {
      if (measureCtx.font !== font) measureCtx.font = font;
      w = measureCtx.measureText(t).width;
      if (widthCache.size > 50000) widthCache.clear();
      widthCache.set(key, w);
    }
    return w;
  }

  /* ---------- ELK, in a worker when possible ---------- */
  function makeEngine() {
    var engine = {kind: 'main', pending: {}, seq: 0, worker: null, elk: null};
    function mainElk() {
      /* The page ships ELK as text (not run: parsing 1.6 MB on the main thread competed with the worker
       * doing the same, issue 35); it runs here only when no worker can. An inline script, allowed by the CSP. */
      if (!engine.elk) {
        if (typeof ELK === 'undefined') {
          var s = document.createElement('script');
          s.textContent = document.getElementById('elk-src').textContent;
          document.head.appendChild(s);
        }
        engine.elk = new ELK(window.__gvElkInit || {algorithms: ['layered']});
      }
      return engine.elk;
    }
    try {
      /* The page's inline starter (web/elk_start.js) made the worker right after ELK's text was parsed,
       * before the model data: its 1.6 MB compiles and ELK initialises while the page parses the data and
       * draws the quick layout (issue 35). Made here only when that starter could not make one. */
      var early = window.__gvElk || {};
      var w = early.worker || window.__gvElkStart();
      w.onmessage = function (e) {
        if (e.data.warmed) { engine.warmed = true; return; }      /* its idle warm-up runs ended (elk_start.js) */
        var p = engine.pending[e.data.id]; delete engine.pending[e.data.id];
        if (!p) return;
        if (e.data.err) p.reject(new Error(e.data.err)); else p.resolve(e.data.g);
      };
      w.onerror = function (ev) {
        ev.preventDefault && ev.preventDefault();
        engine.kind = 'main'; engine.worker = null;
        var ps = engine.pending; engine.pending = {};
        Object.keys(ps).forEach(function (k) { mainElk().layout(ps[k].g).then(ps[k].resolve, ps[k].reject); });
      };
      engine.worker = w; engine.kind = 'worker'; engine.startedAt = early.at;
      if (early.failed) w.onerror({preventDefault: function () {}});   /* it failed before this handler existed */
    } catch (e) { engine.kind = 'main'; }
    engine.layout = function (g) {
      if (engine.worker) {
        return new Promise(function (resolve, reject) {
          var id = ++engine.seq;
          engine.pending[id] = {resolve: resolve, reject: reject, g: g};
          engine.worker.postMessage({id: id, g: g});
        });
      }
      return mainElk().layout(g);
    };
    return engine;
  }

  /* ---------- the model side: which groups are open, what is visible ---------- */
  function Model(scene) {
    this.s = scene;
    var groups = scene.groups;
    this.open = new Set(scene.open);
    this.initialOpen = scene.open.slice();
    this.children = groups.map(function () { return []; });
    this.leavesOf = groups.map(function () { return []; });
    for (var i = 1; i < groups.length; i++) if (groups[i].parent >= 0) this.children[groups[i].parent].push(i);
    for (var j = 0; j < scene.leaves.length; j++) this.leavesOf[scene.leaves[j].g].push(j);
    this.boxCache = new Array(scene.leaves.length);
    this.byKey = {};
    for (var a = 0; a < scene.leaves.length; a++) this.byKey[scene.leaves[a].key] = 'n' + a;
    for (var b = 0; b < groups.length; b++) this.byKey['group:' + groups[b].key] = 'g' + b;
    /* tensor -> producer leaf and consumer leaves */
    this.producer = {}; this.consumers = {};
    for (var k = 0; k < scene.edges.length; k++) {
      var e = scene.edges[k], t = e[2];
      if (!t) continue;
      this.producer[t] = e[0];
      (this.consumers[t] = this.consumers[t] || []).push(e[1]);
    }
  }
  /* A leaf's box (title, text lines, size) does not change with the open set: measured once. A large scene
   * measures them in slices after its first paint, so opening everything does not (issue 35). */
  Model.prototype.leafBox = function (i) {
    var b = this.boxCache[i];
    if (!b) {
      var lf = this.s.leaves[i], ll = leafLines(lf), title = lf.kind === 'input' || lf.kind === 'output' ? lf.full : lf.op;
      var bs = boxSize(title, ll);
      b = this.boxCache[i] = {title: title, lines: ll, w: bs.w, h: bs.h};
    }
    return b;
  };
  Model.prototype.warmBoxes = function (from) {
    var self = this, n = this.s.leaves.length, end = Math.min(n, from + 4000);
    for (var i = from; i < end; i++) this.leafBox(i);
    if (end < n) setTimeout(function () { self.warmBoxes(end); }, 0);
  };
  Model.prototype.rep = function (leaf) {
    /* the visible stand-in of a leaf: itself, or its outermost closed ancestor group */
    var g = this.s.leaves[leaf].g, rep = null, groups = this.s.groups;
    while (g > 0) { if (!this.open.has(g)) rep = g; g = groups[g].parent; }
    return rep === null ? 'n' + leaf : 'g' + rep;
  };
  Model.prototype.groupVisible = function (g) {
    var groups = this.s.groups, p = groups[g].parent;
    while (p > 0) { if (!this.open.has(p)) return false; p = groups[p].parent; }
    return true;
  };
  Model.prototype.reveal = function (leaf) {
    var g = this.s.leaves[leaf].g, changed = false, groups = this.s.groups;
    while (g > 0) { if (!this.open.has(g)) { this.open.add(g); changed = true; } g = groups[g].parent; }
    return changed;
  };

  function leafLines(leaf) {
    var lines = [];
    (leaf.attrs || []).forEach(function (a) { if (a) lines.push(a); });
    (leaf.w || []).forEach(function (w) { lines.push(w); });
    return lines;
  }
  function groupLines(g) {
    var lines = [g.size.toLocaleString() + ' nodes'];
    if (g.ops) lines.push(g.ops);
    return lines;
  }
  function boxSize(title, lines) {
    var w = textW(title, BOLD) + 2 * PADX + 14;
    for (var i = 0; i < lines.length; i++) w = Math.max(w, textW(lines[i], FONT) + 2 * PADX);
    return {w: Math.ceil(Math.max(w, 54)), h: HEAD + lines.length * LINE + (lines.length ? 5 : 0)};
  }

  /* The visible graph (items + merged edges) for the current open set. */
  Model.prototype.visible = function () {
    var s = this.s, self = this, items = {}, order = [], edges = {}, elist = [];
    function item(id, data) { if (!items[id]) { items[id] = data; order.push(id); } return items[id]; }
    var groups = s.groups, open = this.open;
    /* per group, in pre-order (a parent before its children): shown at all, and the outermost closed group
     * standing for what is inside it (-1: none), so each leaf's stand-in is one lookup (issue 35: 100k leaves) */
    var shown = new Uint8Array(groups.length), outer = new Int32Array(groups.length);
    shown[0] = 1; outer[0] = -1;
    for (var q = 1; q < groups.length; q++) {
      var pq = groups[q].parent < 0 ? 0 : groups[q].parent;
      shown[q] = shown[pq] && (pq === 0 || open.has(pq)) ? 1 : 0;
      outer[q] = outer[pq] >= 0 ? outer[pq] : (open.has(q) ? -1 : q);
    }
    for (var g = 1; g < groups.length; g++) {
      if (!shown[g]) continue;
      var gr = groups[g];
      if (this.open.has(g)) item('g' + g, {id: 'g' + g, type: 'open', g: g, parent: gr.parent, title: gr.label});
      else {
        var lines = groupLines(gr), sz = boxSize(gr.label, lines);
        item('g' + g, {id: 'g' + g, type: 'group', g: g, parent: gr.parent, title: gr.label, lines: lines, w: sz.w, h: sz.h});
      }
    }
    var repOf = new Array(s.leaves.length);
    for (var i = 0; i < s.leaves.length; i++) {
      var lg = s.leaves[i].g, r = lg > 0 && outer[lg] >= 0 ? 'g' + outer[lg] : 'n' + i; repOf[i] = r;
      if (r.charAt(0) === 'n') {
        var lf = s.leaves[i], lb = this.leafBox(i);
        items[r] = {id: r, type: lf.kind === 'sealed' ? 'sealed' : 'leaf', leaf: i, parent: lf.g, title: lb.title, lines: lb.lines, w: lb.w, h: lb.h};
        order.push(r);                  /* a leaf's id is its own: no lookup first */
      }
    }
    for (var k = 0; k < s.edges.length; k++) {
      var e = s.edges[k], a = repOf[e[0]], b = repOf[e[1]];
      if (a === b) continue;
      var key = a + '>' + b, m = edges[key];
      if (!m) { m = edges[key] = {id: 'e' + elist.length, src: a, dst: b, tensors: [], labels: [], count: 0, raw: [], side: e[5] || 'ab'}; elist.push(m); }
      else if (m.side !== (e[5] || 'ab')) m.side = 'ab';
      m.count += e[4]; m.raw.push(k);
      if (e[2] && m.tensors.indexOf(e[2]) < 0) { m.tensors.push(e[2]); m.labels.push(e[3]); }
    }
    elist.forEach(function (m) {
      m.text = m.tensors.length === 1 ? m.labels[0] : (m.tensors.length > 1 ? m.tensors.length + ' tensors' : (m.count > 1 ? m.count + ' tensors' : ''));
    });
    /* open groups with nothing visible inside are drawn as closed boxes */
    var hasChild = {};
    order.forEach(function (id) { var it = items[id]; if (it.parent > 0) hasChild[it.parent] = true; });
    order.forEach(function (id) {
      var it = items[id];
      if (it.type === 'open' && !hasChild[it.g]) {
        var gr = groups[it.g], lines = groupLines(gr), sz = boxSize(gr.label, lines);
        it.type = 'group'; it.lines = lines; it.w = sz.w; it.h = sz.h;
      }
    });
    return {items: items, order: order, edges: elist};
  };

  /* ---------- layouts ---------- */
  /* mergeEdges (in every graph of the compound layout: ELK reads it per graph): a box's outgoing edges leave
   * from one point and its incoming ones arrive at one, as a tensor leaves Netron's boxes once, instead of
   * one ELK port per edge. Fewer ports is less work for every phase (issue 35 item 2: ELK's cold CPU
   * time -8 to -15 % on llama_optimum's and nudenet_320n's opening views, in node) and a tidier drawing
   * (llama_optimum's opening view: 16 edge crossings instead of 32, 174 bends instead of 182, 10 % narrower).
   * Thoroughness 1 (one crossing-minimisation pass, not 2): the same drawing of llama_optimum fully opened
   * (and of both opening views), one 6 % narrower for nudenet_320n's, with ELK's warm CPU time in node
   * 419 -> 314 ms (llama_optimum, all 341 items; issue 35 item 2); cold, on an opening view, no faster.
   * Other cheaper options measured no faster (other node placements, greedy switch off, no micro layout,
   * hierarchical sweepiness -1) or broke the drawing (crossing minimisation INTERACTIVE on the quick
   * layout's order: 1.7x taller, 14 upward edges; children laid out separately). */
  var ROOT_OPTS = {
    'elk.algorithm': 'layered', 'elk.direction': 'DOWN', 'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
    'elk.layered.spacing.nodeNodeBetweenLayers': '26', 'elk.spacing.nodeNode': '16',
    'elk.layered.spacing.edgeNodeBetweenLayers': '10', 'elk.spacing.edgeNode': '10', 'elk.spacing.edgeEdge': '6',
    'elk.layered.thoroughness': '1', 'elk.layered.mergeEdges': 'true',
    'elk.layered.nodePlacement.strategy': 'BRANDES_KOEPF', 'elk.layered.nodePlacement.bk.fixedAlignment': 'BALANCED',
    'elk.json.edgeCoords': 'ROOT', 'elk.json.shapeCoords': 'ROOT', 'elk.padding': '[top=14,left=14,bottom=14,right=14]'
  };
  var GROUP_OPTS = {'elk.layered.mergeEdges': 'true', 'elk.padding': '[top=' + (CHEAD + 8) + ',left=10,bottom=10,right=10]'};

  /* Edge labels do not go to ELK as labels: each would be a label dummy node in its own layer (ELK's
   * layered cost grows with them; leaving them out cut its cold CPU time ~24 % on llama_optimum, issue 35).
   * Instead a box's outgoing labels (one row per distinct text, under the box) enlarge the box ELK lays out,
   * so ELK keeps every other box and edge clear of them, and readElk draws the box at its own size on top
   * of that area with the labels below it, each on its edge. */
  var TAIL_ROW = 14;
  function elkGraph(vis) {
    var nodes = {}, root = {id: 'root', layoutOptions: ROOT_OPTS, children: [], edges: []};
    nodes[0] = root;
    var withLabels = vis.edges.length <= LABEL_MAX, tails = {};
    if (withLabels) vis.edges.forEach(function (e) {
      if (!e.text) return;
      var t = tails[e.src] = tails[e.src] || {rows: [], lw: []};
      if (t.rows.indexOf(e.text) < 0) { t.rows.push(e.text); t.lw.push(Math.ceil(textW(e.text, SMALL)) + 6); }
    });
    vis.tails = tails;
    vis.order.forEach(function (id) {
      var it = vis.items[id], t = tails[id], n;
      if (it.type === 'open') n = {id: id, layoutOptions: GROUP_OPTS, children: [],
        labels: [{text: it.title, width: textW(it.title, BOLD) + 30, height: CHEAD}]};
      else if (t) n = {id: id, width: Math.max(it.w, Math.max.apply(null, t.lw)), height: it.h + t.rows.length * TAIL_ROW + 2};
      else n = {id: id, width: it.w, height: it.h};
      if (it.type === 'open') nodes[it.g] = n;
      it.elk = n;
    });
    vis.order.forEach(function (id) {
      var it = vis.items[id], parent = nodes[it.parent > 0 ? it.parent : 0] || root;
      parent.children.push(it.elk);
    });
    vis.edges.forEach(function (e) { root.edges.push({id: e.id, sources: [e.src], targets: [e.dst]}); });
    return root;
  }

  function readElk(vis, res) {
    var boxes = {}, edges = [], area = {}, tails = vis.tails || {};
    (function walk(n) {
      (n.children || []).forEach(function (c) {
        var it = vis.items[c.id];
        if (tails[c.id] && it) {      /* the box at its own size, centred on the top of its area */
          area[c.id] = {x: c.x, y: c.y, w: c.width, h: c.height};
          boxes[c.id] = {x: c.x + (c.width - it.w) / 2, y: c.y, w: it.w, h: it.h};
        } else boxes[c.id] = {x: c.x, y: c.y, w: c.width, h: c.height};
        walk(c);
      });
    })(res);
    var byId = {};
    vis.edges.forEach(function (e) { byId[e.id] = e; });
    var placed = {};
    function clamp(v, a, b) { return v < a ? a : (v > b ? b : v); }
    (res.edges || []).forEach(function (re) {
      var e = byId[re.id]; if (!e) return;
      var pts = [];
      (re.sections || []).forEach(function (s) {
        pts.push([s.startPoint.x, s.startPoint.y]);
        (s.bendPoints || []).forEach(function (b) { pts.push([b.x, b.y]); });
        pts.push([s.endPoint.x, s.endPoint.y]);
      });
      var label = null, A = area[e.src], B = boxes[e.src], D = boxes[e.dst];
      if (pts.length && A) {
        /* leave from the box's own bottom edge, through its label area */
        var p0 = pts[0], bx = clamp(p0[0], B.x + 4, B.x + B.w - 4);
        if (bx !== p0[0]) pts.unshift([bx, B.y + B.h]); else pts[0] = [p0[0], B.y + B.h];
        var t = tails[e.src], r = t.rows.indexOf(e.text), key = e.src + '\u0000' + e.text;
        if (r >= 0 && !placed[key]) {
          placed[key] = 1;
          var lw = t.lw[r];
          label = {x: clamp(p0[0] - lw / 2, A.x, A.x + A.w - lw), y: B.y + B.h + 1 + r * TAIL_ROW, w: lw, h: 13};
        }
      }
      if (pts.length > 1 && D && area[e.dst]) {  /* arrive on the box itself, not on the wider area */
        var last = pts[pts.length - 1];
        last[0] = clamp(last[0], D.x + 4, D.x + D.w - 4);
      }
      edges.push({e: e, pts: pts, label: label});
    });
    return {boxes: boxes, edges: edges, w: res.width, h: res.height};
  }

  /* Quick layered layout (issue 35): a compound Sugiyama-style layout in plain JS, linear-ish in the
   * drawing's size, so the first paint and any size up to 100k items are a dataflow (inputs on top, every
   * edge downwards, open groups framed around their children) without waiting for ELK. Each open group is
   * laid out on its own, bottom up (its children, with edges lifted to them), and becomes a box of its
   * parent: longest-path layers, dummy points for edges that skip layers, barycenter sweeps for the order,
   * then x positions pulled towards the neighbours' and pushed apart. ELK (compound, orthogonal edges)
   * replaces it below ELK_MAX items once its worker answers. */
  var QGAP = 26, QLGAP = 40, QSEP = 16, QDUMMY = 8, QMAXSPAN = 400;
  function quickLayout(vis) {
    var items = vis.items, order = vis.order, withLabels = vis.edges.length <= LABEL_MAX;
    var kids = {root: []}, parentOf = {};
    order.forEach(function (id) {
      var it = items[id], par = it.parent > 0 && items['g' + it.parent] && items['g' + it.parent].type === 'open' ? 'g' + it.parent : 'root';
      parentOf[id] = par; (kids[par] = kids[par] || []).push(id);
      if (it.type === 'open') kids[id] = kids[id] || [];
    });
    function chain(id) { var c = [id]; while (id !== 'root') { id = parentOf[id] || 'root'; c.push(id); } return c; }
    /* lift each edge to the container holding both ends: local[c] = [[a', b', edge], ...] */
    var local = {}, lifted = [];
    vis.edges.forEach(function (e) {
      var ca = chain(e.src), cb = chain(e.dst), i = ca.length - 1, j = cb.length - 1;
      while (i > 0 && j > 0 && ca[i - 1] === cb[j - 1]) { i--; j--; }
      var c = ca[i], a = ca[i - 1], b = cb[j - 1];
      var le = {c: c, a: a, b: b, e: e, pts: null};
      lifted.push(le);
      if (a !== b && a !== undefined && b !== undefined) (local[c] = local[c] || []).push(le);
    });
    var size = {}, rel = {}, dummyPts = [];
    function layoutContainer(c) {
      var ch = kids[c] || [];
      ch.forEach(function (id) { if (items[id].type === 'open') layoutContainer(id); });
      var n = ch.length, idx = {};
      ch.forEach(function (id, i) { idx[id] = i; });
      var succ = [], pred = [], es = local[c] || [];
      for (var i = 0; i < n; i++) { succ.push([]); pred.push([]); }
      var seen = {};
      es.forEach(function (le) {
        var a = idx[le.a], b = idx[le.b], key = a + '>' + b;
        if (a === undefined || b === undefined || seen[key]) return;
        seen[key] = 1; succ[a].push(b); pred[b].push(a);
      });
      /* cycles (lifted edges between groups can loop): an edge to a node on the DFS stack is reversed */
      var state = new Int8Array(n), rev = {};
      for (var r0 = 0; r0 < n; r0++) {
        if (state[r0]) continue;
        var stack = [[r0, 0]]; state[r0] = 1;
        while (stack.length) {
          var top = stack[stack.length - 1], u = top[0];
          if (top[1] < succ[u].length) {
            var v = succ[u][top[1]++];
            if (state[v] === 1) rev[u + '>' + v] = 1;
            else if (!state[v]) { state[v] = 1; stack.push([v, 0]); }
          } else { state[u] = 2; stack.pop(); }
        }
      }
      var S = [], P = [], indeg = new Int32Array(n);
      for (i = 0; i < n; i++) { S.push([]); P.push([]); }
      for (var a = 0; a < n; a++) succ[a].forEach(function (b) {
        var x = rev[a + '>' + b] ? b : a, y = rev[a + '>' + b] ? a : b;
        S[x].push(y); P[y].push(x); indeg[y]++;
      });
      var layer = new Int32Array(n), queue = [], head = 0;
      for (i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
      while (head < queue.length) {
        var uu = queue[head++];
        for (var q = 0; q < S[uu].length; q++) { var vv = S[uu][q]; if (layer[uu] + 1 > layer[vv]) layer[vv] = layer[uu] + 1; if (--indeg[vv] === 0) queue.push(vv); }
      }
      /* pull sources down next to their first consumer (a weight-like input does not sit on the top row) */
      for (i = n - 1; i >= 0; i--) {
        var w = queue[i];
        if (w === undefined || P[w].length || !S[w].length) continue;
        var m = Infinity; S[w].forEach(function (y) { m = Math.min(m, layer[y]); }); layer[w] = Math.max(layer[w], m - 1);
      }
      /* nodes (real + dummies) per layer; a long edge gets one dummy per skipped layer */
      var nodes = [];                       /* {w, h, layer, real index or -1, x, pos} */
      for (i = 0; i < n; i++) { var it = items[ch[i]], sz = size[ch[i]] || {w: it.w, h: it.h}; nodes.push({w: sz.w, h: sz.h, layer: layer[i], up: [], down: [], id: ch[i]}); }
      var chains = {};
      for (a = 0; a < n; a++) S[a].forEach(function (b) {
        var prev = a, span = layer[b] - layer[a], list = [];
        if (span > 1 && span <= QMAXSPAN) {
          for (var L = layer[a] + 1; L < layer[b]; L++) {
            var d = nodes.length; nodes.push({w: QDUMMY, h: 0, layer: L, up: [prev], down: [], id: null});
            nodes[prev].down.push(d); prev = d; list.push(d);
          }
        }
        nodes[prev].down.push(b); nodes[b].up.push(prev);
        chains[a + '>' + b] = list;
      });
      var rows = [];
      nodes.forEach(function (nd, k) { (rows[nd.layer] = rows[nd.layer] || []).push(k); });
      rows = rows.filter(Boolean);
      rows.forEach(function (row) { row.forEach(function (k, p) { nodes[k].pos = p; }); });
      function sweep(rowList, dir) {
        rowList.forEach(function (row) {
          row.forEach(function (k) {
            var nb = dir ? nodes[k].up : nodes[k].down;
            nodes[k].bc = nb.length ? nb.reduce(function (s, x) { return s + nodes[x].pos; }, 0) / nb.length : nodes[k].pos;
          });
          row.sort(function (x, y) { return nodes[x].bc - nodes[y].bc || nodes[x].pos - nodes[y].pos; });
          row.forEach(function (k, p) { nodes[k].pos = p; });
        });
      }
      var down = rows.slice(1), up = rows.slice(0, -1).reverse();
      for (var it2 = 0; it2 < 2; it2++) { sweep(down, true); sweep(up, false); }
      sweep(down, true);
      /* x: packed, then pulled towards the neighbours' centres and pushed apart (both directions) */
      rows.forEach(function (row) { var x = 0; row.forEach(function (k) { var nd = nodes[k]; nd.x = x + nd.w / 2; x += nd.w + QSEP; }); });
      function place(row, dir) {
        /* dir 1: towards the nodes above, 0: below, 2: both (plain loops: this ran ~20 % of the 10k layout) */
        var xs = new Array(row.length), p, j;
        for (p = 0; p < row.length; p++) {
          var nd = nodes[row[p]], s = 0, cnt = 0;
          if (dir !== 0) { for (j = 0; j < nd.up.length; j++) s += nodes[nd.up[j]].x; cnt += nd.up.length; }
          if (dir !== 1) { for (j = 0; j < nd.down.length; j++) s += nodes[nd.down[j]].x; cnt += nd.down.length; }
          xs[p] = nd.want = cnt ? s / cnt : nd.x;
        }
        for (p = 1; p < row.length; p++) {
          var A = nodes[row[p - 1]], B = nodes[row[p]], gap = (A.w + B.w) / 2 + QSEP;
          if (xs[p] < xs[p - 1] + gap) xs[p] = xs[p - 1] + gap;
        }
        /* the push above only went right: shift the row so its mean displacement is zero, then re-push left */
        var shift = 0; for (p = 0; p < row.length; p++) shift += xs[p] - nodes[row[p]].want;
        shift /= row.length || 1;
        for (p = 0; p < row.length; p++) xs[p] -= shift;
        for (p = row.length - 2; p >= 0; p--) {
          var A2 = nodes[row[p]], B2 = nodes[row[p + 1]], gap2 = (A2.w + B2.w) / 2 + QSEP;
          if (xs[p] > xs[p + 1] - gap2) xs[p] = xs[p + 1] - gap2;
        }
        row.forEach(function (k, p) { nodes[k].x = xs[p]; });
      }
      for (var it3 = 0; it3 < 3; it3++) { down.forEach(function (row) { place(row, 1); }); up.forEach(function (row) { place(row, 0); }); }
      rows.forEach(function (row) { place(row, 2); });
      /* y per layer; container box */
      var gap = withLabels ? QLGAP : QGAP, y = 0, minx = Infinity, maxx = -Infinity;
      rows.forEach(function (row) {
        var h = 0; row.forEach(function (k) { h = Math.max(h, nodes[k].h); });
        row.forEach(function (k) { var nd = nodes[k]; nd.y = y; minx = Math.min(minx, nd.x - nd.w / 2); maxx = Math.max(maxx, nd.x + nd.w / 2); });
        y += h + gap;
      });
      if (minx === Infinity) { minx = 0; maxx = 40; }
      var isRoot = c === 'root', pt = isRoot ? 14 : CHEAD + 8, pl = isRoot ? 14 : 10;
      var title = isRoot ? 0 : textW(items[c].title, BOLD) + 30;
      var innerW = Math.max(maxx - minx, title), cx = (innerW - (maxx - minx)) / 2;
      for (i = 0; i < n; i++) rel[ch[i]] = {c: c, x: pl + cx + nodes[i].x - nodes[i].w / 2 - minx, y: pt + nodes[i].y};
      size[c] = {w: innerW + 2 * pl, h: Math.max(0, y - gap) + pt + (isRoot ? 14 : 10)};
      /* dummy points of each local edge, relative to this container */
      (local[c] || []).forEach(function (le) {
        var a = idx[le.a], b = idx[le.b], list = chains[a + '>' + b] || chains[b + '>' + a] || [];
        if (chains[b + '>' + a] && !chains[a + '>' + b]) list = list.slice().reverse();
        le.rel = list.map(function (d) { return [pl + cx + nodes[d].x - minx, pt + nodes[d].y]; });
      });
    }
    layoutContainer('root');
    /* absolute positions, top down */
    var boxes = {}, off = {root: [0, 0]};
    (function walk(c) {
      (kids[c] || []).forEach(function (id) {
        var r = rel[id], o = off[c], sz = size[id] || {w: items[id].w, h: items[id].h};
        boxes[id] = {x: o[0] + r.x, y: o[1] + r.y, w: sz.w, h: sz.h};
        if (items[id].type === 'open') { off[id] = [boxes[id].x, boxes[id].y]; walk(id); }
      });
    })('root');
    var edges = [];
    lifted.forEach(function (le) {
      var A = boxes[le.e.src], B = boxes[le.e.dst];
      if (!A || !B) return;
      var o = off[le.c] || [0, 0], pts = [[A.x + A.w / 2, A.y + A.h]];
      (le.rel || []).forEach(function (p) { pts.push([o[0] + p[0], o[1] + p[1]]); });
      pts.push([B.x + B.w / 2, B.y]);
      var label = null;
      if (withLabels && le.e.text) {
        var lw = Math.ceil(textW(le.e.text, SMALL)) + 6, p0 = pts[0], p1 = pts[1];
        label = {x: (p0[0] + p1[0]) / 2 - lw / 2, y: p0[1] + Math.min(QLGAP, Math.max(13, p1[1] - p0[1])) / 2 - 6.5, w: lw, h: 13};
      }
      edges.push({e: le.e, pts: pts, label: label});
    });
    return {boxes: boxes, edges: edges, w: size.root.w, h: size.root.h, quick: true};
  }

  /* A large drawing's quick layout runs in a worker of its own (issue 35: every group of a 100k-node model open
   * is ~130k items, ~3 s of layout, the tab frozen meanwhile): the same function and constants, made from its
   * own source, given only what it reads (per item its type, parent, size and title; per edge its ends and
   * text) and the widths of the texts it measures (a worker has no DOM canvas; the main thread's widths keep
   * both layouts identical). Its answer comes back packed in typed arrays (moved, not copied). The old drawing
   * stays on screen and pannable meanwhile; where no worker can be made the layout runs here as before. */
  var QUICK_WORKER_MIN = 20000;   /* below, the layout (~0.25 s at 10k items) runs here, already compiled: a cold worker
                                   * and the copies to and from it cost more than they save (issue 35's 10k goal) */
  function packQuick(vis, lay) {
    var order = vis.order, n = order.length, boxes = new Float64Array(4 * n), i, j;
    for (i = 0; i < n; i++) {
      var b = lay.boxes[order[i]];
      if (b) { boxes[4 * i] = b.x; boxes[4 * i + 1] = b.y; boxes[4 * i + 2] = b.w; boxes[4 * i + 3] = b.h; } else boxes[4 * i] = NaN;
    }
    var m = lay.edges.length, edgeIdx = new Int32Array(m), ptOff = new Int32Array(m + 1), total = 0, k = 0;
    for (i = 0; i < m; i++) total += lay.edges[i].pts.length;
    var pts = new Float64Array(2 * total), labels = new Float64Array(4 * m);
    for (i = 0; i < m; i++) {
      var ed = lay.edges[i], l = ed.label;
      edgeIdx[i] = ed.e.i; ptOff[i] = k;
      for (j = 0; j < ed.pts.length; j++) { pts[2 * k] = ed.pts[j][0]; pts[2 * k + 1] = ed.pts[j][1]; k++; }
      if (l) { labels[4 * i] = l.x; labels[4 * i + 1] = l.y; labels[4 * i + 2] = l.w; labels[4 * i + 3] = l.h; } else labels[4 * i] = NaN;
    }
    ptOff[m] = k;
    return {boxes: boxes, edgeIdx: edgeIdx, ptOff: ptOff, pts: pts, labels: labels, w: lay.w, h: lay.h};
  }
  function unpackQuick(vis, r, resolve) {
    /* in slices of 20,000 (boxes, then edges), yielding between them: no long stall of the page */
    var boxes = {}, edges = [], order = vis.order, B = r.boxes, P = r.pts, L = r.labels, m = r.edgeIdx.length;
    (function slice(from) {
      var n = order.length, i, j, end = Math.min(n + m, from + 20000);
      for (i = from; i < Math.min(end, n); i++) if (B[4 * i] === B[4 * i]) boxes[order[i]] = {x: B[4 * i], y: B[4 * i + 1], w: B[4 * i + 2], h: B[4 * i + 3]};
      for (i = Math.max(from, n) - n; i < end - n; i++) {
        var pts = [];
        for (j = r.ptOff[i]; j < r.ptOff[i + 1]; j++) pts.push([P[2 * j], P[2 * j + 1]]);
        var label = L[4 * i] === L[4 * i] ? {x: L[4 * i], y: L[4 * i + 1], w: L[4 * i + 2], h: L[4 * i + 3]} : null;
        edges.push({e: vis.edges[r.edgeIdx[i]], pts: pts, label: label});
      }
      if (end < n + m) setTimeout(function () { slice(end); }, 0);
      else resolve({boxes: boxes, edges: edges, w: r.w, h: r.h, quick: true});
    })(0);
  }
  var quickWorker = {w: null, failed: false, pending: {}, seq: 0};
  function quickWorkerSource() {
    var consts = {LABEL_MAX: LABEL_MAX, QGAP: QGAP, QLGAP: QLGAP, QSEP: QSEP, QDUMMY: QDUMMY, QMAXSPAN: QMAXSPAN,
                  CHEAD: CHEAD, BOLD: BOLD, SMALL: SMALL};
    return "'use strict';var " + Object.keys(consts).map(function (k) { return k + '=' + JSON.stringify(consts[k]); }).join(',') +
      ';var WIDTHS={};function textW(t,f){var w=WIDTHS[f+"\\u0000"+t];return w===undefined?t.length*7:w;}\n' +
      quickLayout.toString() + '\n' + packQuick.toString() + '\n' + unpackInput.toString() + '\n' +
      'self.onmessage=function(e){WIDTHS=e.data.widths;var vis=unpackInput(e.data),r=packQuick(vis,quickLayout(vis));r.id=e.data.id;' +
      'self.postMessage(r,[r.boxes.buffer,r.edgeIdx.buffer,r.ptOff.buffer,r.pts.buffer,r.labels.buffer]);};';
  }
  function startQuickWorker() {
    /* The worker, made once (at the viewer's start for a large scene, so its compile is off the click's path). */
    var qw = quickWorker;
    if (qw.failed) return false;
    if (!qw.w) {
      try {
        qw.w = new Worker(URL.createObjectURL(new Blob([quickWorkerSource()], {type: 'text/javascript'})));
      } catch (e) { qw.failed = true; return false; }
      qw.w.onmessage = function (e) { var p = qw.pending[e.data.id]; delete qw.pending[e.data.id]; if (p) p.resolve(e.data); };
      qw.w.onerror = function (ev) {
        if (ev.preventDefault) ev.preventDefault();
        qw.failed = true; var ps = qw.pending; qw.pending = {};
        Object.keys(ps).forEach(function (k) { ps[k].reject(new Error('quick layout worker failed')); });
      };
    }
    return true;
  }
  function quickLayoutOff(vis) {
    /* A promise of quickLayout(vis) computed in the worker; null where no worker can be made. */
    var qw = quickWorker;
    if (!startQuickWorker()) return null;
    /* packed: one string of ids, typed arrays of kinds, parents, sizes and edge ends (copied in one go; the
     * worker makes its objects), the open groups' titles and, with labels, the edges' texts */
    var order = vis.order, n = order.length, m = vis.edges.length, withLabels = m <= LABEL_MAX, widths = {}, titles = {};
    var open = new Uint8Array(n), parent = new Int32Array(n), size = new Float64Array(2 * n), ends = new Int32Array(2 * m), texts = [];
    for (var k = 0; k < n; k++) {
      var it = vis.items[order[k]];
      it.k = k; parent[k] = it.parent; size[2 * k] = it.w; size[2 * k + 1] = it.h;
      if (it.type === 'open') { open[k] = 1; titles[k] = it.title; widths[BOLD + '\u0000' + it.title] = textW(it.title, BOLD); }
    }
    for (k = 0; k < m; k++) {
      var e = vis.edges[k];
      ends[2 * k] = vis.items[e.src].k; ends[2 * k + 1] = vis.items[e.dst].k;
      if (withLabels) { texts.push(e.text || ''); if (e.text) widths[SMALL + '\u0000' + e.text] = textW(e.text, SMALL); }
    }
    var id = ++qw.seq;
    return new Promise(function (resolve, reject) {
      qw.pending[id] = {resolve: function (r) { unpackQuick(vis, r, resolve); }, reject: reject};
      qw.w.postMessage({id: id, ids: order.join('\n'), open: open, parent: parent, size: size, ends: ends, titles: titles,
                        texts: withLabels ? texts : null, widths: widths}, [open.buffer, parent.buffer, size.buffer, ends.buffer]);
    });
  }
  function unpackInput(d) {
    /* in the worker: the visible graph quickLayout reads, from quickLayoutOff's packed message */
    var order = d.ids ? d.ids.split('\n') : [], items = {}, edges = [], k;
    for (k = 0; k < order.length; k++) {
      items[order[k]] = {type: d.open[k] ? 'open' : 'leaf', parent: d.parent[k], w: d.size[2 * k], h: d.size[2 * k + 1],
                         title: d.open[k] ? d.titles[k] : ''};
    }
    for (k = 0; k < d.ends.length / 2; k++) {
      edges.push({src: order[d.ends[2 * k]], dst: order[d.ends[2 * k + 1]], text: d.texts ? d.texts[k] : '', i: k});
    }
    return {items: items, order: order, edges: edges};
  }

  /* ---------- the viewer ---------- */
  function Viewer(root, data) {
    var self = this;
    this.root = root; this.data = data;
    this.model = new Model(data.scene);
    this.panels = [];
    this.t = {k: 1, x: 0, y: 0};
    this.selected = null; this.selTensor = null;
    this.engine = makeEngine();
    if (data.scene.leaves.length + data.scene.groups.length >= QUICK_WORKER_MIN) startQuickWorker();
    this.layoutSeq = 0; this.layoutMs = 0; this.frameCount = 0; this.frames = []; this.boxes = [];
    var row = root.querySelector('.gv-panels');
    data.panels.forEach(function (p, i) {
      var el = document.createElement('div'); el.className = 'gv-panel';
      var title = document.createElement('div'); title.className = 'gv-title'; title.textContent = p.title || '';
      var canvas = document.createElement('canvas'); canvas.className = 'gv-canvas'; canvas.dataset.panel = String(i);
      el.appendChild(title); el.appendChild(canvas); row.appendChild(el);
      self.panels.push({el: el, canvas: canvas, side: p.side || null, labels: []});
    });
    this.mini = root.querySelector('.gv-minimap');
    this.details = root.querySelector('.gv-details');
    this.status = root.querySelector('.gv-status');
    this.bind();
    this.resize();
    window.addEventListener('resize', function () { self.resize(); self.schedule(); });
    if (window.ResizeObserver) {        /* a host page that resizes the frame's content without a resize event */
      new ResizeObserver(function () { self.resize(); self.schedule(); }).observe(this.panels[0].canvas);
    }
  }

  Viewer.prototype.resize = function () {
    var dpr = window.devicePixelRatio || 1;
    this.panels.forEach(function (p) {
      var r = p.canvas.getBoundingClientRect();
      p.w = r.width; p.h = r.height;
      p.canvas.width = Math.max(1, Math.round(r.width * dpr)); p.canvas.height = Math.max(1, Math.round(r.height * dpr));
      p.dpr = dpr;
    });
    var mr = this.mini.getBoundingClientRect();
    this.mini.width = Math.round(mr.width * dpr); this.mini.height = Math.round(mr.height * dpr);
  };

  Viewer.prototype.relayout = function (anchor) {
    /* The quick layered layout is drawn first (every size); below ELK_MAX items ELK's compound layout
     * then replaces it, keeping the anchor (the clicked group, else the selection) where it was on
     * screen, or the opening view if the user has not moved it. ``ready()`` is false until then. */
    var self = this, vis = this.model.visible(), seq = ++this.layoutSeq, t0 = performance.now();
    var count = vis.order.length, useElk = count <= ELK_MAX && !this.quickOnly;
    this.status.textContent = 'laying out ' + count.toLocaleString() + ' items…';
    this.refining = useElk;
    var done = function (lay, final) {
      if (seq !== self.layoutSeq) return;
      self.layoutMs = performance.now() - t0;
      if (final) self.refining = false;
      var refine = !!self.lay && self.lay.seq === seq;
      var keep = refine ? (anchor || self.selected) : anchor, before = keep && self.lay ? self.screenOf(keep) : null;
      lay.seq = seq;
      self.vis = vis; self.lay = lay; self.layAt = performance.now(); self.buildIndex();
      if (!self.placed) {
        self.initialView(); self.placed = true;
        if (self.model.s.leaves.length >= QUICK_WORKER_MIN) setTimeout(function () { self.model.warmBoxes(0); }, 50);
      }
      else if (before && lay.boxes[keep] && (!refine || anchor || self.moved || self.selected)) {
        var b = lay.boxes[keep];
        self.t.x = before.x - b.x * self.t.k; self.t.y = before.y - b.y * self.t.k;
      } else if (refine && !self.moved) self.initialView();
      var how = lay.quick ? (useElk && !final ? 'quick layout, ELK…' : 'quick layered layout' + (self.quickWhere === 'worker' ? ', worker' : ''))
        : 'ELK, ' + self.engine.kind;
      self.status.textContent = count.toLocaleString() + ' items · ' + vis.edges.length.toLocaleString() + ' edges · layout ' +
        Math.round(self.layoutMs) + ' ms (' + how + ')';
      self.schedule();
    };
    var off = count >= QUICK_WORKER_MIN && !this.quickMain ? quickLayoutOff(vis) : null;
    if (off) {
      this.quickWhere = 'worker';
      off.then(function (q) { if (seq === self.layoutSeq) { self.quickMs = performance.now() - t0; done(q, !useElk); } },
        function () { if (seq === self.layoutSeq) { self.quickMain = true; self.relayout(anchor); } });
    } else setTimeout(function () {
      if (seq !== self.layoutSeq || (self.lay && self.lay.seq === seq)) return;
      var q = quickLayout(vis);
      self.quickMs = performance.now() - t0; self.quickWhere = 'main';
      done(q, !useElk);
    }, 0);
    if (!useElk) return;
    this.engine.layout(elkGraph(vis)).then(function (res) { done(readElk(vis, res), true); }, function (err) {
      if (seq !== self.layoutSeq) return;
      console.warn('ELK failed, keeping the quick layout:', err);
      self.refining = false;
      self.status.textContent = self.status.textContent.replace(', ELK…', '');
      self.schedule();
    });
  };

  Viewer.prototype.buildIndex = function () {
    /* draw lists, sorted: open frames by depth, then leaves */
    var vis = this.vis, lay = this.lay, frames = [], boxes = [];
    var groups = this.model.s.groups;
    vis.order.forEach(function (id) {
      var it = vis.items[id], b = lay.boxes[id];
      if (!b) return;
      if (it.type === 'open') { frames.push({it: it, b: b, depth: groups[it.g].depth}); }
      else boxes.push({it: it, b: b});
    });
    frames.sort(function (a, b) { return a.depth - b.depth; });
    this.frames = frames; this.boxes = boxes;
    var minx = Infinity, miny = Infinity, maxx = -Infinity, maxy = -Infinity;
    boxes.concat(frames).forEach(function (o) {
      minx = Math.min(minx, o.b.x); miny = Math.min(miny, o.b.y);
      maxx = Math.max(maxx, o.b.x + o.b.w); maxy = Math.max(maxy, o.b.y + o.b.h);
    });
    if (minx === Infinity) { minx = miny = 0; maxx = maxy = 1; }
    this.bounds = {x: minx, y: miny, w: maxx - minx, h: maxy - miny};
    this.lay.edges.forEach(function (ed) {
      var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      ed.pts.forEach(function (p) { x0 = Math.min(x0, p[0]); y0 = Math.min(y0, p[1]); x1 = Math.max(x1, p[0]); y1 = Math.max(y1, p[1]); });
      ed.bb = [x0, y0, x1, y1];
    });
    this.bands = boxes.length + this.lay.edges.length >= BAND_MIN ? buildBands(this.bounds, frames, boxes, this.lay.edges) : null;
  };

  /* Horizontal bands of a large drawing (issue 35: with every group of a 100k-node model open, visiting its
   * ~130k boxes, ~130k edges and ~30k frames on each frame took 30-80 ms): each band lists what crosses it, a
   * frame draws only the bands in view, and zoomed out so far that a band is under 2 px high, each band is
   * drawn as one rect spanning what it holds (boxes are sub-pixel there). Objects spanning many bands (the
   * outer frames, a long edge) stay in one list visited every frame. Below BAND_MIN everything is visited. */
  var BAND_MIN = 20000, BAND_SPAN = 32;
  function buildBands(bounds, frames, boxes, edges) {
    var n = Math.max(1, Math.min(16384, Math.ceil((boxes.length + frames.length) / 8))), h = bounds.h / n || 1;
    var bands = {n: n, h: h, y0: bounds.y, frames: [], boxes: [], edges: [], big: {frames: [], boxes: [], edges: []},
                 x0: new Float64Array(n).fill(Infinity), x1: new Float64Array(n).fill(-Infinity), stamp: 0};
    for (var i = 0; i < n; i++) { bands.frames.push([]); bands.boxes.push([]); bands.edges.push([]); }
    function put(kind, o, x0, y0, x1, y1, order) {
      var a = Math.max(0, Math.floor((y0 - bands.y0) / h)), b = Math.min(n - 1, Math.floor((y1 - bands.y0) / h));
      o.order = order; o.stamp = 0;
      if (b - a > BAND_SPAN) { bands.big[kind].push(o); return; }
      for (var j = a; j <= b; j++) {
        bands[kind][j].push(o);
        if (kind === 'boxes') { if (x0 < bands.x0[j]) bands.x0[j] = x0; if (x1 > bands.x1[j]) bands.x1[j] = x1; }
      }
    }
    frames.forEach(function (f, k) { put('frames', f, f.b.x, f.b.y, f.b.x + f.b.w, f.b.y + f.b.h, k); });
    boxes.forEach(function (o, k) { put('boxes', o, o.b.x, o.b.y, o.b.x + o.b.w, o.b.y + o.b.h, k); });
    edges.forEach(function (ed, k) { put('edges', ed, ed.bb[0], ed.bb[1], ed.bb[2], ed.bb[3], k); });
    return bands;
  }

  /* What of ``kind`` ('frames', 'boxes', 'edges') may cross the rows vy0..vy1, in drawing order. */
  Viewer.prototype.inRows = function (kind, vy0, vy1) {
    var all = kind === 'edges' ? this.lay.edges : this[kind], bd = this.bands;
    if (!bd) return all;
    var stamp = ++bd.stamp, out = [], a = Math.max(0, Math.floor((vy0 - bd.y0) / bd.h)), b = Math.min(bd.n - 1, Math.floor((vy1 - bd.y0) / bd.h));
    bd.big[kind].forEach(function (o) { o.stamp = stamp; out.push(o); });
    for (var j = a; j <= b; j++) {
      var list = bd[kind][j];
      for (var i = 0; i < list.length; i++) { var o = list[i]; if (o.stamp !== stamp) { o.stamp = stamp; out.push(o); } }
    }
    out.sort(function (x, y) { return x.order - y.order; });
    return out;
  };

  Viewer.prototype.initialView = function () {
    /* Readable first: the whole drawing if it fits at >= 85 %, else 85-100 % starting at
     * the inputs (the topmost box centred), like Netron; Fit shows everything. */
    var p = this.panels[0], b = this.bounds, a = this.freeArea();
    var fit = Math.min(1.1, (a.w - 20) / b.w, (a.h - 20) / b.h);
    if (fit >= 0.85) {                  /* all of it, clear of the minimap */
      this.t.k = fit; this.t.x = a.x + (a.w - b.w * fit) / 2 - b.x * fit; this.t.y = a.y + (a.h - b.h * fit) / 2 - b.y * fit;
      return;
    }
    var k = Math.max(0.85, Math.min(1, (p.w - 20) / b.w));
    this.t.k = k;
    if (b.w * k <= p.w) this.t.x = (p.w - b.w * k) / 2 - b.x * k;
    else {
      var top = null;
      this.boxes.forEach(function (o) { if (!top || o.b.y < top.y) top = o.b; });
      this.t.x = p.w / 2 - (top.x + top.w / 2) * k;
    }
    this.t.y = b.h * k <= p.h ? (p.h - b.h * k) / 2 - b.y * k : 10 - b.y * k;
  };

  Viewer.prototype.freeArea = function () {
    /* The part of the first panel the minimap does not cover: beside it (left) or above it,
     * whichever lets the drawing be larger. {x, y, w, h} in the panel's pixels. */
    var p = this.panels[0], b = this.bounds, full = {x: 0, y: 0, w: p.w, h: p.h};
    var pr = p.canvas.getBoundingClientRect(), mr = this.mini.getBoundingClientRect();
    var ox = Math.min(pr.right, mr.right) - Math.max(pr.left, mr.left);
    var oy = Math.min(pr.bottom, mr.bottom) - Math.max(pr.top, mr.top);
    if (!(ox > 0 && oy > 0)) return full;                       /* no overlap (or no minimap) */
    var left = {x: 0, y: 0, w: Math.max(40, mr.left - pr.left - 8), h: p.h};
    var above = {x: 0, y: 0, w: p.w, h: Math.max(40, mr.top - pr.top - 8)};
    var scale = function (a) { return Math.min((a.w - 20) / b.w, (a.h - 20) / b.h); };
    return scale(left) >= scale(above) ? left : above;
  };

  Viewer.prototype.fit = function () {
    /* The whole drawing, every box of it, in the area the minimap leaves free: that is what Fit
     * promises (issue 33: on a detector or a decoder a "fill the width first" Fit showed only the
     * top part). A deep model then reads as a narrow column; the opening view and zoom are for
     * reading, Fit is for seeing all of it. */
    this.resize();                      /* the frame may have been resized since it was drawn */
    var b = this.bounds, a = this.freeArea();
    var k = Math.min(2, (a.w - 20) / b.w, (a.h - 20) / b.h);
    this.t.k = k; this.t.x = a.x + (a.w - b.w * k) / 2 - b.x * k; this.t.y = a.y + (a.h - b.h * k) / 2 - b.y * k;
    this.fitMode = 'all'; this.moved = true;
    this.schedule();
  };

  Viewer.prototype.screenOf = function (id) {
    var b = this.lay && this.lay.boxes[id];
    if (!b) return null;
    return {x: b.x * this.t.k + this.t.x, y: b.y * this.t.k + this.t.y, w: b.w * this.t.k, h: b.h * this.t.k};
  };

  Viewer.prototype.schedule = function () {
    var self = this;
    if (this.raf) return;
    this.raf = requestAnimationFrame(function () { self.raf = 0; self.draw(); });
  };

  function ghostOf(side, panelSide) {
    return panelSide && side && side !== 'ab' && side !== panelSide;
  }

  Viewer.prototype.itemSide = function (it) {
    if (it.type === 'leaf' || it.type === 'sealed') return this.model.s.leaves[it.leaf].side || 'ab';
    return 'ab';
  };

  Viewer.prototype.draw = function () {
    var self = this;
    this.lastDrawAt = performance.now();
    this.panels.forEach(function (p) { self.drawPanel(p); });
    this.drawMini();
    if (this.drawLog) this.drawLog.push(performance.now() - this.lastDrawAt);   /* the benchmark's frame cost */
    this.frameCount++;
    if (this.lay && !this.paintPending && !window.__graphReady) {
      /* First paint = the first frame that shows the laid-out graph (issue 35: the first draw runs
       * before ELK has answered and shows an empty canvas). The draw above ran inside a rAF
       * callback; the next rAF callback runs after that frame was presented, so the marker is the
       * time the boxes were on screen. ``__graphPaint`` says what that frame showed. */
      var lay = this.lay, drawn = this.panels[0].labels.length, drawnAt = this.lastDrawAt;
      this.paintPending = true;
      requestAnimationFrame(function () {
        window.__graphPaint = {layoutSeq: self.layoutSeq, items: self.boxes.length, labels: drawn,
                               layoutMs: self.layoutMs, drawnAt: drawnAt, kind: lay.quick ? 'quick' : 'elk'};
        window.__graphReady = performance.now();
        document.body.dataset.rendered = '1';
      });
    }
  };

  function roundRect(ctx, x, y, w, h, r) {
    ctx.beginPath();
    ctx.moveTo(x + r, y); ctx.lineTo(x + w - r, y); ctx.quadraticCurveTo(x + w, y, x + w, y + r);
    ctx.lineTo(x + w, y + h - r); ctx.quadraticCurveTo(x + w, y + h, x + w - r, y + h);
    ctx.lineTo(x + r, y + h); ctx.quadraticCurveTo(x, y + h, x, y + h - r);
    ctx.lineTo(x, y + r); ctx.quadraticCurveTo(x, y, x + r, y); ctx.closePath();
  }

  Viewer.prototype.drawPanel = function (p) {
    var ctx = p.canvas.getContext('2d'), t = this.t, k = t.k, self = this;
    ctx.setTransform(p.dpr, 0, 0, p.dpr, 0, 0);
    ctx.clearRect(0, 0, p.w, p.h);
    ctx.fillStyle = '#fafafa'; ctx.fillRect(0, 0, p.w, p.h);
    p.labels = [];
    if (!this.lay) return;
    ctx.translate(t.x, t.y); ctx.scale(k, k);
    var vx0 = -t.x / k, vy0 = -t.y / k, vx1 = (p.w - t.x) / k, vy1 = (p.h - t.y) / k;
    function inView(x, y, w, h) { return x + w >= vx0 && y + h >= vy0 && x <= vx1 && y <= vy1; }
    var text = 12 * k >= MIN_TEXT_PX, detail = 12 * k >= 6.5;
    function label(x, y, w, h, kind, id) {
      var sx = x * k + t.x, sy = y * k + t.y, sw = w * k, sh = h * k;
      if (sx + sw < 0 || sy + sh < 0 || sx > p.w || sy > p.h) return;
      p.labels.push({x: sx, y: sy, w: sw, h: sh, kind: kind, id: id});
    }
    if (!text) { this.drawCoarse(ctx, p, inView, vy0, vy1); return; }
    /* frames of open groups */
    this.inRows('frames', vy0, vy1).forEach(function (f) {
      var b = f.b;
      if (!inView(b.x, b.y, b.w, b.h)) return;
      var shade = 236 - Math.min(5, f.depth) * 7;
      ctx.fillStyle = 'rgba(' + (shade - 8) + ',' + (shade - 2) + ',' + (shade + 10 > 255 ? 255 : shade + 10) + ',0.55)';
      var fmark = self.model.s.groups[f.it.g].mark;
      ctx.strokeStyle = fmark || '#9aa5b4'; ctx.lineWidth = (fmark ? 2 : 1) / Math.max(k, 0.5);
      roundRect(ctx, b.x, b.y, b.w, b.h, 6); ctx.fill(); ctx.stroke();
      if (text) {
        ctx.fillStyle = '#2d3a4a'; ctx.font = BOLD; ctx.textBaseline = 'middle';
        var tt = '− ' + f.it.title, tw = Math.min(textW(tt, BOLD), b.w - 12);
        ctx.save(); ctx.beginPath(); ctx.rect(b.x, b.y, b.w, CHEAD); ctx.clip();
        ctx.fillText(tt, b.x + 8, b.y + CHEAD / 2 + 1); ctx.restore();
        label(b.x + 8, b.y + 3, tw, CHEAD - 6, 'frame', f.it.id);
      }
    });
    /* edges */
    var sel = this.selTensor, many = this.lay.edges.length > 3000 && k < 0.3;
    ctx.lineWidth = 1.2 / Math.max(k, 0.35);
    this.inRows('edges', vy0, vy1).forEach(function (ed) {
      var bb = ed.bb;
      if (!inView(bb[0], bb[1], bb[2] - bb[0] + 1, bb[3] - bb[1] + 1)) return;
      var a = self.vis.items[ed.e.src], b = self.vis.items[ed.e.dst];
      var ghost = ghostOf(self.itemSide(a), p.side) || ghostOf(self.itemSide(b), p.side) || ghostOf(ed.e.side, p.side);
      var hot = sel && ed.e.tensors.indexOf(sel) >= 0;
      ctx.strokeStyle = hot ? '#d9480f' : (ghost ? 'rgba(120,120,120,0.18)' : '#6b7280');
      ctx.lineWidth = (hot ? 2.6 : 1.2) / Math.max(k, 0.35);
      var pts = ed.pts;
      ctx.beginPath(); ctx.moveTo(pts[0][0], pts[0][1]);
      for (var i = 1; i < pts.length; i++) ctx.lineTo(pts[i][0], pts[i][1]);
      ctx.stroke();
      if (!many && pts.length > 1) {
        var e1 = pts[pts.length - 1], e0 = pts[pts.length - 2], ang = Math.atan2(e1[1] - e0[1], e1[0] - e0[0]);
        ctx.fillStyle = ctx.strokeStyle; ctx.beginPath(); ctx.moveTo(e1[0], e1[1]);
        ctx.lineTo(e1[0] - 7 * Math.cos(ang - 0.4), e1[1] - 7 * Math.sin(ang - 0.4));
        ctx.lineTo(e1[0] - 7 * Math.cos(ang + 0.4), e1[1] - 7 * Math.sin(ang + 0.4)); ctx.fill();
      }
    });
    /* boxes */
    var selId = this.selected;
    this.inRows('boxes', vy0, vy1).forEach(function (o) {
      var b = o.b, it = o.it;
      if (!inView(b.x, b.y, b.w, b.h)) return;
      var leaf = it.leaf !== undefined ? self.model.s.leaves[it.leaf] : null;
      var ghost = ghostOf(self.itemSide(it), p.side);
      ctx.globalAlpha = ghost ? 0.18 : 1;
      var color = leaf ? leaf.c : '#4a5568';
      if (it.type === 'group') {      /* a closed group: stacked card */
        ctx.fillStyle = '#e2e8f0'; roundRect(ctx, b.x + 3, b.y + 3, b.w, b.h, 4); ctx.fill();
      }
      ctx.fillStyle = '#ffffff'; ctx.strokeStyle = it.id === selId ? '#d9480f' : '#4b5563';
      ctx.lineWidth = (it.id === selId ? 3 : 1) / Math.max(k, 0.5);
      roundRect(ctx, b.x, b.y, b.w, b.h, 4); ctx.fill();
      ctx.save(); roundRect(ctx, b.x, b.y, b.w, b.h, 4); ctx.clip();
      ctx.fillStyle = it.type === 'group' ? '#4a5568' : color; ctx.fillRect(b.x, b.y, b.w, HEAD);
      var mark = leaf ? leaf.mark : (it.g !== undefined ? self.model.s.groups[it.g].mark : null);
      if (mark) {
        ctx.fillStyle = mark;
        /* the stripe on the body; a box without one (a pill: Sigmoid, Mul) gets it over its whole height */
        if (b.h - HEAD >= 4) ctx.fillRect(b.x, b.y + HEAD, 5, b.h - HEAD); else ctx.fillRect(b.x, b.y, MARK_PILL, b.h);
      }
      ctx.restore();
      roundRect(ctx, b.x, b.y, b.w, b.h, 4); ctx.stroke();
      if (text) {
        ctx.textBaseline = 'middle'; ctx.fillStyle = '#ffffff'; ctx.font = BOLD;
        var title = (it.type === 'group' ? '+ ' : '') + it.title;
        ctx.fillText(title, b.x + PADX, b.y + HEAD / 2 + 1);
        if (detail) {
          ctx.font = FONT; ctx.fillStyle = '#1f2937';
          for (var i = 0; i < it.lines.length; i++) ctx.fillText(it.lines[i], b.x + PADX, b.y + HEAD + 3 + LINE * i + LINE / 2);
        }
        label(b.x + 1, b.y + 1, b.w - 2, b.h - 2, it.type, it.id);
      }
      ctx.globalAlpha = 1;
    });
    /* edge labels */
    if (text && detail) {
      ctx.font = SMALL; ctx.textBaseline = 'middle';
      this.inRows('edges', vy0, vy1).forEach(function (ed) {
        var l = ed.label;
        if (!l || !ed.e.text || !inView(l.x, l.y, l.w, l.h)) return;
        var a = self.vis.items[ed.e.src], bI = self.vis.items[ed.e.dst];
        var ghost = ghostOf(self.itemSide(a), p.side) || ghostOf(self.itemSide(bI), p.side) || ghostOf(ed.e.side, p.side);
        ctx.globalAlpha = ghost ? 0.2 : 1;
        ctx.fillStyle = 'rgba(250,250,250,0.9)'; ctx.fillRect(l.x, l.y, l.w, l.h);
        ctx.fillStyle = sel && ed.e.tensors.indexOf(sel) >= 0 ? '#d9480f' : '#374151';
        ctx.fillText(ed.e.text, l.x + 3, l.y + l.h / 2 + 0.5);
        ctx.globalAlpha = 1;
        label(l.x, l.y, l.w, l.h, 'edge', ed.e.id);
      });
    }
  };

  /* Zoomed out: no text, so no per-box paths, clips or strokes. Boxes are batched into
   * one path per colour, edges into one path; this is what keeps 10k boxes fluid. */
  Viewer.prototype.drawCoarse = function (ctx, p, inView, vy0, vy1) {
    var self = this, k = this.t.k, bd = this.bands;
    if (bd && bd.h * k < 2) { this.drawBands(ctx, vy0, vy1); return; }
    ctx.fillStyle = 'rgba(203,213,225,0.45)'; ctx.strokeStyle = '#9aa5b4'; ctx.lineWidth = 1 / k;
    ctx.beginPath();
    this.inRows('frames', vy0, vy1).forEach(function (f) { var b = f.b; if (inView(b.x, b.y, b.w, b.h)) ctx.rect(b.x, b.y, b.w, b.h); });
    ctx.fill(); ctx.stroke();
    var solid = [], faint = [];
    this.inRows('edges', vy0, vy1).forEach(function (ed) {
      var bb = ed.bb;
      if (!inView(bb[0], bb[1], bb[2] - bb[0] + 1, bb[3] - bb[1] + 1)) return;
      var ghost = ghostOf(self.itemSide(self.vis.items[ed.e.src]), p.side) ||
        ghostOf(self.itemSide(self.vis.items[ed.e.dst]), p.side) || ghostOf(ed.e.side, p.side);
      (ghost ? faint : solid).push(ed.pts);
    });
    [[solid, '#6b7280'], [faint, 'rgba(120,120,120,0.18)']].forEach(function (pair) {
      if (!pair[0].length) return;
      ctx.strokeStyle = pair[1]; ctx.lineWidth = 1 / k; ctx.beginPath();
      pair[0].forEach(function (pts) {
        ctx.moveTo(pts[0][0], pts[0][1]);
        for (var i = 1; i < pts.length; i++) ctx.lineTo(pts[i][0], pts[i][1]);
      });
      ctx.stroke();
    });
    var byColor = {}, minPx = 1 / k;
    this.inRows('boxes', vy0, vy1).forEach(function (o) {
      var b = o.b, it = o.it;
      if (!inView(b.x, b.y, b.w, b.h)) return;
      var leaf = it.leaf !== undefined ? self.model.s.leaves[it.leaf] : null;
      /* zoomed out, a box is its overlay's colour (the mark) where it has one, else its op's */
      var key = (leaf ? (leaf.mark || leaf.c) : '#4a5568') + (ghostOf(self.itemSide(it), p.side) ? '|g' : '');
      (byColor[key] = byColor[key] || []).push(b);
    });
    Object.keys(byColor).forEach(function (key) {
      var parts = key.split('|');
      ctx.globalAlpha = parts[1] ? 0.18 : 1;
      ctx.fillStyle = parts[0]; ctx.beginPath();
      byColor[key].forEach(function (b) { ctx.rect(b.x, b.y, Math.max(b.w, minPx), Math.max(b.h, minPx)); });
      ctx.fill();
    });
    ctx.globalAlpha = 1;
    if (this.selected && this.lay.boxes[this.selected]) {
      var sb = this.lay.boxes[this.selected];
      ctx.strokeStyle = '#d9480f'; ctx.lineWidth = 3 / k; ctx.strokeRect(sb.x, sb.y, sb.w, sb.h);
    }
  };

  /* Zoomed out past the bands' height: each band one rect over what it holds, the outer frames outlined. */
  Viewer.prototype.drawBands = function (ctx, vy0, vy1) {
    var bd = this.bands, k = this.t.k, a = Math.max(0, Math.floor((vy0 - bd.y0) / bd.h)), b = Math.min(bd.n - 1, Math.floor((vy1 - bd.y0) / bd.h));
    ctx.strokeStyle = '#9aa5b4'; ctx.lineWidth = 1 / k; ctx.beginPath();
    this.frames.forEach(function (f) { if (f.depth === 1) ctx.rect(f.b.x, f.b.y, f.b.w, f.b.h); });
    ctx.stroke();
    ctx.fillStyle = '#64748b'; ctx.beginPath();
    for (var j = a; j <= b; j++) if (bd.x1[j] > bd.x0[j]) ctx.rect(bd.x0[j], bd.y0 + j * bd.h, Math.max(bd.x1[j] - bd.x0[j], 1 / k), bd.h);
    ctx.fill();
    if (this.selected && this.lay.boxes[this.selected]) {
      var sb = this.lay.boxes[this.selected];
      ctx.strokeStyle = '#d9480f'; ctx.lineWidth = 3 / k; ctx.strokeRect(sb.x, sb.y, sb.w, sb.h);
    }
  };

  Viewer.prototype.drawMini = function () {
    var c = this.mini, ctx = c.getContext('2d'), b = this.bounds, dpr = window.devicePixelRatio || 1;
    if (!b) return;
    var W = c.width / dpr, H = c.height / dpr, s = Math.min((W - 8) / b.w, (H - 8) / b.h);
    var ox = (W - b.w * s) / 2 - b.x * s, oy = (H - b.h * s) / 2 - b.y * s;
    this.miniT = {s: s, ox: ox, oy: oy};
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H); ctx.fillStyle = 'rgba(255,255,255,0.92)'; ctx.fillRect(0, 0, W, H);
    ctx.fillStyle = '#cbd5e1';
    this.frames.forEach(function (f) { if (f.depth === 1) ctx.fillRect(ox + f.b.x * s, oy + f.b.y * s, f.b.w * s, f.b.h * s); });
    ctx.fillStyle = '#475569';
    var self = this;
    if (!this.miniCache || this.miniCache.lay !== this.lay || this.miniCache.W !== W || this.miniCache.H !== H) {
      /* the drawing only changes with the layout: cache it as an image */
      var off = document.createElement('canvas'); off.width = c.width; off.height = c.height;
      var octx = off.getContext('2d'); octx.setTransform(dpr, 0, 0, dpr, 0, 0);
      var byColor = {};
      this.boxes.forEach(function (o) {
        var leaf = o.it.leaf !== undefined ? self.model.s.leaves[o.it.leaf] : null;
        var col = leaf ? (leaf.mark || leaf.c) : '#475569';
        (byColor[col] = byColor[col] || []).push(o.b);
      });
      Object.keys(byColor).forEach(function (col) {
        octx.fillStyle = col; octx.beginPath();
        byColor[col].forEach(function (b) { octx.rect(ox + b.x * s, oy + b.y * s, Math.max(1, b.w * s), Math.max(1, b.h * s)); });
        octx.fill();
      });
      this.miniCache = {lay: this.lay, W: W, H: H, img: off};
    }
    ctx.setTransform(1, 0, 0, 1, 0, 0); ctx.drawImage(this.miniCache.img, 0, 0); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    var p = this.panels[0], t = this.t;
    ctx.strokeStyle = '#d9480f'; ctx.lineWidth = 1.5;
    ctx.strokeRect(ox + (-t.x / t.k) * s, oy + (-t.y / t.k) * s, p.w / t.k * s, p.h / t.k * s);
  };

  /* ---------- interaction ---------- */
  function distSeg(px, py, a, b) {
    var dx = b[0] - a[0], dy = b[1] - a[1], L = dx * dx + dy * dy, u = L ? ((px - a[0]) * dx + (py - a[1]) * dy) / L : 0;
    u = Math.max(0, Math.min(1, u));
    var x = a[0] + u * dx - px, y = a[1] + u * dy - py;
    return Math.sqrt(x * x + y * y);
  }

  Viewer.prototype.hit = function (sx, sy) {
    var t = this.t, x = (sx - t.x) / t.k, y = (sy - t.y) / t.k, i;
    if (!this.lay) return null;
    for (i = this.boxes.length - 1; i >= 0; i--) {
      var b = this.boxes[i].b;
      if (x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h) return {type: 'item', it: this.boxes[i].it};
    }
    /* An open group's header title ("− name", drawn from x + 8) is its collapse control: it takes the click
     * before an edge routed over it (with merged edges ELK may run an edge down a frame's inner margin). */
    for (i = this.frames.length - 1; i >= 0; i--) {
      var fh = this.frames[i].b, tw = Math.min(textW('− ' + this.frames[i].it.title, BOLD), fh.w - 12);
      if (x >= fh.x && x <= fh.x + 8 + tw && y >= fh.y && y <= fh.y + CHEAD) return {type: 'frame', it: this.frames[i].it};
    }
    var edges = this.lay.edges;
    for (i = 0; i < edges.length; i++) {
      var l = edges[i].label;
      if (l && x >= l.x && x <= l.x + l.w && y >= l.y && y <= l.y + l.h) return {type: 'edge', ed: edges[i]};
    }
    var best = null, bd = 6 / t.k;
    for (i = 0; i < edges.length; i++) {
      var ed = edges[i], bb = ed.bb;
      if (x < bb[0] - bd || x > bb[2] + bd || y < bb[1] - bd || y > bb[3] + bd) continue;
      for (var j = 1; j < ed.pts.length; j++) {
        var d = distSeg(x, y, ed.pts[j - 1], ed.pts[j]);
        if (d < bd) { bd = d; best = ed; }
      }
    }
    if (best) return {type: 'edge', ed: best};
    for (i = this.frames.length - 1; i >= 0; i--) {
      var f = this.frames[i].b;
      if (x >= f.x && x <= f.x + f.w && y >= f.y && y <= f.y + CHEAD) return {type: 'frame', it: this.frames[i].it};
    }
    return null;
  };

  Viewer.prototype.toggle = function (g, id) {
    if (g <= 0) return;
    if (this.model.open.has(g)) this.model.open.delete(g); else this.model.open.add(g);
    this.relayout(id);
  };

  Viewer.prototype.center = function (id, minK) {
    var b = this.lay && this.lay.boxes[id], p = this.panels[0];
    if (!b) return;
    if (minK && this.t.k < minK) this.t.k = minK;
    this.t.x = p.w / 2 - (b.x + b.w / 2) * this.t.k;
    this.t.y = p.h / 2 - (b.y + b.h / 2) * this.t.k;
    this.moved = true; this.schedule();
  };

  /* Show leaf ``leaf`` as itself (opening its groups), centre and select it. */
  Viewer.prototype.jumpTo = function (leaf, after) {
    var self = this, id = 'n' + leaf;
    var go = function () {
      self.selected = self.model.rep(leaf); self.center(self.selected, 0.8); self.showLeaf(leaf);
      if (after) after();
    };
    if (this.model.reveal(leaf)) {
      var seq = this.layoutSeq + 1;
      this.relayout(null);
      var wait = function () { if (self.layoutSeq === seq && self.vis && self.lay && self.lay.boxes[id]) go(); else setTimeout(wait, 30); };
      wait();
    } else go();
  };

  /* Show group ``g`` open (its ancestors too), centre and select its frame: how search reaches a
   * repeat group (``layers.0–2 ×3``) or a scope by its name. */
  Viewer.prototype.jumpToGroup = function (g) {
    var self = this, id = 'g' + g, groups = this.model.s.groups, changed = false, p = g;
    while (p > 0) { if (!this.model.open.has(p)) { this.model.open.add(p); changed = true; } p = groups[p].parent; }
    var go = function () { self.selected = id; self.center(id, 0.5); };
    if (changed) {
      var seq = this.layoutSeq + 1;
      this.relayout(null);
      var wait = function () { if (self.layoutSeq === seq && self.vis && self.lay && self.lay.boxes[id]) go(); else setTimeout(wait, 30); };
      wait();
    } else go();
  };

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  Viewer.prototype.tensorLink = function (t) {
    var self = this, a = el('a', t, 'gv-link');
    a.href = '#'; a.onclick = function (ev) { ev.preventDefault(); self.selectTensor(t); };
    var shape = this.model.s.tensors[t];
    var span = el('span'); span.appendChild(a);
    if (shape) span.appendChild(el('span', ' ' + shape, 'gv-dim'));
    return span;
  };
  Viewer.prototype.leafLink = function (i) {
    var self = this, lf = this.model.s.leaves[i], a = el('a', lf.full || lf.op, 'gv-link');
    a.href = '#'; a.onclick = function (ev) { ev.preventDefault(); self.jumpTo(i); notifyHost(lf); };
    return a;
  };

  function notifyHost(lf) {
    /* The studio's Graph page embeds the viewer in a same-origin frame and shows the picked node's
       panel (compatibility, per-engine status): tell it which node the user picked. Only user
       clicks notify (a programmatic focus must not start a rerun loop); a file opened on its own,
       or embedded by another origin (no frameElement), tells nobody. */
    var frame = null;
    try { frame = window.frameElement; } catch (e) { frame = null; }
    if (!frame || !lf || lf.kind === 'sealed' || window.origin === 'null') return;
    window.parent.postMessage({gvSelect: String(lf.key)}, window.origin);
  }

  Viewer.prototype.showLeaf = function (i) {
    var lf = this.model.s.leaves[i], d = this.details, self = this;
    d.textContent = '';
    d.dataset.selected = lf.key;
    var h = el('div', null, 'gv-head'); h.appendChild(el('b', lf.op)); h.appendChild(el('span', '  ' + (lf.full || ''), 'gv-dim'));
    d.appendChild(h);
    if (lf.all && lf.all.length) d.appendChild(el('div', lf.all.map(function (a) { return a[0] + ' = ' + a[1]; }).join(' · ')));
    else if (lf.attrs && lf.attrs.length) d.appendChild(el('div', lf.attrs.join(' · ')));
    if (lf.w && lf.w.length) d.appendChild(el('div', 'weights: ' + lf.w.join('  ')));
    [['inputs', lf['in']], ['outputs', lf.out]].forEach(function (pair) {
      if (!pair[1] || !pair[1].length) return;
      var row = el('div'); row.appendChild(el('span', pair[0] + ': ', 'gv-dim'));
      pair[1].forEach(function (t, j) { if (j) row.appendChild(document.createTextNode(' · ')); row.appendChild(self.tensorLink(t)); });
      d.appendChild(row);
    });
    if (lf.flops) d.appendChild(el('div', 'FLOPs: ' + lf.flops.toLocaleString()));
    if (lf.status) d.appendChild(el('div', 'diff: ' + lf.status));
    if (lf.ov) d.appendChild(el('div', 'overlay: ' + lf.ov));
    d.appendChild(el('div', lf.key, 'gv-dim'));
  };

  Viewer.prototype.selectTensor = function (t) {
    /* jump to the producer (opening its groups), and show the tensor with its consumers */
    var self = this, prod = this.model.producer[t];
    this.selTensor = t;
    if (prod !== undefined) this.jumpTo(prod, function () { self.selectTensorDetails(t); });
    else this.selectTensorDetails(t);
    this.schedule();
  };
  Viewer.prototype.selectTensorDetails = function (t) {
    /* jumpTo shows the producer's details; the tensor's stay on top */
    var self = this, d = this.details, prod = this.model.producer[t], cons = this.model.consumers[t] || [];
    var box = el('div', null, 'gv-tensor');
    var h = el('div', null, 'gv-head'); h.appendChild(el('b', 'tensor ')); h.appendChild(el('span', t));
    if (this.model.s.tensors[t]) h.appendChild(el('span', '  ' + this.model.s.tensors[t], 'gv-dim'));
    box.appendChild(h);
    if (prod !== undefined) { var r = el('div'); r.appendChild(el('span', 'producer: ', 'gv-dim')); r.appendChild(this.leafLink(prod)); box.appendChild(r); }
    if (cons.length) {
      var c = el('div'); c.appendChild(el('span', 'consumers: ', 'gv-dim'));
      cons.slice(0, 40).forEach(function (i, j) { if (j) c.appendChild(document.createTextNode(' · ')); c.appendChild(self.leafLink(i)); });
      box.appendChild(c);
    }
    var old = d.querySelector('.gv-tensor'); if (old) old.remove();
    d.insertBefore(box, d.firstChild);
    d.dataset.tensor = t;
  };

  Viewer.prototype.click = function (sx, sy) {
    var h = this.hit(sx, sy);
    if (!h) return;
    if (h.type === 'item') {
      var it = h.it;
      if (it.type === 'group') { this.selected = it.id; this.toggle(it.g, it.id); return; }
      this.selected = it.id; this.selTensor = null;
      delete this.details.dataset.tensor;
      if (it.leaf !== undefined) { this.showLeaf(it.leaf); notifyHost(this.model.s.leaves[it.leaf]); }
      this.schedule();
    } else if (h.type === 'frame') {
      this.toggle(h.it.g, h.it.id);
    } else if (h.type === 'edge') {
      var e = h.ed.e;
      if (e.tensors.length) this.selectTensor(e.tensors[0]);
    }
  };

  Viewer.prototype.bind = function () {
    var self = this, drag = null;
    this.panels.forEach(function (p) {
      var c = p.canvas;
      c.addEventListener('wheel', function (ev) {
        ev.preventDefault();
        var r = c.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
        var f = Math.exp(-ev.deltaY * 0.0015), k = Math.max(0.02, Math.min(4, self.t.k * f));
        f = k / self.t.k;
        self.t.x = mx - (mx - self.t.x) * f; self.t.y = my - (my - self.t.y) * f; self.t.k = k;
        self.moved = true; self.schedule();
      }, {passive: false});
      c.addEventListener('mousedown', function (ev) {
        drag = {x: ev.clientX, y: ev.clientY, tx: self.t.x, ty: self.t.y, moved: false, c: c};
      });
      c.addEventListener('mousemove', function (ev) {
        if (drag) return;
        var r = c.getBoundingClientRect(), h = self.hit(ev.clientX - r.left, ev.clientY - r.top);
        c.style.cursor = h ? 'pointer' : 'grab';
      });
    });
    window.addEventListener('mousemove', function (ev) {
      if (!drag) return;
      var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      self.t.x = drag.tx + dx; self.t.y = drag.ty + dy;
      self.moved = true; self.schedule();
    });
    window.addEventListener('mouseup', function (ev) {
      if (!drag) return;
      var d = drag; drag = null;
      if (!d.moved) { var r = d.c.getBoundingClientRect(); self.click(ev.clientX - r.left, ev.clientY - r.top); }
    });
    var mini = this.mini, mdrag = false;
    function miniMove(ev) {
      var r = mini.getBoundingClientRect(), m = self.miniT, p = self.panels[0];
      if (!m) return;
      var wx = (ev.clientX - r.left - m.ox) / m.s, wy = (ev.clientY - r.top - m.oy) / m.s;
      self.t.x = p.w / 2 - wx * self.t.k; self.t.y = p.h / 2 - wy * self.t.k;
      self.moved = true; self.schedule();
    }
    mini.addEventListener('mousedown', function (ev) { mdrag = true; miniMove(ev); ev.stopPropagation(); });
    window.addEventListener('mousemove', function (ev) { if (mdrag) miniMove(ev); });
    window.addEventListener('mouseup', function () { mdrag = false; });
    var tb = this.root.querySelector('.gv-toolbar');
    tb.querySelector('[data-act=fit]').onclick = function () { self.fit(); };
    tb.querySelector('[data-act=in]').onclick = function () { self.zoomBy(1.25); };
    tb.querySelector('[data-act=out]').onclick = function () { self.zoomBy(0.8); };
    tb.querySelector('[data-act=reset]').onclick = function () {
      self.model.open = new Set(self.model.initialOpen); self.placed = false; self.moved = false; self.relayout(null);
    };
    var search = tb.querySelector('input'), hits = [], at = 0;
    search.addEventListener('keydown', function (ev) {
      if (ev.key !== 'Enter') return;
      var q = search.value.trim().toLowerCase();
      if (!q) return;
      if (!hits.q || hits.q !== q) {
        hits = []; hits.q = q; at = 0;
        /* groups first (a decoder's repeat ``layers.0–2 ×3``, a scope), by label or key, then nodes */
        var groups = self.model.s.groups, ng = 0;
        for (var g = 1; g < groups.length; g++) {
          if ((groups[g].label || '').toLowerCase().indexOf(q) >= 0 || (groups[g].key || '').toLowerCase().indexOf(q) >= 0) {
            hits.push('g' + g); ng++;
          }
        }
        self.model.s.leaves.forEach(function (lf, i) {
          if ((lf.full || '').toLowerCase().indexOf(q) >= 0 || (lf.op || '').toLowerCase().indexOf(q) >= 0) hits.push(i);
        });
        hits.groups = ng;
      }
      self.status.textContent = hits.length + ' match' + (hits.length === 1 ? '' : 'es')
        + (hits.groups ? ' (' + hits.groups + ' group' + (hits.groups === 1 ? '' : 's') + ' first)' : '');
      if (hits.length) {
        var h = hits[at % hits.length]; at++;
        if (typeof h === 'string') self.jumpToGroup(+h.slice(1)); else self.jumpTo(h);
      }
    });
    window.addEventListener('keydown', function (ev) {
      if (ev.target && ev.target.tagName === 'INPUT') return;
      if (ev.key === 'f') self.fit();
    });
  };
  Viewer.prototype.zoomBy = function (f) {
    var p = this.panels[0], mx = p.w / 2, my = p.h / 2, k = Math.max(0.02, Math.min(4, this.t.k * f));
    f = k / this.t.k; this.t.x = mx - (mx - this.t.x) * f; this.t.y = my - (my - this.t.y) * f; this.t.k = k;
    this.moved = true; this.schedule();
  };

  /* ---------- start ---------- */
  var root = document.getElementById('gv-root');
  var viewer = new Viewer(root, DATA);
  viewer.relayout(null);
  if (DATA.scene.focus !== null && DATA.scene.focus !== undefined) {
    /* opened on a node (the Nodes page's selection, a bookmarked node=): reveal it once drawn */
    var focusWait = function () { if (viewer.lay) viewer.jumpTo(DATA.scene.focus); else setTimeout(focusWait, 30); };
    focusWait();
  }
  /* What tests and the benchmark read (the renderer's own computed rects, screen px). */
  window.__graph = {
    viewer: viewer,
    labels: function (panel) { return viewer.panels[panel || 0].labels.slice(); },
    transform: function () { return {k: viewer.t.k, x: viewer.t.x, y: viewer.t.y}; },
    fitMode: function () { return viewer.fitMode || null; },
    minimapRect: function () { var r = viewer.mini.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; },
    drawingRect: function (panel) {
      var r = viewer.panels[panel || 0].canvas.getBoundingClientRect(), b = viewer.bounds, t = viewer.t;
      return {x: b.x * t.k + t.x + r.left, y: b.y * t.k + t.y + r.top, w: b.w * t.k, h: b.h * t.k};
    },
    canvasRect: function (panel) { var r = viewer.panels[panel || 0].canvas.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; },
    engine: function () { return viewer.engine.kind; },
    /* ELK's worker starts no more work of its own: its warm-up runs ended, or it was never asked */
    elkIdle: function () { var e = viewer.engine; return !e.worker || !!e.warmed || !e.seq; },
    layoutMs: function () { return viewer.layoutMs; },
    visibleCount: function () { return viewer.vis ? viewer.vis.order.filter(function (id) { return viewer.vis.items[id].type !== 'open'; }).length : 0; },
    edges: function () { return viewer.vis ? viewer.vis.edges.map(function (e) { return [e.src, e.dst, e.tensors.slice(), e.text]; }) : []; },
    rectOf: function (key, panel) {
      var id = viewer.model.byKey[key]; if (!id) return null;
      var s = viewer.screenOf(id); if (!s) return null;
      var r = viewer.panels[panel || 0].canvas.getBoundingClientRect();
      return {x: s.x + r.left, y: s.y + r.top, w: s.w, h: s.h};
    },
    edgeLabelRect: function (tensor, panel) {
      if (!viewer.lay) return null;
      var r = viewer.panels[panel || 0].canvas.getBoundingClientRect(), t = viewer.t;
      for (var i = 0; i < viewer.lay.edges.length; i++) {
        var ed = viewer.lay.edges[i];
        if (ed.label && ed.e.tensors.length === 1 && ed.e.tensors[0] === tensor)
          return {x: ed.label.x * t.k + t.x + r.left, y: ed.label.y * t.k + t.y + r.top, w: ed.label.w * t.k, h: ed.label.h * t.k};
      }
      return null;
    },
    selected: function () { var id = viewer.selected; if (!id) return null; var it = viewer.vis && viewer.vis.items[id];
      if (it && it.leaf !== undefined) return viewer.model.s.leaves[it.leaf].key;
      if (it && it.g !== undefined) return 'group:' + viewer.model.s.groups[it.g].key; return null; },
    isOpen: function (key) { var id = viewer.model.byKey['group:' + key]; return !!id && viewer.model.open.has(+id.slice(1)); },
    layoutSeq: function () { return viewer.layoutSeq; },
    ready: function () { return !!viewer.lay && !viewer.raf && !viewer.refining; },
    layoutKind: function () { return viewer.lay ? (viewer.lay.quick ? 'quick' : 'elk') : null; },
    layoutWhere: function () { return viewer.lay ? (viewer.lay.quick ? viewer.quickWhere : viewer.engine.kind) : null; },
    frames: function () { return viewer.frameCount; },
    pixel: function (x, y, panel) {       /* the canvas colour at screen point (x, y), '#rrggbb' */
      var c = viewer.panels[panel || 0].canvas, r = c.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
      var d = c.getContext('2d').getImageData(Math.round((x - r.left) * dpr), Math.round((y - r.top) * dpr), 1, 1).data;
      return '#' + [d[0], d[1], d[2]].map(function (v) { return (v < 16 ? '0' : '') + v.toString(16); }).join('');
    }
  };
});
