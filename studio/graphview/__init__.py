"""Graph views of a model (no Streamlit here; the UI, the CLI and reports use it).

model (graph of every node and subgraph) -> hierarchy (groups) -> project (a cut at
a level) -> layout (layered, O(N+E)) -> overlays (colours) -> view (GraphView) ->
echarts / dot / html / output. diff + lineage + diffview compare two versions.
The box viewer: boxes (what a node box says) -> scene (JSON for the browser) ->
viewer (one HTML with vendor/elk.bundled.js and web/renderer.js; ELK lays out there).
"""
