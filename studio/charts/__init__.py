"""Presentation: the Plotly figures of capability results the facade's charts room hands out
(:mod:`studio.charts.precision`, :mod:`studio.charts.accuracy`) and the layout conventions every chart applies,
the pages' own too (:mod:`studio.charts.layout`, a leaf). Front-end code, so not in core and not in the
capabilities; it reads their result types, so it sits above them. This file imports nothing: a page importing
the layout leaf loads no capability."""
