// Tell RequireJS where the ipywidgets HTML manager lives, so the files it loads at run time
// (icon fonts) come from this site's _static/vendor/ folder, on every page at any depth.
(function () {
  var base = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": base + "html-manager" } });
})();
