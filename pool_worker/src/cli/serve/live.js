// pool_worker serve: refresh the live part of the page every 2 seconds.
// The server renders (and escapes) the HTML; this only swaps it in.
(function () {
  var live = document.getElementById("live");
  if (!live) return;
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    fetch("/live", { cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { live.innerHTML = html; live.classList.remove("stale"); })
      .catch(function () { live.classList.add("stale"); })
      .finally(function () { busy = false; });
  }, 2000);
})();
