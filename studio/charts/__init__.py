"""Presentation shared by the pages and the facade's figure builders (studio.precision.charts,
studio.accuracy.charts): the Plotly layout conventions every chart applies (:mod:`studio.charts.layout`).
Front-end code, so not in core; below the capabilities, which build figures the facade hands out."""
