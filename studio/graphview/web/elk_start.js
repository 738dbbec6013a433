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
  window.__gvElkStart = function () {
    var src = document.getElementById('elk-src').textContent;
    var glue = '\n;var __elk=new ELK(' + JSON.stringify(window.__gvElkInit) + ');self.onmessage=function(e){__elk.layout(e.data.g).then(' +
      'function(r){self.postMessage({id:e.data.id,g:r});},function(err){self.postMessage({id:e.data.id,' +
      'err:String(err&&err.message||err)});});};';
    return new Worker(URL.createObjectURL(new Blob([src, glue], {type: 'text/javascript'})));
  };
  var st = window.__gvElk = {worker: null, at: performance.now(), failed: false};
  try {
    st.worker = window.__gvElkStart();
    /* a failure before the renderer's handler exists is remembered; the renderer then falls back */
    st.worker.onerror = function (ev) { if (ev.preventDefault) ev.preventDefault(); st.failed = true; };
  } catch (e) { st.worker = null; }
})();
