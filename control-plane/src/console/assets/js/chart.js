// Line charts drawn by the console itself: SVG built from elements (no library, nothing inline for the page's
// Content-Security-Policy to refuse), one line per run of reported minutes (a minute no gateway reported breaks
// the line rather than being drawn as zero), the number of points in `data-points`.

const NS = 'http://www.w3.org/2000/svg';
const [W, H, LEFT, BOTTOM, TOP, RIGHT] = [640, 170, 56, 22, 10, 10];

function svg(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

// Axis times in UTC, as every other time the console shows (`HH:MMZ`).
const clock = (secs) => `${new Date(secs * 1000).toISOString().slice(11, 16)}Z`;
export const short = (n) => Number(n || 0).toLocaleString('en-US', { maximumFractionDigits: n < 10 ? 2 : 0 });

// A chart of `value(point)` over `points` (`{minute, ...}`, oldest first) from `from` to `to` (Unix seconds).
export function lineChart(id, title, points, value, from, to) {
  const values = points.map(value).map((v) => Number(v || 0));
  const max = Math.max(0, ...values) || 1;
  const x = (t) => LEFT + ((t - from) / Math.max(1, to - from)) * (W - LEFT - RIGHT);
  const y = (v) => TOP + (H - TOP - BOTTOM) * (1 - v / max);
  const chart = svg('svg', { id, class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title,
    'data-points': points.length, 'data-max': Math.max(0, ...values) });
  for (const share of [0, 0.5, 1]) {
    chart.append(svg('line', { class: share ? 'grid' : 'axis', x1: LEFT, x2: W - RIGHT, y1: y(max * share), y2: y(max * share) }),
      svg('text', { class: 'tick', x: LEFT - 6, y: y(max * share) + 4, 'text-anchor': 'end' }, short(max * share)));
  }
  chart.append(svg('line', { class: 'axis', x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM }),
    svg('text', { class: 'tick', x: LEFT, y: H - 6 }, clock(from)),
    svg('text', { class: 'tick', x: W - RIGHT, y: H - 6, 'text-anchor': 'end' }, clock(to)));
  let run = [];
  const draw = () => {
    if (run.length === 1) chart.append(svg('circle', { class: 'dot', cx: run[0][0], cy: run[0][1], r: 2.5 }));
    if (run.length > 1) chart.append(svg('polyline', { class: 'line', points: run.map((p) => p.join(',')).join(' ') }));
    run = [];
  };
  points.forEach((point, i) => {
    if (i > 0 && point.minute - points[i - 1].minute > 60) draw();
    run.push([x(point.minute).toFixed(1), y(values[i]).toFixed(1)]);
  });
  draw();
  const last = values.length ? short(values[values.length - 1]) : 'no data';
  const caption = document.createElement('figcaption');
  caption.append(title, ' ');
  const now = document.createElement('span');
  now.className = 'muted';
  now.textContent = `(last minute: ${last})`;
  caption.append(now);
  const figure = document.createElement('figure');
  figure.className = 'chart-box';
  figure.append(caption, chart);
  return figure;
}
