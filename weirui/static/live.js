// weir dashboard: hold the live part's poll while the reader is in it.
// A poll replaces the part, which would take the keyboard focus, the text
// selection or the element under the pointer away; and a hidden tab need not
// query the database. The part counts the polls it held in data-held.
document.addEventListener("htmx:beforeRequest", function (ev) {
  var live = ev.detail.elt;
  if (!live || live.id !== "live") {
    return;
  }
  var sel = document.getSelection();
  var reading = live.contains(document.activeElement) || live.matches(":hover") ||
    (sel && !sel.isCollapsed && live.contains(sel.anchorNode));
  if (reading || document.hidden) {
    ev.preventDefault();
    live.dataset.held = String(Number(live.dataset.held || "0") + 1);
  }
});
