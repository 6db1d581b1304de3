const EMBED = {mode: 'vega-lite', actions: {export: true, source: false, compiled: false, editor: false}};
function taskOf(row) {
  if (typeof row.task === 'string') return row.task;
  if (typeof row.dump === 'string') return row.dump.split('/')[0];
  return null;
}
function embed(id, spec) {
  return vegaEmbed('#' + id, spec, EMBED)
    .then(() => document.getElementById(id).setAttribute('data-rendered', 'true'))
    .catch(error => { console.error('chart ' + id + ': ' + error); });
}
function renderCharts() {
  const specs = JSON.parse(document.getElementById('chart-specs').textContent);
  const done = Object.entries(specs).map(([id, spec]) => embed(id, spec));
  Promise.all(done).then(() => document.body.setAttribute('data-charts-rendered', String(done.length)));
  // per-task choice: redraw the figure from its own spec with only that task's rows
  for (const select of document.querySelectorAll('select[data-chart]')) {
    select.addEventListener('change', () => {
      const id = select.dataset.chart, spec = structuredClone(specs[id]);
      if (select.value) {
        for (const name of Object.keys(spec.datasets)) {
          spec.datasets[name] = spec.datasets[name].filter(row => taskOf(row) === select.value);
        }
      }
      document.getElementById(id).removeAttribute('data-rendered');
      embed(id, spec);
    });
  }
}
function wireTables() {
  for (const block of document.querySelectorAll('.table-block')) {
    const body = block.querySelector('tbody'), count = block.querySelector('.count');
    const rows = Array.from(body.rows);
    block.querySelector('.filter').addEventListener('input', event => {
      const needle = event.target.value.toLowerCase();
      let shown = 0;
      for (const row of rows) {
        const keep = row.textContent.toLowerCase().includes(needle);
        row.style.display = keep ? '' : 'none';
        shown += keep;
      }
      count.textContent = shown + ' of ' + rows.length + (rows.length === 1 ? ' row' : ' rows');
    });
    block.querySelectorAll('th').forEach((th, column) => th.addEventListener('click', () => {
      const ascending = !th.classList.contains('asc');
      block.querySelectorAll('th').forEach(other => other.classList.remove('asc', 'desc'));
      th.classList.add(ascending ? 'asc' : 'desc');
      const numeric = th.dataset.numeric === '1';
      const key = row => row.cells[column].dataset.key;
      const compare = numeric
        ? (a, b) => (key(a) === '' ? Infinity : Number(key(a))) - (key(b) === '' ? Infinity : Number(key(b)))
        : (a, b) => key(a).localeCompare(key(b));
      rows.sort((a, b) => ascending ? compare(a, b) : compare(b, a));
      rows.forEach(row => body.appendChild(row));
    }));
  }
}
wireTables();
renderCharts();
