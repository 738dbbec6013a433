// Entry of the vendored ECharts build (scripts/build_echarts_bundle.sh): only what
// the graph view draws, so the offline HTML stays about half the size of echarts.min.js.
import * as echarts from 'echarts/core';
import { GraphChart } from 'echarts/charts';
import { TooltipComponent, TitleComponent } from 'echarts/components';
import { CanvasRenderer } from 'echarts/renderers';

echarts.use([GraphChart, TooltipComponent, TitleComponent, CanvasRenderer]);
window.echarts = echarts;
