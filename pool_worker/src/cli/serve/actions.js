// pool_worker serve: ask before a destructive action. A form with
// data-confirm is sent only if the person confirms; its confirm field is
// then set to "yes" (without it, the server asks on a page of its own).
document.addEventListener("submit", function (e) {
  var f = e.target;
  var ask = f.getAttribute("data-confirm");
  if (!ask) return;
  if (!window.confirm(ask)) { e.preventDefault(); return; }
  f.elements["confirm"].value = "yes";
});
