/* Starts ELK's web worker as soon as ELK's text has been parsed, before the page's model data and the
 * renderer (issue 35): the worker compiles the 1.6 MB and initialises ELK while the main thread parses the
 * data and draws the quick layout, so ELK's layout can begin the moment the renderer asks for it.
 * The renderer adopts ``window.__gvElk.worker`` (or calls ``__gvElkStart`` itself when it is null). */
(function () {
  'use strict';
  /* Only the layered algorithm is registered: ELK registers its nine algorithms (their option metadata
   * and factories) when the first layout arrives, and the viewer uses one. Registering 'layered' alone cut
   * the first layout of nudenet_320n's and llama_optimum's opening views ~40 % (446 -> 240 ms and
   * 414 -> 258 ms in Chromium, median of 3) with the same result, so ELK settles sooner on small models. */
  window.__gvElkInit = {algorithms: ['layered']};
  /* The worker's side, run after ELK's source in the worker (as text: it is not called in the page).
   * After its first answer, while idle, it lays out that first graph again up to WARM times, stopping as
   * soon as a real request comes: elkjs's code is still cold after one layout, and these runs make the
   * next layouts (a group opened, everything opened) faster. In Chromium (median of 5, load ~5): the next
   * layout (one group opened) 344 -> 198-219 ms on nudenet_320n, 357 -> 235-256 ms on llama_optimum; the
   * fully opened one 729 -> 618-662 ms and 826 -> 673-700 ms (1 to 3 runs). Each run leaves its garbage in
   * the worker's heap until V8's memory reducer runs (~30 s later), so WARM is a trade of memory for speed
   * (2026-12-05, Intel Xeon, Chromium 150, llama_optimum, renderer USS once the runs ended / fully opened
   * settled from first paint, bench sequence, median of 5): none 113-115 MB; two 121 MB / 0.58 s; three
   * 121-122 MB / 0.55 s; four 137 MB; six 143-148 MB / 0.51 s (Netron's renderer: 141-143 MB). Three keep
   * most of six's speed and the renderer under Netron's; nudenet_320n's fully opened was within noise
   * (0.64 s with three, 0.70 s with six). When the runs end (or a request cut them short) the worker says
   * ``{warmed: true}``, so a benchmark can read memory once the page is idle. A click while one runs waits
   * for it (the quick layout still paints at once). */
  function elkWorkerMain(init, WARM) {
    var elk = self.__elk = new ELK(init), warm = WARM, first = null, told = false;  /* self.__elk: what tests ask */
    function warmed() { if (!told) { told = true; self.postMessage({warmed: true}); } }   /* no more runs start */
    function again() {
      if (warm-- <= 0 || !first) return warmed();
      elk.layout(JSON.parse(first)).then(function () { setTimeout(again, 0); }, function () { warm = 0; warmed(); });
    }
    self.onmessage = function (e) {
      warm = first === null ? warm : 0;
      if (first === null) first = JSON.stringify(e.data.g);
      elk.layout(e.data.g).then(function (r) {
        self.postMessage({id: e.data.id, g: r});
        if (warm > 0) setTimeout(again, 0); else warmed();
      }, function (err) {
        self.postMessage({id: e.data.id, err: String(err && err.message || err)});
      });
    };
  }
  window.__gvElkStart = function () {
    var src = document.getElementById('elk-src').textContent;
    var glue = '\n;(' + elkWorkerMain.toString() + ')(' + JSON.stringify(window.__gvElkInit) + ', 3);';
    return new Worker(URL.createObjectURL(new Blob([src, glue], {type: 'text/javascript'})));
  };
  var st = window.__gvElk = {worker: null, at: performance.now(), failed: false};
  try {
    st.worker = window.__gvElkStart();
    /* a failure before the renderer's handler exists is remembered; the renderer then falls back */
    st.worker.onerror = function (ev) { if (ev.preventDefault) ev.preventDefault(); st.failed = true; };
  } catch (e) { st.worker = null; }
})();
