"""Sortable, filterable HTML tables for the static pages (inline script, nothing from the network).

``sortable_table(table_id, headers, rows)`` returns a filter box and a ``<table>``: clicking a
header sorts by that column (numbers as numbers, again to reverse), typing in the box keeps the rows
whose text contains every word typed. ``TABLE_SCRIPT`` is included once per page.
"""

from __future__ import annotations

import html

TABLE_SCRIPT = """<script>
document.querySelectorAll('table.sortable').forEach(function (t) {
  var body = t.tBodies[0];
  t.querySelectorAll('th').forEach(function (th, col) {
    th.style.cursor = 'pointer';
    th.addEventListener('click', function () {
      var up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
      var rows = Array.from(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].textContent, y = b.cells[col].textContent, nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return up ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var box = document.getElementById(t.id + '-filter');
  if (box) box.addEventListener('input', function () {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
    Array.from(body.rows).forEach(function (r) {
      var text = r.textContent.toLowerCase();
      r.style.display = words.every(function (w) { return text.indexOf(w) >= 0; }) ? '' : 'none';
    });
  });
});
</script>"""


def sortable_table(table_id: str, headers: list[str], rows: list[list[str]]) -> str:
    """A filter box and a sortable table; ``rows`` hold already escaped cell HTML."""
    tid = html.escape(table_id)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<p><input id="{tid}-filter" type="search" placeholder="filter rows (e.g. a layer number or a regime)" size="40"> '
        "(click a column header to sort)</p>"
        f'<table class="sortable" id="{tid}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )
