// Set-up for the ipywidgets HTML manager on the static site.
(function () {
  // Tell RequireJS where the manager lives, so the files it loads at run time (icon fonts)
  // come from this site's _static/vendor/ folder, on every page at any depth.
  var base = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": base + "html-manager" } });

  // The manager typesets widget labels with MathJax 2's MathJax.Hub.Queue; the book loads
  // MathJax 3, which has no Hub. Forward those calls to MathJax 3 once it has loaded (it
  // replaces the global MathJax object when it starts, so the shim is added at window load,
  // before the widgets render).
  window.addEventListener("load", function () {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var element = job && job[2];
          if (element && mj.typesetPromise) mj.typesetPromise([element]);
        },
      };
    }
  });
})();
