// minivllm docs: long names in the contents ("on this page" and the chapter list), such as
// `Scheduler.update_from_output`, may break only after a dot or an underscore (a <wbr> there),
// never mid-word; _static/custom.css turns off the theme's break-anywhere wrapping.
// docs/browser_check.py checks every line break of these entries.
(function () {
  function soften(root) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const nodes = [];
    let n;
    while ((n = walker.nextNode())) if (/[._][^\s]/.test(n.nodeValue)) nodes.push(n);
    nodes.forEach(function (t) {
      const parts = t.nodeValue.split(/(?<=[._])(?=[^\s._])/);
      if (parts.length < 2) return;
      const frag = document.createDocumentFragment();
      parts.forEach(function (p, i) {
        if (i) frag.appendChild(document.createElement("wbr"));
        frag.appendChild(document.createTextNode(p));
      });
      t.parentNode.replaceChild(frag, t);
    });
  }
  function run() {
    document.querySelectorAll(".bd-sidebar-secondary nav a, .bd-sidebar-primary nav a").forEach(soften);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
  else run();
})();
