"""Graph views of a model (no Streamlit here; the UI, the CLI and reports use it).

model (graph of every node and subgraph) -> hierarchy (groups) -> project (a cut at
a level) -> layout (layered, O(N+E)) -> overlays (colours) -> view (GraphView) ->
echarts / dot / html / output. diff + lineage + diffview compare two versions.
"""
