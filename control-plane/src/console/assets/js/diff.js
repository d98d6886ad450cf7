// A side-by-side line diff of two texts (route versions, audit before/after, an edit against the server's copy).

import { h } from './dom.js';

// Rows of [left line number, left text, right line number, right text, kind]; kind is same, del, add or change.
export function diffRows(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  // Longest common subsequence, suffix table: documents here are a few hundred lines.
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const rows = [];
  let dels = [];
  let adds = [];
  const flush = () => {
    for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
      const d = dels[k];
      const a2 = adds[k];
      rows.push([d ? d[0] : '', d ? d[1] : '', a2 ? a2[0] : '', a2 ? a2[1] : '',
        d && a2 ? 'change' : d ? 'del' : 'add']);
    }
    dels = [];
    adds = [];
  };
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) {
      flush();
      rows.push([i + 1, x[i], j + 1, y[j], 'same']);
      i++;
      j++;
    } else if (j >= m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1])) {
      dels.push([i + 1, x[i]]);
      i++;
    } else {
      adds.push([j + 1, y[j]]);
      j++;
    }
  }
  flush();
  return rows;
}

export function diffView(leftTitle, left, rightTitle, right) {
  const rows = diffRows(left, right);
  const changed = rows.filter((r) => r[4] !== 'same').length;
  return h('div', { class: 'diff' },
    h('p', { class: 'diff-summary', text: changed ? `${changed} line(s) differ` : 'identical' }),
    h('table', { class: 'diff-table' },
      h('colgroup', {}, h('col', { class: 'ln' }), h('col'), h('col', { class: 'ln' }), h('col')),
      h('thead', {}, h('tr', {}, h('th', { colspan: 2, text: leftTitle }), h('th', { colspan: 2, text: rightTitle }))),
      h('tbody', {}, rows.map(([ln, lt, rn, rt, kind]) => h('tr', { class: kind },
        h('td', { class: 'ln', text: ln }), h('td', { class: 'code left', text: lt }),
        h('td', { class: 'ln', text: rn }), h('td', { class: 'code right', text: rt }))))));
}
