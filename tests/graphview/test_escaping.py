"""R28: node, tensor and op names with HTML, DOT and Markdown metacharacters,
newlines and megabyte lengths render literally and safely in every output:
ECharts labels and tooltips, DOT, SVG and HTML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from studio import api
from studio.graphview.dot import dot_to_svg
from studio.graphview.echarts import echarts_option
from studio.graphview.escape import canvas_label, display, dot_string, html_text, json_for_script
from tests.conftest import parse_model, save
from tests.requirements import require

SCRIPT = "<script>alert(1)</script>"
DOT_BREAK = 'x"]; injected [label="pwned'
MD_LINK = "[x](javascript:alert(1))"
HOSTILE = [SCRIPT, DOT_BREAK, MD_LINK, "line1\nline2\r\u2028", "{b}{a|rich}&lt;img src=x&gt;\\N\\G",
           "<img src=x onerror=alert(1)>", "A" * 1_000_000]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) '
                    '{ a = Relu(x) b = Neg(a) c = Relu(b) d = Neg(c) e = Relu(d) f = Neg(e) y = Relu(f) }')
    for n, name in zip(m.graph.node, HOSTILE):
        n.name = name
    # A hostile tensor name on an edge, too (renamed on both ends).
    m.graph.node[0].output[0] = m.graph.node[1].input[0] = "</script><b>edge</b>"
    path = save(m, tmp_path_factory.mktemp("evil") / "evil.onnx")
    h = api.load(path)
    s = api.inspect(h)
    idx = api.graph_index(h, s)
    return h, s, idx, api.graph_view(index=idx, summary=s)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_escape_helpers():
    assert html_text(SCRIPT) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert html_text("{b}") == "&#123;b&#125;"
    assert display("a\nb") == "a\\nb" and len(display("x" * 10**6)) == 300
    assert "{" not in canvas_label("{a|b}") and "|" not in canvas_label("{a|b}")
    assert dot_string(DOT_BREAK) == '"x\\"]; injected [label=\\"pwned"'
    assert dot_string("a\\Nb&lt;") == '"a\\\\Nb&amp;lt;"'
    script_json = json_for_script({"k": SCRIPT + "\u2028"})
    assert "<" not in script_json and "\u2028" not in script_json
    assert json.loads(script_json) == {"k": SCRIPT + "\u2028"}


def test_echarts_option_is_literal_and_inert(hostile):
    *_, view = hostile
    option = echarts_option(view)
    text = json.dumps(option)
    assert len(text) < 200_000                  # the 1 MB name is truncated everywhere
    data = option["series"][0]["data"]
    # Labels are canvas text (drawn, never parsed), so they keep "<" literally; everything
    # else that ECharts may treat as HTML is escaped.
    for s in _strings([{k: v for k, v in d.items() if k != "name"} for d in data] + option["series"][0]["links"]):
        assert "<script" not in s and "<img" not in s and "\n" not in s and "\u2028" not in s
    assert "<img src=x onerror=alert(1)>"[:48] in [d["name"] for d in data]
    tips = [d["tooltip"]["formatter"] for d in data]
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in t for t in tips)
    assert any("&lt;/script&gt;&lt;b&gt;edge" in t["tooltip"]["formatter"] for t in option["series"][0]["links"])
    # Only our own markup: <b>, <br>, <i>; model braces cannot reach ECharts' templates.
    for t in tips:
        assert set(re.findall(r"<(/?\w+)", t)) <= {"b", "/b", "br", "i", "/i"}
        assert "{" not in t and "}" not in t
    for d in data:
        assert not set(d["name"]) & set("{}|\n")


def test_dot_is_literal(hostile):
    *_, view = hostile
    dot = api.graph_dot(view)
    # Blank out every quoted string (with its escapes): what is left is our structure only.
    bare = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', dot)
    assert "injected" not in bare and "pwned" not in bare and "script" not in bare
    for line in bare.splitlines():
        s = line.strip()
        if s and not s.startswith(("digraph", "graph [", "node [", "edge [", "}", "subgraph", "label=")):
            assert re.match(r"^n\d+( -> n\d+)? \[", s), s[:80]


def test_svg_shows_the_names_literally(hostile):
    require("GRAPHVIZ")
    *_, view = hostile
    svg = dot_to_svg(api.graph_dot(view))
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert not list(root.iter(f"{ns}script")) and not list(root.iter(f"{ns}foreignObject"))
    texts = [t.text or "" for t in root.iter(f"{ns}text")]
    titles = [el.get("{http://www.w3.org/1999/xlink}title") or "" for el in root.iter()]
    assert any(f"node: {SCRIPT}\n" in t for t in titles)      # the tooltip shows the name exactly
    assert "script>" in texts                                  # the label: its last scope part, as text
    assert any(t.startswith('x"]; injected [label="pwned') for t in texts)
    assert any("&lt;img" in t for t in texts)    # an entity in a name stays an entity, literally
    assert any("\\N\\G" in t for t in texts)     # graphviz escapes are not expanded
    nodes = [g for g in root.iter(f"{ns}g") if g.get("class") == "node"]
    assert len(nodes) == len(view)               # no injected node


def test_html_page_has_only_our_scripts(hostile):
    *_, view = hostile
    page = api.graph_html(view)
    assert page.count("<script") == 3 and page.lower().count("</script") == 3
    assert SCRIPT not in page and "<img" not in page and "<b>edge" not in page
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)    # the page outside its scripts
    assert "href=" not in markup and "<a " not in markup
    data = page.split('id="gv-data">', 1)[1].split("</script>", 1)[0]
    payload = json.loads(data)
    assert any(SCRIPT[:20] in k for k in payload["panels"][0]["keys"])   # the keys keep the text, as JSON


def test_markdown_link_is_not_a_link_in_tables(hostile):
    from studio.graphview.html import Table, table_html
    html = table_html(Table(MD_LINK, ("h",), ((MD_LINK,),)))
    assert "<a" not in html and "javascript:alert(1)" in html      # literal text, never a link


def test_script_json_escapes_each_character_alone_and_together():
    """Each escape is applied only where its character occurs (a test before each replace): every one of the
    five alone, twice, with the others, and a document holding none comes back as ``json.dumps`` wrote it."""
    for ch in "<>&\u2028\u2029":
        for text in (ch, f"a{ch}b{ch}", "<>&\u2028\u2029"):
            out = json_for_script({"k": text})
            assert not set(out) & set("<>&\u2028\u2029") and json.loads(out) == {"k": text}
    assert json_for_script({"k": "plain × text"}) == json.dumps({"k": "plain × text"}, ensure_ascii=False,
                                                                  separators=(",", ":"))
